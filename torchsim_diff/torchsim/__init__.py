"""Support code for the PyTorchSim routes (`torchsim-mlir`, `torchsim-triton`).

One concept per module:
    generation  which generation of PyTorchSim a checkout is (A, B, C1, C2), from its files
    probe       what the PyTorchSim interpreter can import (run as a subprocess)
    config      the machine config YAML and the per-case environment (fresh dump path)
    capture     the case's log: fd-level capture of PyTorchSim and simulator output
    timeouts    a time limit for each simulator subprocess, and crash (signal) capture
    classify    PyTorchSim's failure texts -> our failure kinds plus a stage
    artifacts   kernel workdirs: the stage each reached, copies for a failure, cycles,
                ops left on extern_kernels
    workdir     a PyTorchSim Triton kernel workdir -> the `triton` route's kernel capture

Worker-side: everything here imports only the standard library (and torch inside
functions), because it runs under PyTorchSim's own interpreter.
"""
