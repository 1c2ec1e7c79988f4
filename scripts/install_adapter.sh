#!/usr/bin/env bash
# Takes `triton-adapter-opt` (a standalone x86-64 executable, MIT) out of the PyPI wheel
# triton-ascend==3.2.0 into .venv/lib/triton-adapter/, WITHOUT installing the wheel: it would
# replace `triton`. Idempotent, silent when installed. Never fails set-up: when the wheel cannot
# be had, it records why in .venv/lib/triton-adapter/UNAVAILABLE and route triton-spike reports
# that reason.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_steps.sh

WHEEL_SPEC="triton-ascend==3.2.0"
MEMBER="triton/backends/ascend/triton-adapter-opt"
dest=".venv/lib/triton-adapter"
cache="${TORCHSIM_DIFF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchsim-diff}/wheels"
mkdir -p "$dest" "$cache"

if [[ -x "$dest/triton-adapter-opt" && "$(cat "$dest/SOURCE" 2>/dev/null)" == "$WHEEL_SPEC" ]]; then
    exit 0
fi
rm -f "$dest/UNAVAILABLE"

unavailable() {  # the reason route triton-spike gives
    echo "$1" > "$dest/UNAVAILABLE"
}

cached_wheel() { ls "$cache"/triton_ascend-3.2.0-*.whl 2>/dev/null | head -n1; }

download_wheel() {
    local out status
    out=$(.venv/bin/python -m pip download --progress-bar off --no-deps "$WHEEL_SPEC" -d "$cache" 2>&1)
    status=$?
    echo "$out"
    if ((status != 0)); then
        unavailable "pip download --no-deps $WHEEL_SPEC failed: $(echo "$out" | grep -i error | head -n1)"
        return 1
    fi
    [[ -n "$(cached_wheel)" ]] || { unavailable "pip download --no-deps $WHEEL_SPEC left no wheel in the cache"; return 1; }
}

extract_adapter() {
    local wheel=$1
    .venv/bin/python - "$wheel" "$MEMBER" "$dest/triton-adapter-opt" <<'PY' ||
import shutil, sys, zipfile
wheel, member, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, open(target + ".part", "wb") as out:
    shutil.copyfileobj(source, out)
shutil.move(target + ".part", target)
PY
        { unavailable "could not extract $MEMBER from $(basename "$wheel")"; return 1; }
    chmod +x "$dest/triton-adapter-opt"
    "$dest/triton-adapter-opt" --version ||
        { rm -f "$dest/triton-adapter-opt"; unavailable "the extracted triton-adapter-opt does not run on this machine"; return 1; }
}

adapter_from_wheel() {
    { [[ -n "$(cached_wheel)" ]] || download_wheel; } &&
        extract_adapter "$(cached_wheel)" &&
        echo "$WHEEL_SPEC" > "$dest/SOURCE"
}

if ! try_step "triton-adapter-opt from the wheel $WHEEL_SPEC into $dest/" adapter_from_wheel; then
    echo "setup: triton-adapter-opt unavailable (route triton-spike will say so): $(cat "$dest/UNAVAILABLE" 2>/dev/null ||
        echo "see $SETUP_LOG")"
fi
exit 0
