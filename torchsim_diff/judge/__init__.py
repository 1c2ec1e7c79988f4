"""Is a route's result right? float64 truth, eager's own error, and the rounding a dtype
computation may legitimately make.

    comparison     tolerance table, the comparison rule, mismatch messages, carried rounding
    oracle         float64 reference and eager baseline for a whole case; its verdict
    op_figures     error figures per op, each judged by its own output

comparison imports only the standard library and torch (bundles ship it).
"""
