"""Route `spike`: torch-mlir linalg -> LLVM IR -> rv64gcv ELF -> Spike.

    spike          the Route
    runtime/       the bare-metal C runtime the ELF links
"""
