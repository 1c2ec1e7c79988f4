"""Isolated execution: each route runs its cases in a persistent worker subprocess.

`client` (fuzzer side) starts, feeds and restarts workers; `server` (worker side) compiles
and runs cases; `protocol` is the wire format both share. Only `protocol` and `server` run
under the route's interpreter.
"""

# Seconds a case may take before its worker is killed and the case is a `timeout`: the one
# default every front end (CLI, pytest plugin, campaigns, reducer) shares. Routes that run
# their own subprocesses (Spike) keep their own limits below it, so theirs fires first.
DEFAULT_TIMEOUT_S = 120.0
