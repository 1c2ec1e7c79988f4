"""The upstream projects a cause is filed with: repository, where a new issue is filed, and the
sections of its issue template. A route whose upstream is none of these names its own
(routes.base.ReportFacts.upstream).

    >>> PROJECTS["torch-mlir"].repo
    'llvm/torch-mlir'
"""
from __future__ import annotations

from torchsim_diff.routes.base import Project, ReportFacts


PROJECTS = {p.name: p for p in (
    Project("pytorch", "pytorch/pytorch", "https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml",
            ("### 🐛 Describe the bug", "### Versions")),
    Project("triton", "triton-lang/triton", "https://github.com/triton-lang/triton/issues/new?template=bug.yml",
            ("### Describe the bug", "### Environment details")),
    Project("torch-mlir", "llvm/torch-mlir", "https://github.com/llvm/torch-mlir/issues/new",
            ("## Description", "## Versions")),
    Project("llvm", "llvm/llvm-project", "https://github.com/llvm/llvm-project/issues/new",
            ("## Description", "## Version")),
    Project("triton-adapter", "triton-lang/triton-ascend", "https://github.com/triton-lang/triton-ascend/issues/new",
            ("## Description", "## Environment")),
)}


def project_named(name: str, route: str | None = None) -> Project | None:
    """The project called `name`: a built-in one, else the one `route` declares as its own."""
    if name in PROJECTS:
        return PROJECTS[name]
    own = route_facts(route).upstream
    return own if own is not None and own.name == name else None


def route_facts(route) -> ReportFacts:
    """What a report says of `route` (routes.base.ReportFacts); the defaults for a route not known here."""
    from torchsim_diff.routes import UnknownRoute, route_class
    if not isinstance(route, str):
        return ReportFacts()
    try:
        return route_class(route).report
    except UnknownRoute:
        return ReportFacts()
