"""torchsim-diff: differential fuzz testing of PyTorch compiler routes down to NPU simulators."""

__version__ = "0.1.0"
