"""The documents tell the truth about the code, and documentation references resolve.

- CONTRIBUTING.md's layout block (the code block starting `torchsim_diff/`) lists every folder under
  torchsim_diff/ that holds files and every module but __init__.py and __main__.py, and lists
  nothing the tree lacks. Non-Python files (the C runtimes) are not listed; their folders are.
- Paths the README, CONTRIBUTING.md and docs/ name (`torchsim_diff/...`, `routes/base.py`,
  `torchsim_diff.x.y`) exist, and so does every `path::NAME` a recipe of CONTRIBUTING.md names.
- The README is the user guide: at most README_LINES lines.
- Every `docs/....md` (and `README`) reference in the package's source names an existing file and,
  where a section is named in quotes (`docs/design.md, "Failure kinds"`), a heading of that file.
"""
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "torchsim_diff"
SKIPPED_FILES = {"__init__.py", "__main__.py"}
SKIPPED_DIRS = {"__pycache__"}


# -- the layout block ---------------------------------------------------------------------
LAYOUT_DOC = "CONTRIBUTING.md"
README_LINES = 300


def layout_block(readme_text: str) -> list:
    """The lines of the layout document's code block that starts with `torchsim_diff/`."""
    match = re.search(r"^```\n(torchsim_diff/\n.*?)^```$", readme_text, re.S | re.M)
    if match is None:
        raise AssertionError(f"{LAYOUT_DOC} has no code block starting with `torchsim_diff/`")
    return match.group(1).splitlines()


def listed_paths(lines: list) -> list:
    """Paths under torchsim_diff/ the block names (folders end in '/'), from its indentation:
    two spaces per level, the entry's name first on its line."""
    assert lines[0] == f"{PACKAGE}/"
    stack, paths = [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:              # back at the repository's top level: fuzz/, corpora/, ...
            break
        assert indent % 2 == 0, f"layout block line {number}: indent {indent} is not a multiple of 2: {line!r}"
        depth = indent // 2
        assert depth <= len(stack) + 1, f"layout block line {number}: indented past its folder: {line!r}"
        name = line.split()[0]
        assert name.endswith("/") or name.endswith(".py"), \
            f"layout block line {number}: {name!r} is neither a folder (name/) nor a module (name.py)"
        del stack[depth - 1:]
        paths.append("".join(stack) + name)
        if name.endswith("/"):
            stack.append(name)
    return paths


def tree_paths(root: str) -> set:
    """Folders under `root` that hold files (their own or their subfolders'), as 'a/b/', and
    modules, as 'a/b.py'; __init__.py, __main__.py and __pycache__ aside."""
    found = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        rel = os.path.relpath(folder, root).replace(os.sep, "/")
        prefix = "" if rel == "." else rel + "/"
        found |= {prefix + f for f in files if f.endswith(".py") and f not in SKIPPED_FILES}
        if files and prefix:
            parts = prefix.rstrip("/").split("/")
            found |= {"/".join(parts[:k]) + "/" for k in range(1, len(parts) + 1)}
    return found


def layout_problems(readme_text: str, root: str) -> list:
    listed = listed_paths(layout_block(readme_text))
    problems = [f"listed twice: {p}" for p in sorted({p for p in listed if listed.count(p) > 1})]
    tree = tree_paths(root)
    problems += [f"not in the README's layout: {PACKAGE}/{p}" for p in sorted(tree - set(listed))]
    problems += [f"in the README's layout but not in the tree: {PACKAGE}/{p}" for p in sorted(set(listed) - tree)]
    return problems


def _readme() -> str:
    return open(os.path.join(REPO, LAYOUT_DOC), encoding="utf-8").read()


def test_readme_layout_lists_every_module_and_folder_and_nothing_else():
    problems = layout_problems(_readme(), os.path.join(REPO, PACKAGE))
    assert not problems, f"{LAYOUT_DOC}'s layout block is out of date:\n" + "\n".join(problems)


def test_the_readme_is_a_user_guide_of_at_most_300_lines():
    lines = open(os.path.join(REPO, "README.md"), encoding="utf-8").read().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines: move reference text to docs/"


def test_layout_check_fails_when_a_module_is_added_or_removed(tmp_path):
    """The check itself: a module added to a copy of the tree, or one the README names removed."""
    readme = _readme()
    root = tmp_path / PACKAGE
    for path in listed_paths(layout_block(readme)):
        if path.endswith("/"):
            (root / path).mkdir(parents=True, exist_ok=True)
            (root / path / "__init__.py").write_text("")
        else:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text("")
    assert layout_problems(readme, str(root)) == []
    (root / "run" / "extra.py").write_text("")
    assert layout_problems(readme, str(root)) == [f"not in the README's layout: {PACKAGE}/run/extra.py"]
    (root / "run" / "extra.py").unlink()
    (root / "case" / "graph.py").unlink()
    assert layout_problems(readme, str(root)) == [f"in the README's layout but not in the tree: {PACKAGE}/case/graph.py"]
    (root / "case" / "graph.py").write_text("")
    (root / "newfolder").mkdir()
    (root / "newfolder" / "notes.txt").write_text("")
    assert layout_problems(readme, str(root)) == [f"not in the README's layout: {PACKAGE}/newfolder/"]
    (root / "newfolder" / "notes.txt").unlink()
    (root / "newfolder" / "__pycache__").mkdir()
    (root / "newfolder" / "__pycache__" / "x.pyc").write_text("")
    assert layout_problems(readme, str(root)) == []      # a folder left with bytecode only is gone


def test_layout_block_parsing():
    lines = ["torchsim_diff/", "  a.py      one", "  b/        two", "    c.py    three", "    d/",
             "      e.py", "  f.py", "fuzz/      the suites"]
    assert listed_paths(lines) == ["a.py", "b/", "b/c.py", "b/d/", "b/d/e.py", "f.py"]
    with pytest.raises(AssertionError, match="neither a folder"):
        listed_paths(["torchsim_diff/", "  a.txt"])
    with pytest.raises(AssertionError, match="indented past"):
        listed_paths(["torchsim_diff/", "      deep.py"])


# -- paths the README and docs/ name ------------------------------------------------------
DOCS = ["README.md", LAYOUT_DOC, os.path.join("benchmarks", "RESULTS.md")] + sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(REPO, "docs"))
                              if n.endswith(".md"))
TOP_FOLDERS = {n for n in os.listdir(REPO) if os.path.isdir(os.path.join(REPO, n)) and not n.startswith(".")}
PACKAGE_FOLDERS = {n for n in os.listdir(os.path.join(REPO, PACKAGE)) if os.path.isdir(os.path.join(REPO, PACKAGE, n))}


def named_paths(text: str) -> list:
    """Backquoted paths to our Python files: `torchsim_diff/...py`, `routes/base.py`, `tests/x.py`
    (the first folder one of the repository's or the package's; others are other projects')."""
    found = []
    for token in re.findall(r"`([^`\s]+\.py)`", text):
        first = token.split("/", 1)[0]
        if "/" in token and (first in TOP_FOLDERS or first in PACKAGE_FOLDERS):
            found.append(token)
    return found


def path_exists(token: str) -> bool:
    return any(os.path.isfile(os.path.join(base, token)) for base in (REPO, os.path.join(REPO, PACKAGE)))


def named_modules(text: str) -> list:
    """Dotted module names of the package (`torchsim_diff.routes.triton.launch_replay`)."""
    return sorted(set(re.findall(r"\btorchsim_diff(?:\.[A-Za-z_]\w*)+", text)))


def module_exists(name: str) -> bool:
    path = os.path.join(REPO, *name.split("."))
    return os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__init__.py"))


@pytest.mark.parametrize("doc", DOCS)
def test_documents_name_real_files_and_modules(doc):
    text = open(os.path.join(REPO, doc), encoding="utf-8").read()
    missing = [p for p in named_paths(text) if not path_exists(p)]
    missing += [m for m in named_modules(text) if not module_exists(m)]
    assert not missing, f"{doc} names what the tree lacks: {missing}"


RECIPE_NAME = re.compile(r"`([\w/.<>-]+\.py)::(\w+)`")


def recipe_problems(text: str) -> list:
    """The `path::NAME` references of `text` whose file is missing or defines no top-level NAME."""
    problems = []
    for path, name in RECIPE_NAME.findall(text):
        full = os.path.join(REPO, path)
        if not os.path.isfile(full):
            problems.append(f"{path} does not exist")
        elif name not in top_level_names(full):
            problems.append(f"{path} defines no {name}")
    return problems


def top_level_names(path: str) -> set:
    import ast
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_each_recipe_names_files_and_names_that_exist():
    text = open(os.path.join(REPO, LAYOUT_DOC), encoding="utf-8").read()
    assert len(RECIPE_NAME.findall(text)) >= 10            # the recipes name what they touch this way
    assert recipe_problems(text) == []


def test_a_stale_recipe_name_is_seen():
    assert recipe_problems("`torchsim_diff/ops/__init__.py::register`") == []
    assert recipe_problems("`torchsim_diff/ops/__init__.py::registr`") == ["torchsim_diff/ops/__init__.py defines no registr"]
    assert recipe_problems("`torchsim_diff/ops/gone.py::X`") == ["torchsim_diff/ops/gone.py does not exist"]


def test_path_checks_see_stale_names():
    assert named_paths("see `routes/inductor_machine.py` and `Scheduler/scheduler.py`") == ["routes/inductor_machine.py"]
    assert not path_exists("routes/inductor_machine.py") and path_exists("routes/inductor/machine.py")
    assert named_modules("python -m torchsim_diff.kernels.replay x") == ["torchsim_diff.kernels.replay"]
    assert not module_exists("torchsim_diff.kernels.replay") and module_exists("torchsim_diff.kernels")


def test_no_document_names_a_path_of_some_machine():
    for doc in DOCS:
        text = open(os.path.join(REPO, doc), encoding="utf-8").read()
        assert "/work/" not in text, doc


# -- references from the package's source to documents -------------------------------------
REFERENCE = re.compile(r"(docs/[\w.-]+\.md|README(?:\.md)?|DESIGN\.md)(?:,\s+\"([^\"]+)\")?")


def headings(path: str) -> list:
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)       # '# comments' in code blocks
    return [h.strip() for h in re.findall(r"^#+\s+(.+)$", text, re.M)]


def section_found(section: str, titles: list) -> bool:
    """A heading is the section, or starts with it followed by punctuation or a space
    ("Generations" finds "Generations, and what works on each"; "Route" is not "Routes")."""
    return any(t == section or (t.startswith(section) and not t[len(section)].isalnum()) for t in titles)


def reference_problems(text: str, where: str) -> list:
    problems = []
    for match in REFERENCE.finditer(text):
        name, section = match.group(1), match.group(2)
        if name == "DESIGN.md":
            problems.append(f"{where}: names DESIGN.md, which is docs/design.md")
            continue
        path = os.path.join(REPO, "README.md" if name.startswith("README") else name)
        if not os.path.isfile(path):
            problems.append(f"{where}: names {name}, which does not exist")
        elif section and not section_found(" ".join(section.split()), headings(path)):
            problems.append(f"{where}: {name} has no section {section!r}")
    return problems


def test_package_references_to_documents_resolve():
    problems = []
    for folder, dirs, files in os.walk(os.path.join(REPO, PACKAGE)):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                problems += reference_problems(open(path, encoding="utf-8").read(), os.path.relpath(path, REPO))
    assert not problems, "\n".join(problems)


def test_reference_check_sees_wrong_files_and_sections():
    assert reference_problems('see (docs/design.md, "Failure kinds")', "x") == []
    assert reference_problems('see (docs/design.md, "Failure\n    kinds")', "x") == []
    assert reference_problems('(docs/pytorchsim.md, "Generations")', "x") == []
    assert reference_problems('(docs/design.md, "Routes")', "x") == []
    assert reference_problems('(docs/design.md, "Rout")', "x") == ["x: docs/design.md has no section 'Rout'"]
    assert reference_problems('(docs/design.md, "Kinds of failure")', "x") == \
        ["x: docs/design.md has no section 'Kinds of failure'"]
    assert reference_problems("(docs/nowhere.md)", "x") == ["x: names docs/nowhere.md, which does not exist"]
    assert reference_problems('(DESIGN.md, "Route")', "x") == ["x: names DESIGN.md, which is docs/design.md"]
    assert reference_problems('(docs/oracle.md, "The oracle rule")', "x") == []
    assert reference_problems('(README, "The oracle rule")', "x") == ["x: README has no section 'The oracle rule'"]
    assert reference_problems('(README, "Using it")', "x") == []
