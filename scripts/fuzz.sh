#!/usr/bin/env bash
# Set up (idempotent), then run the default fuzz campaign for a time budget (10 minutes unless
# --budget says otherwise, e.g. --budget 30m): every fuzz suite on the routes that can run here,
# then the report (NEW buckets, summary, tolerance table, an HTML page) under reports/.
# Other arguments go to pytest (e.g. --routes inductor,triton --fuzz-dtypes float16).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=10m
args=()
while (($#)); do
    case "$1" in
        --budget) [[ $# -ge 2 ]] || { echo "fuzz.sh: --budget needs a duration, e.g. --budget 10m" >&2; exit 2; }
                  budget=$2; shift 2 ;;
        --budget=*) budget=${1#--budget=}; shift ;;
        *) args+=("$1"); shift ;;
    esac
done
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n auto -p no:cacheprovider --hypothesis-profile=torchsim-default fuzz \
    --routes inductor,triton,mlir,spike,triton-spike,triton-cuda --fuzz-budget "$budget" ${args[@]+"${args[@]}"}
