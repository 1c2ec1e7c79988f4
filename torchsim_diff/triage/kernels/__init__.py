"""Kernel-level tools: capture every Triton kernel launch of a case, replay one launch
standalone, and localise the first kernel whose outputs diverge from a reference executor.

`capture` (format + recording), `launch_replay` (one launch under "interpreter" or "cuda"),
`localise` (first divergent kernel of a captured case).
"""
