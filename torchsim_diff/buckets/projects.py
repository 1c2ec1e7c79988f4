"""The upstream projects a cause is filed with: repository, where a new issue is filed, and the
sections of its issue template.

    >>> PROJECTS["torch-mlir"].repo
    'llvm/torch-mlir'
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Project:
    name: str
    repo: str
    file_at: str
    sections: tuple          # (bug section, versions section) of its issue template


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
