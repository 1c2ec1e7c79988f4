"""Where the known-bug ledger is when no --known-bugs option names one.

The team keeps the ledger at the repository's `corpora/known/`; a built package carries a copy
as `torchsim_diff/known_bugs/` (setup.py maps the one onto the other), so that an installed
torchsim-diff run outside a checkout still tells known bugs from new ones. The first that exists:

    1. <root>/corpora/known     root: the current folder (pytest: its rootdir), a checkout
    2. the checkout that holds the package (an editable install run from elsewhere)
    3. the package's own copy   a wheel installed into any environment

    >>> default_ledger()          # in a checkout
    'corpora/known'
"""
from __future__ import annotations

import os

REPOSITORY_LEDGER = os.path.join("corpora", "known")
PACKAGED_LEDGER = "known_bugs"   # the package folder setup.py builds from corpora/known
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_ledger(root: str = "") -> str:
    """The known-bug ledger folder to use when none is named; `root` is the folder a checkout's
    `corpora/known` is looked for in first (default: the current folder, given relative)."""
    candidates = (os.path.join(root, REPOSITORY_LEDGER),
                  os.path.join(os.path.dirname(_PACKAGE_DIR), REPOSITORY_LEDGER),
                  os.path.join(_PACKAGE_DIR, PACKAGED_LEDGER))
    for folder in candidates:
        if os.path.isdir(folder):
            return folder
    # None holds a ledger (a damaged install): the checkout's path, for messages to name.
    return candidates[0]
