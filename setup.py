"""What the package holds (metadata and dependencies are in setup.cfg).

Besides the modules: the C runtimes the spike routes link, and the known-bug ledger. The ledger
stays where the team files bugs, the repository's corpora/known/, and is mapped into the package
as torchsim_diff/known_bugs/, so that an installed torchsim-diff run outside a checkout still
tells known bugs from new ones (torchsim_diff/buckets/known_ledger.py finds either).
"""
from setuptools import find_namespace_packages, setup

LEDGER = "torchsim_diff.known_bugs"

setup(
    # namespace packages: the runtime/ folders hold C sources only, and are data of the routes
    packages=find_namespace_packages(include=["torchsim_diff*"], exclude=["*.__pycache__"]) + [LEDGER],
    package_dir={LEDGER: "corpora/known"},
    package_data={"torchsim_diff.routes.spike.runtime": ["*.c", "*.h"],
                  "torchsim_diff.routes.triton_spike.runtime": ["*.c", "*.h"],
                  LEDGER: ["*/*.json"]},
)
