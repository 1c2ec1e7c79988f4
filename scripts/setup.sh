#!/usr/bin/env bash
# Idempotent set-up: Debian packages the routes need, then .venv/ with the Python packages
# and torchsim-diff itself (editable), then triton-adapter-opt. Safe to run again: it installs
# only what is missing. One line per step it takes (scripts/setup_steps.sh); what apt and pip
# print goes to .venv/setup.log, shown when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_steps.sh
setup_begin

need_apt=()
while read -r pkg; do
    [[ -z "$pkg" || "$pkg" == \#* ]] && continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done < apt-packages.txt
SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
apt_install() {  # sudo drops the caller's environment, so the front end is set behind it
    $SUDO apt-get update -q && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}
if ((${#need_apt[@]})); then
    step "Debian packages ${need_apt[*]}" apt_install "${need_apt[@]}"
fi

PYTHON="${PYTHON:-python3}"
stamp=".venv/.torchsim-diff-installed"
python_packages() {
    { [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv; } &&
        .venv/bin/python -m pip install --progress-bar off --upgrade pip &&
        .venv/bin/python -m pip install --progress-bar off -r requirements.txt &&
        .venv/bin/python -m pip install --progress-bar off --no-deps -e . &&
        touch "$stamp"
}
outdated=$(find requirements.txt setup.cfg setup.py pyproject.toml -newer "$stamp" 2>/dev/null || true)
if [[ ! -x .venv/bin/python || ! -f "$stamp" || -n "$outdated" ]]; then
    step "Python packages into .venv/ (requirements.txt, torchsim-diff editable)" python_packages
fi
bash scripts/install_adapter.sh   # route triton-spike; never fails set-up
setup_end
