"""Routes `triton` (Triton's interpreter) and `triton-cuda` (a GPU): Inductor's Triton kernels.

    triton         the Routes
    shims          every patch of torch/triton internals these routes need
"""
