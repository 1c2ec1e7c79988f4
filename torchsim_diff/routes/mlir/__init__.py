"""Route `mlir`: torch-mlir's linalg lowered to LLVM and JIT-run on the host.

    mlir           the Route
    lowering       torch.export -> torch-mlir linalg -> LLVM dialect (shared with `spike`)
"""
