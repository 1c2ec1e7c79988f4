#!/usr/bin/env bash
# Idempotent set-up: Debian packages the routes need, then .venv/ with the Python packages
# and torchsim-diff itself (editable). Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
while read -r pkg; do
    [[ -z "$pkg" || "$pkg" == \#* ]] && continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done < apt-packages.txt
if ((${#need_apt[@]})); then
    echo "setup: installing Debian packages: ${need_apt[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

PYTHON="${PYTHON:-python3}"
[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
stamp=".venv/.torchsim-diff-installed"
if [[ ! -f "$stamp" || requirements.txt -nt "$stamp" || setup.cfg -nt "$stamp" ]]; then
    echo "setup: installing Python packages into .venv/"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -r requirements.txt
    .venv/bin/python -m pip install -q --no-deps -e .
    touch "$stamp"
fi
bash scripts/install_adapter.sh   # route triton-spike; never fails set-up
