#!/usr/bin/env bash
# Set up (idempotent), then run the tool's tests, a small derandomized fuzz pass over the
# public routes, and the corpus replay. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n auto -p no:cacheprovider --hypothesis-profile=torchsim-ci tests fuzz --routes eager,inductor,triton,mlir,spike "$@"
