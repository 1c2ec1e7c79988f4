#!/usr/bin/env bash
# Set up (idempotent), then run the default fuzz campaign: every fuzz suite on the routes
# that can run here, results and tables under reports/. Extra arguments go to pytest
# (e.g. --routes inductor,triton --fuzz-examples 200).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n auto -p no:cacheprovider --hypothesis-profile=torchsim-default fuzz \
    --routes inductor,triton,mlir,spike,triton-cuda "$@"
