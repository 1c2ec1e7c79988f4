"""The value domains and dtypes the generator draws: which domain satisfies an operand's, the
float and integer dtypes, the domains whose values have tails, the index domains."""
from __future__ import annotations

from torchsim_diff.case.values import TAIL_DOMAINS

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int32", "int64")
TAILED_KINDS = frozenset().union(*TAIL_DOMAINS.values())
INDEX_DOMAINS = ("index", "unique_index")
SATISFIES = {
    "real": {"real", "positive", "nonzero", "small"},
    "positive": {"positive"},
    "nonzero": {"nonzero", "positive"},
    "small": {"small"},
    "bool": {"bool"},
}
