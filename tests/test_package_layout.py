"""The package's rooms: every module name is said once, so a name found in a traceback or a
grep names one file."""
import collections
import os
import re

import torchsim_diff
from benchmarks import import_figures

PACKAGE = os.path.dirname(torchsim_diff.__file__)
SHARED_NAMES = {"__init__.py", "__main__.py"}


def _modules() -> list:
    return [os.path.relpath(os.path.join(folder, name), PACKAGE)
            for folder, dirs, names in os.walk(PACKAGE) if "__pycache__" not in folder
            for name in names if name.endswith(".py")]


def test_no_two_modules_share_a_name():
    by_name = collections.defaultdict(list)
    for path in _modules():
        by_name[os.path.basename(path)].append(path)
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1 and name not in SHARED_NAMES}
    assert shared == {}


def test_every_folder_of_modules_is_a_package_that_says_what_it_holds():
    for folder in {os.path.dirname(path) for path in _modules()}:
        init = os.path.join(PACKAGE, folder, "__init__.py")
        assert os.path.exists(init), folder
        assert open(init).read().lstrip().startswith('"""'), f"{init} has no docstring"


# -- imports follow the pipeline (the map in torchsim_diff/__init__.py) ------------------------
UP_LINE = re.compile(r"^\s*Up: (\w+): \S", re.M)


def _declared_up(folder: str) -> set:
    """The folders `folder`'s docstring says it imports from above, each with its reason."""
    init = os.path.join(PACKAGE, folder, "__init__.py")
    text = open(init).read() if os.path.exists(init) else ""
    return set(UP_LINE.findall(text))


def test_every_folder_of_the_package_is_on_the_floor_map():
    on_map = import_figures.floors()
    folders = {import_figures.folder_of(module) for module, _path in import_figures.modules()} - {"__init__"}
    assert folders - set(on_map) == set()
    assert set(on_map) - folders == set()            # the map names nothing that is gone


def test_no_import_runs_back_up_unless_its_folder_says_why():
    up = import_figures.back_up(import_figures.arrows(), import_figures.floors())
    assert [(a, b) for a, b in up if b not in _declared_up(a)] == []


def test_the_folders_import_each_other_in_no_circle():
    assert import_figures.circles(import_figures.arrows()) == []


def test_the_scan_sees_an_arrow_back_up_and_a_circle(tmp_path):
    package = tmp_path / "torchsim_diff"
    for folder in ("low", "high"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text('"""x"""\n')
    (package / "__init__.py").write_text('"""Map:\n\n    low      the floor\n    high     above it\n"""\n')
    (package / "high" / "a.py").write_text("from torchsim_diff.low import b\n")
    (package / "low" / "b.py").write_text("def f():\n    from torchsim_diff.high import a\n")
    found = import_figures.arrows(str(package))
    assert import_figures.floors(str(package)) == {"low": 0, "high": 1}
    assert import_figures.back_up(found, import_figures.floors(str(package))) == [("low", "high")]
    assert import_figures.circles(found) == [["high", "low"]]
