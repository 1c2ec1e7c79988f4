"""Is a route's result right? float64 truth, eager's own error, and the rounding a dtype
computation may legitimately make.

    comparison        tolerance table, the element comparison, Stats, the mismatch and its message
    rounding_rules    per torch function: its rounding allowance, what it passes through, its decisions
    carried_rounding  rounding carried through a program by float64 reruns; unstable decisions, overflow
    oracle            float64 reference and eager baseline for a whole case; its verdict
    local_error       a node's own error: against the float64 op on the route's values of its inputs
"""
