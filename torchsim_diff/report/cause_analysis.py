"""The paragraph ISSUE.md gives a known cause: what is known of it, where else it shows, and the
search for an earlier report.

    >>> analysis(read_cause("corpora/known/torch-mlir-clamp-nan"), shown=None)
"""
from __future__ import annotations

from torchsim_diff.buckets.causes import Cause, searched
from torchsim_diff.buckets.projects import route_facts
from torchsim_diff.report.bundles import expression


def analysis(cause: Cause, shown) -> str:
    """The paragraph ISSUE.md gives a cause: its summary, where it was already reported or
    fixed, and the other cases where it shows (every one, where `shown` is None: the report
    shows a reproducer of its own)."""
    parts = [cause.summary.strip()] if cause.summary.strip() else []
    parts += [cause.also_checked.strip()] if cause.also_checked.strip() else []
    if cause.status == "fixed":
        parts.append(f"Fixed upstream{' in ' + cause.fixed_in if cause.fixed_in else ''}: {cause.upstream}")

    def where(entry) -> str:
        compiler = route_facts(entry.route).compiler.get(cause.project, entry.route)
        return f"`{expression(entry.case, entry.case.outputs)}` ({compiler})"
    seen = list(dict.fromkeys(where(e) for e in cause.entries if e is not shown))
    seen = [w for w in seen if shown is None or w != where(shown)]
    if seen:
        parts.append("The same defect shows in: " + "; ".join(seen) + ".")
    if cause.status == "new" and cause.search:
        parts.append(searched(cause.search))
    return "\n\n".join(parts)
