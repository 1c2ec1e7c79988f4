"""The package's rooms: every module name is said once, so a name found in a traceback or a
grep names one file."""
import collections
import os

import torchsim_diff

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
