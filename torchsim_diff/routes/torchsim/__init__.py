"""Routes `torchsim-mlir` and `torchsim-triton`: PyTorchSim's two compiler routes, and their support.

One concept per module:
    torchsim    the Routes
    generation  which generation of PyTorchSim a checkout is (A, B, C1, C2), from its files
    probe       what the PyTorchSim interpreter can import (run as a subprocess)
    config      the machine config YAML and the per-case environment (fresh dump path)
    log_capture the case's log: fd-level capture of PyTorchSim and simulator output
    subprocess_limits a time limit for each simulator subprocess, and crash (signal) capture
    failure_text PyTorchSim's failure texts -> our failure kinds plus a stage
    artifacts   kernel workdirs: the stage each reached, copies for a failure, cycles,
                ops left on extern_kernels
    workdir     a PyTorchSim Triton kernel workdir -> the `triton` route's kernel capture

    device      PyTorchSim's npu device and moving inputs onto it
    kernel_repro a kernel-level reproducer from one converted launch

Worker-side: everything but `torchsim` imports only the standard library (and torch inside
functions), because it runs under PyTorchSim's own interpreter.
"""
