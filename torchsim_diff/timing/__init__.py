"""TOGSim, PyTorchSim's cycle-level NPU model: tile-operation graphs written for it, its runs and
log, and the checks on its timings that need no second timing model (docs/togsim.md)."""
