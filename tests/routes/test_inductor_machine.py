"""Inductor's per-machine state (routes/inductor_machine.py): worked out by the first worker,
reused by the others, never changing what Inductor picks."""
import glob
import json
import os
import platform
import subprocess
import sys

import pytest

from tests.conftest import REPO

# A fresh interpreter each time: Inductor caches the checks' answers per process. The probe
# counts the checks that really compile and load, and can make one ISA's check fail.
PROBE = """
import json, os
from torch._inductor import cpu_vec_isa
from torchsim_diff.routes.inductor.machine import share_vec_isa_checks
checked, failing = [], os.environ.get("PROBE_FAILING_ISA")
real_check = cpu_vec_isa.VecISA.check_build
cpu_vec_isa.VecISA.check_build = lambda self, code: (checked.append(str(self)) or str(self) != failing
                                                     and real_check(self, code))
share_vec_isa_checks()
picked = cpu_vec_isa.pick_vec_isa()
print(json.dumps({"checked": checked, "valid": [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()],
                  "picked": [str(picked), picked.build_arch_flags() if picked else ""]}))
"""


def _worker_start(shared, name, failing_isa=None):
    env = dict(os.environ, TORCHSIM_DIFF_PCH_DIR=str(shared), TORCHINDUCTOR_CACHE_DIR=str(shared.parent / name),
               PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)
    if failing_isa:
        env["PROBE_FAILING_ISA"] = failing_isa
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_the_first_worker_checks_and_the_next_ones_take_its_passes(tmp_path):
    shared = tmp_path / "shared"
    first = _worker_start(shared, "first")
    assert first["checked"] and len(glob.glob(str(shared / "vec-isa-*.ok"))) == len(first["checked"])
    second = _worker_start(shared, "second")
    assert second["checked"] == []
    assert (second["valid"], second["picked"]) == (first["valid"], first["picked"])


@pytest.mark.e2e
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="fails the x86 AVX2 check on purpose")
def test_a_check_that_failed_is_not_recorded_and_the_next_worker_repeats_it(tmp_path):
    shared = tmp_path / "shared"
    first = _worker_start(shared, "first", failing_isa="avx2")
    assert "avx2" in first["checked"] and "avx2" not in first["valid"]
    second = _worker_start(shared, "second")
    assert second["checked"] == ["avx2"] and "avx2" in second["valid"]
