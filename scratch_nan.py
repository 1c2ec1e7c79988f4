import os, sys, torch
nan = float("nan")
def argmax(x): return torch.argmax(x, dim=0)
def maxdim(x): return torch.max(x, dim=0).values
cases = [(argmax, [0.0, 0.0, 0.0, nan, 0.0]), (maxdim, [1.0] * 16 + [nan]), (maxdim, [1.0] * 4 + [nan]),
         (argmax, [0.0, nan]), (argmax, [nan, 0.0, 0.0])]
dev = sys.argv[1]
for fn, vals in cases:
    torch._dynamo.reset()
    x = torch.tensor(vals, device=dev)
    print(dev, fn.__name__, len(vals), "eager", fn(x).item(), "compiled", torch.compile(fn)(x).item(), flush=True)
