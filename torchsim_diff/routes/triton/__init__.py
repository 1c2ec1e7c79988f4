"""Routes `triton` (Triton's interpreter) and `triton-cuda` (a GPU): Inductor's Triton kernels.

    triton         the Routes
    shims          every patch of torch/triton internals these routes need
    launch_replay  one captured launch run standalone (interpreter or CUDA) and diffed against its outputs
    localise       the first captured launch whose outputs diverge from a reference executor
"""
