"""The rounding rules an op declares (`OpSpec.rounding`), by name: a closed set, each the
judge's treatment of the torch functions one of its tables lists (FUNCTIONS_BY_RULE in
the judge's rounding_rules module). An op's rule is that of the functions its code calls
that round or decide (all of them one rule), "exact" where none does; tests/test_op_entry.py
checks every registered op against the judge's tables.

Imports nothing: the op registry reads it without loading torch.
"""

# rule name -> what the judge allows an op of that rule
RULES = {
    "exact": "rounds nothing (views, copies, selections, orderings, max/min, abs, neg, sign, relu, where, "
             "clamps, pooling by max, bitwise and logical ops); the sign of a zero that relu, clamps, max/min, "
             "pooling by max and orderings return is unspecified, a decision either way",
    "pointwise": "one rounding per element: about one ulp of the result",
    "reduction": "a sum, product or variance along dims, scans too: sqrt(n)+2 ulps of the magnitude "
                 "(up to n/2 where the addends are equal)",
    "contraction": "sums of products (matmuls, einsum, convolutions, average pooling, interpolation): "
                   "sqrt(n)+2 ulps of the magnitudes' product",
    "normalization": "softmax, log_softmax and layer, group and RMS norms: a reduction, then a pointwise step",
    "decision": "a discrete or piecewise-constant result of floats (comparisons, argmax/argmin, floor, round, "
                "casts, floor_divide): judged only where rounding cannot flip it",
    "jump": "continuous but for a jump by the divisor (remainder, fmod): the jump is carried like a flipped "
            "decision",
    "unmodelled": "rounds, but the judge has no rule for it yet and allows it nothing (scatter and index "
                  "accumulations): a verdict on its last bits may be a false positive",
}
