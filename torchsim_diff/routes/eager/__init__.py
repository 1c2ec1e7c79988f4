"""Route `eager`: the program run by eager PyTorch in the case dtype (a sanity route)."""
