"""Isolated execution: each route runs its cases in a persistent worker subprocess.

`client` (fuzzer side) starts, feeds and restarts workers; `server` (worker side) compiles
and runs cases; `protocol` is the wire format both share. Only `protocol` and `server` run
under the route's interpreter.
"""
