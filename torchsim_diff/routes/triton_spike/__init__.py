"""Route `triton-spike`: Inductor's Triton kernels -> TTIR -> triton-adapter-opt -> linalg ->
LLVM -> rv64gcv -> Spike, launched by our own launcher. One module per concept:

    triton_spike.py  the Route (registered as torchsim_diff.routes.triton_spike.triton_spike:TritonSpikeRoute)
    launcher.py   the launcher: specialisation, ELF cache, launch plan, Spike run, write-back
    ttir.py       stage ttir: triton's front end in a child Python without TRITON_INTERPRET
    fixups.py     the table of textual version fix-ups (TTIR for the adapter, linalg for mlir-opt)
    toolchain.py  tools, the adapter's location and version, stages adapter..link
    runtime/      the driver that walks the grid on Spike, memrefCopy, their header
"""
