"""The package's import figures: folders, the arrows between them, arrows back up the pipeline,
and circles. Anyone can rerun it; it reads the imports as syntax and runs nothing.

    python benchmarks/import_figures.py [--arrows] [--package DIR] [--map-from DIR]

The pipeline order is the package docstring's map (torchsim_diff/__init__.py): one floor a line,
bottom first. A folder is a subpackage of torchsim_diff; a module at the package's top is a
folder of its own. Every import counts, at module level or inside a function.
"""
from __future__ import annotations

import argparse
import ast
import collections
import os
import re
import sys

PACKAGE = "torchsim_diff"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE)
FLOOR_LINE = re.compile(r"^    ([a-z_][\w ]*?)\s{2,}\S")


def floors(package_dir: str = ROOT) -> dict:
    """folder -> floor number, from the package docstring's map."""
    tree = ast.parse(open(os.path.join(package_dir, "__init__.py")).read())
    order = {}
    for number, match in enumerate(filter(None, map(FLOOR_LINE.match, ast.get_docstring(tree, clean=False)
                                                     .splitlines()))):
        order.update({folder: number for folder in match.group(1).split()})
    return order


def modules(package_dir: str = ROOT):
    """(module name, path) of every module of the package."""
    base = os.path.dirname(package_dir)
    for folder, dirs, names in os.walk(package_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(folder, name)
            dotted = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
            yield dotted.removesuffix(".__init__"), path


def folder_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported(module: str, path: str) -> set:
    """The package's modules (or packages) `module` imports."""
    is_package = path.endswith("__init__.py")
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {name for name in found if name.split(".")[0] == PACKAGE and "." in name}


def arrows(package_dir: str = ROOT) -> dict:
    """(from folder, to folder) -> the importing modules."""
    found = collections.defaultdict(set)
    for module, path in modules(package_dir):
        for target in imported(module, path):
            if folder_of(module) != folder_of(target):
                found[(folder_of(module), folder_of(target))].add(module)
    return dict(found)


def back_up(found: dict, order: dict) -> list:
    """The arrows from a lower floor to a higher one (an unmapped folder counts as misplaced)."""
    return sorted(pair for pair in found if order.get(pair[0], -1) < order.get(pair[1], len(order) + 1))


def circles(found: dict) -> list:
    """The strongly connected groups of folders with more than one folder (Tarjan)."""
    graph = collections.defaultdict(set)
    for a, b in found:
        graph[a].add(b)
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))
    for node in sorted(set(graph) | {b for targets in graph.values() for b in targets}):
        if node not in index:
            visit(node)
    return sorted(groups)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrows", action="store_true", help="list every arrow with its importing modules")
    parser.add_argument("--package", default=ROOT, help="the torchsim_diff folder to scan (default: this checkout's)")
    parser.add_argument("--map-from", help="the torchsim_diff folder whose floor map to use (default: --package)")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(10000)
    found, order = arrows(args.package), floors(args.map_from or args.package)
    folders = {f for pair in found for f in pair}
    up, loops = back_up(found, order), circles(found)
    print(f"folders {len(folders)}, arrows {len(found)}, arrows back up {len(up)}, circles {len(loops)}")
    for a, b in up:
        print(f"  up: {a} -> {b}  ({', '.join(sorted(found[(a, b)]))})")
    for group in loops:
        print(f"  circle: {' <-> '.join(group)}")
    if args.arrows:
        for (a, b), importers in sorted(found.items()):
            print(f"  {a} -> {b}: {', '.join(sorted(importers))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
