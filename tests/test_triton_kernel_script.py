"""A bug of Triton itself shown as one plain @triton.jit launch (report.triton_kernel_script):
the kernel taken from a capture without Inductor's decorator, the launch written out literally,
eager's output as the expected value."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, make_case
from torchsim_diff.case import layout
from torchsim_diff.report import checklist
from torchsim_diff.report import triton_kernel_script as plain

KERNEL = '''import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers, triton_heuristics

@triton_heuristics.pointwise(
    size_hints={'x': 4},
    filename=__file__,
)
@triton.jit
def triton_poi_fused_neg_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + (xindex), xmask)
    tl.store(out_ptr0 + (xindex), NEGATED, xmask)
'''


def _neg_case():
    return make_case(nodes=[{"id": "v0", "op": "neg", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [4], [1], 0, 4, {})], outputs=["v0"])


def _capture(folder, case, body: str, launches: int = 1) -> str:
    """A kernel capture of `launches` launches of KERNEL with `body` stored, on the case's input."""
    x = layout.materialize_all(case.to_dict())[0]
    names = []
    for k in range(launches):
        name = f"{k:03d}_triton_poi_fused_neg_0"
        launch = folder / name
        (launch / "buffers").mkdir(parents=True)
        (launch / "kernel.py").write_text(KERNEL.replace("NEGATED", body))
        (launch / "buffers" / "buf0.before.bin").write_bytes(x.numpy().tobytes())
        (launch / "buffers" / "buf1.before.bin").write_bytes(bytes(16))
        tensor = {"kind": "tensor", "dtype": "float32", "size": [4], "stride": [1], "storage_offset": 0, "span": 4}
        meta = {"format": "torchsim-diff.kernel-launch", "schema": 1, "kernel_name": "triton_poi_fused_neg_0",
                "source": "kernel.py", "executor": "interpreter", "grid": [1, 1, 1], "constexprs": {"XBLOCK": 4},
                "numels": {"xnumel": 4}, "launch_options": {}, "signature": {},
                "args": [{"name": "in_ptr0", "role": "in", "buffer": "buf0", **tensor},
                         {"name": "out_ptr0", "role": "out", "buffer": "buf1", **tensor},
                         {"name": "xnumel", "kind": "scalar", "value": 4, "dtype": "i32"}],
                "buffers": {b: {"dtype": "float32", "nbytes": 16, "graph_input": 0 if b == "buf0" else None,
                                "before": f"buffers/{b}.before.bin", "after": None} for b in ("buf0", "buf1")}}
        (launch / "launch.json").write_text(json.dumps(meta))
        names.append(name)
    (folder / "index.json").write_text(json.dumps({"format": "torchsim-diff.kernel-capture", "schema": 1,
                                                   "executor": "interpreter", "launches": names}))
    return str(folder)


def test_the_kernel_is_taken_without_inductors_decorator():
    source = plain.plain_kernel_source(KERNEL, "triton_poi_fused_neg_0")
    assert source.startswith("@triton.jit\ndef triton_poi_fused_neg_0(") and "triton_heuristics" not in source
    assert plain.helpers_used(source) == ()
    assert plain.helpers_used(source + "\n    y = triton_helpers.maximum(a, b)") == (plain.HELPER_IMPORTS["triton_helpers"],)
    with pytest.raises(plain.PlainKernelError, match="defines no function 'other'"):
        plain.plain_kernel_source(KERNEL, "other")


@pytest.mark.parametrize("body,status,said", [("-tmp0", 0, "FIXED"), ("tmp0", 1, "REPRODUCES")])
def test_the_launch_runs_alone_and_is_compared_with_eager(tmp_path, body, status, said):
    """The plain script exits 1 while the kernel's value differs from eager's, 0 once it agrees."""
    case = _neg_case()
    plan = plain.plan_launch(case, _capture(tmp_path / "kernels", case, body), crashes=False)
    script = plain.render_script(plan, "neg")
    assert "torch.compile" not in script and "triton_heuristics" not in script
    (tmp_path / "repro.py").write_text(script)
    done = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == status, done.stdout + done.stderr
    assert said in done.stdout


def test_a_program_of_two_kernels_is_not_shown_as_one_launch(tmp_path):
    case = _neg_case()
    with pytest.raises(plain.PlainKernelError, match="runs 2 kernels"):
        plain.plan_launch(case, _capture(tmp_path / "kernels", case, "-tmp0", launches=2), crashes=False)


def test_a_capture_naming_a_buffer_that_is_no_python_name_is_refused(tmp_path):
    """Buffer and block-size names become Python names in repro.py; a capture is a file, so a
    name that would be code is refused."""
    case = _neg_case()
    folder = _capture(tmp_path / "kernels", case, "-tmp0")
    path = tmp_path / "kernels" / "000_triton_poi_fused_neg_0" / "launch.json"
    meta = json.loads(path.read_text())
    meta["constexprs"] = {"XBLOCK=4);import os;(": 4}
    path.write_text(json.dumps(meta))
    with pytest.raises(plain.PlainKernelError, match="no Python name"):
        plain.plan_launch(case, folder, crashes=False)


def test_a_triton_draft_through_torch_compile_must_say_why(tmp_path):
    (tmp_path / "ISSUE.md").write_text("<!-- File at https://github.com/triton-lang/triton/issues/new?template=bug.yml"
                                       " -->\n# t\n")
    (tmp_path / "repro.py").write_text("compiled = torch.compile(program)\n")
    assert any("plain kernel launch" in p for p in checklist.problems(str(tmp_path)))
    (tmp_path / "ISSUE.md").write_text((tmp_path / "ISSUE.md").read_text() + f"\nShown through torch.compile, "
                                       f"{checklist.NOT_PLAIN_MARK}: why.\n")
    assert checklist.problems(str(tmp_path)) == []


@pytest.mark.e2e
@pytest.mark.parametrize("name,shows", [("triton-interpreter-fp32-to-bf16-cast-truncates", "kernel differs from eager"),
                                        ("triton-interpreter-subnormal-scalar-promoted-to-fp64", "ValueError")])
def test_a_triton_bug_exports_as_one_plain_kernel_launch(tmp_path, capsys, name, shows):
    from torchsim_diff.cli import main
    bundle = tmp_path / "b"
    assert main(["export", name, "--known-bugs", os.path.join(REPO, "corpora", "known"), "--to", str(bundle)]) == 0
    script, issue = (bundle / "repro.py").read_text(), (bundle / "ISSUE.md").read_text()
    assert "@triton.jit" in script and "torch.compile" not in script and not (bundle / "triton_shims.py").exists()
    assert issue.startswith("<!-- File at https://github.com/triton-lang/triton/issues/new")
    assert shows in issue and "$ echo $?  # 1" in issue
    assert checklist.problems(str(bundle)) == []
