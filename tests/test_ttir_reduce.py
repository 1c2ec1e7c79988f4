"""IR-level reduction of a kernel's TTIR for an adapter bug (report.ttir_reduce,
report.ttir_value_reduce, report.adapter_bundle's lead), on TTIR the triton-spike route wrote
for two known causes (tests/fixtures/ttir: adapter-reduce-init-tensor-empty's amin kernel and
adapter-scalar-precise-divf's floor_divide kernel). The adapter is the judge of validity, so the
tests that need it are skipped, with the reason, where it is not installed; the host run of a
value bug needs LLVM 19 as well and is `slow`."""
import json
import os
import re
import shutil

import pytest

from torchsim_diff.report import adapter_bundle, ttir_reduce
from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_PASSES, adapter_path

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "ttir")
TOOL = adapter_path()
needs_adapter = pytest.mark.skipif(not TOOL, reason="triton-adapter-opt is not installed (scripts/install_adapter.sh)")
HOST_TOOLS = ("mlir-opt-19", "mlir-translate-19", "clang-19")


def fixture(name: str) -> str:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def amin_kernel() -> ttir_reduce.Kernel:
    return ttir_reduce.Kernel.parse(ttir_reduce.generic_form(fixture("amin_reduce_init.ttir"), TOOL))


@needs_adapter
def test_the_generic_form_gives_each_op_its_results_operands_and_types():
    kernel = amin_kernel()
    assert kernel.arguments == [("%arg0", "!tt.ptr<f32>"), ("%arg1", "!tt.ptr<f32>"), ("%arg2", "i32")]
    by_name = {op.name: op for op in kernel.ops}
    assert [op.name for op in kernel.ops].count("arith.constant") == 3
    load = by_name["tt.load"]
    assert [t for _, t in load.operands] == ["tensor<1x2x!tt.ptr<f32>>", "tensor<1x2xi1>", "tensor<1x2xf32>"]
    assert load.results[0][1] == "tensor<1x2xf32>"
    reduce = by_name["tt.reduce"]        # its region's block arguments and ops are its own, not uses
    assert reduce.uses == {reduce.operands[0][0]} and reduce.results[0][1] == "tensor<1xf32>"


@needs_adapter
def test_removing_any_one_op_rewires_its_uses_so_the_adapter_still_reads_the_kernel():
    kernel = amin_kernel()
    for k, op in enumerate(kernel.ops):
        text = kernel.render({k})
        assert ttir_reduce.generic_form(text, TOOL) is not None, (op.name, text)
        gone = {v for v, _ in op.results}
        assert not gone & set(re.findall(r"%[\w#]+", text)), (op.name, text)    # no use of a removed value left
    assert ttir_reduce.generic_form(kernel.render(set(range(len(kernel.ops)))), TOOL) is not None


@needs_adapter
def test_a_removed_op_is_replaced_by_its_operand_of_the_same_type_else_a_zero_constant():
    kernel = amin_kernel()
    k = next(k for k, op in enumerate(kernel.ops) if op.name == "tt.addptr")
    pointer = kernel.ops[k].operands[0][0]
    load = next(op for op in kernel.ops if op.name == "tt.load")
    rewired = ttir_reduce.Kernel.parse(kernel.render({k}))
    assert next(op for op in rewired.ops if op.name == "tt.load").operands[0][0] == pointer   # the addptr is bypassed
    j = kernel.ops.index(load)
    zeroed = ttir_reduce.Kernel.parse(kernel.render({j}))
    select = next(op for op in zeroed.ops if op.name == "arith.select")
    made = {v: op.text for op in zeroed.ops if op.name == "arith.constant" for v, _ in op.results}
    assert "dense<0.000000e+00> : tensor<1x2xf32>" in made[select.operands[1][0]]


@needs_adapter
def test_a_use_nothing_can_stand_for_takes_its_op_with_it():
    kernel = amin_kernel()
    # the last splat makes the only tensor<1x1x!tt.ptr<f32>>: no operand, constant or earlier value
    # of that type exists, so the store that uses it goes too
    k = max(k for k, op in enumerate(kernel.ops) if op.name == "tt.splat")
    text = kernel.render({k})
    assert '"tt.store"' not in text and ttir_reduce.generic_form(text, TOOL) is not None


@needs_adapter
def test_an_operand_made_zero_is_a_constant_of_its_type():
    kernel = amin_kernel()
    parts = kernel.zeroable_operands()
    select = next(k for k, op in enumerate(kernel.ops) if op.name == "arith.select")
    assert (select, 0) in parts and all(kernel.ops[k].name != "arith.constant" for k, _ in parts)
    text = kernel.render((), [(select, 0)])
    assert "dense<false> : tensor<1x2xi1>" in text and ttir_reduce.generic_form(text, TOOL) is not None


@needs_adapter
def test_a_compile_error_reduces_to_the_construct_and_names_the_pass_that_fails():
    whole = fixture("floor_divide_precise_divf.ttir")
    failure = ttir_reduce.adapter_failure(whole, TOOL, ADAPTER_PASSES)
    assert failure and "TypeRange with null types" in failure
    reduced = ttir_reduce.reduce_ttir(whole, TOOL, ADAPTER_PASSES, budget_s=60)
    assert ttir_reduce.adapter_failure(reduced, TOOL, ADAPTER_PASSES) == failure
    assert len(reduced.splitlines()) < len(whole.splitlines()) and "loc(" not in reduced
    assert "tt.precise_divf" in reduced and "math.floor" not in reduced      # what the assert needs, and no more
    at = ttir_reduce.failing_pass(reduced, TOOL, ADAPTER_PASSES, failure)
    assert ADAPTER_PASSES[at].startswith("--triton-to-linalg")
    assert ttir_reduce.construct(ttir_reduce.triton_ops(reduced))[0] == "tt.precise_divf"


@needs_adapter
def test_a_kernel_the_adapter_converts_is_left_as_it_is():
    whole = fixture("amin_reduce_init.ttir")
    assert ttir_reduce.adapter_failure(whole, TOOL, ADAPTER_PASSES) is None
    assert ttir_reduce.reduce_ttir(whole, TOOL, ADAPTER_PASSES) == whole


def test_text_the_adapter_cannot_print_in_generic_form_is_left_as_it_is(tmp_path):
    tool = tmp_path / "cat-adapter"        # prints its input, whatever the flags: no generic form
    tool.write_text("#!/bin/sh\ncat \"$1\"\n")
    tool.chmod(0o755)
    assert ttir_reduce.reduce_text("module {\n}\n", str(tool), lambda text: True) == "module {\n}\n"


def test_zero_constants_exist_for_numbers_and_their_tensors_only():
    assert ttir_reduce.zero_constant("i1") == "false" and ttir_reduce.zero_constant("tensor<2xi1>") == "dense<false> : tensor<2xi1>"
    assert ttir_reduce.zero_constant("tensor<4x2xi32>") == "dense<0> : tensor<4x2xi32>"
    assert ttir_reduce.zero_constant("bf16") == "0.000000e+00 : bf16"
    assert ttir_reduce.zero_constant("tensor<4x!tt.ptr<f32>>") is None
    assert ttir_reduce.zero_constant("!tt.ptr<f32>") is None


def test_the_construct_leads_with_what_is_not_addresses_loads_and_stores():
    assert ttir_reduce.construct({"tt.store", "tt.reduce", "tt.func", "tt.splat", "math.log1p"}) == \
        ["math.log1p", "tt.reduce", "tt.splat", "tt.store"]


STRIDED_LOAD = """tt.func @k(%arg0: !tt.ptr<f32>, %arg1: !tt.ptr<f32>) {
  %cst = arith.constant dense<2> : tensor<4xi32>
  %cst_0 = arith.constant dense<-1> : tensor<4xi32>
  %0 = tt.make_range {end = 4 : i32, start = 0 : i32} : tensor<4xi32>
  %1 = arith.muli %0, %cst : tensor<4xi32>
  %2 = "arith.addi"(%1, %cst_0) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %3 = tt.splat %arg0 : !tt.ptr<f32> -> tensor<4x!tt.ptr<f32>>
  %4 = tt.addptr %3, %2 : tensor<4x!tt.ptr<f32>>, tensor<4xi32>
  %5 = tt.load %4 : tensor<4x!tt.ptr<f32>>
  tt.store %4, %5 : tensor<4x!tt.ptr<f32>>
  tt.return
}
"""


def test_a_kernel_of_addresses_loads_and_stores_only_is_named_by_the_arithmetic_of_its_addresses():
    """Where every Triton op left is scaffolding, the construct led with tt.addptr; the bug is in
    the offsets the arith ops compute (a stride-2 load at offset -1)."""
    ops, arithmetic = ttir_reduce.triton_ops(STRIDED_LOAD), ttir_reduce.dialect_ops(STRIDED_LOAD, "arith")
    assert ttir_reduce.construct(ops, arithmetic) == \
        ["arith.addi", "arith.muli", "tt.addptr", "tt.load", "tt.make_range", "tt.splat", "tt.store"]
    assert ttir_reduce.construct(ops | {"tt.reduce"}, arithmetic)[0] == "tt.reduce"


def test_the_issue_leads_with_the_construct_the_pass_the_command_and_the_provenance(tmp_path):
    (tmp_path / "kernel.ttir").write_text("module {\n  tt.func @k() {\n    tt.return\n  }\n}\n")
    (tmp_path / "kernel.original.ttir").write_text("x\n" * 40)
    (tmp_path / adapter_bundle.REDUCTION_FILE).write_text(json.dumps({
        "kind": "compile_error", "file": "kernel.ttir", "lines": [40, 5], "passes": {"7": "fails"},
        "construct": ["tt.precise_divf", "tt.splat"],
        "provenance": {"torch": "2.13.0", "triton": "3.9.0", "rewrites_known": True,
                       "rewrites": [{"name": "libdevice", "why": "rewritten to the op Triton 3.2 emits."}]}}))
    text = "\n".join(adapter_bundle.lead(str(tmp_path)))
    order = [text.index(s) for s in ("5 lines of TTIR", "`tt.precise_divf`", ADAPTER_PASSES[7],
                                     "triton-adapter-opt kernel.ttir", "tt.func @k", "Provenance")]
    assert order == sorted(order), text
    assert "pass 8 of 8" in text and "Triton 3.9.0" in text and "libdevice" in text
    assert "/tmp" not in text and str(tmp_path) not in text
    (tmp_path / adapter_bundle.REDUCTION_FILE).write_text("[1, 2]")        # not ours: no lead
    assert adapter_bundle.lead(str(tmp_path)) == []


def test_a_value_bugs_buffers_are_judged_against_the_interpreter_and_between_fills():
    import torch
    from torchsim_diff.report import ttir_value_reduce as value
    launch = value.Launch("k", (1, 1, 1), [("buffer", "buf0", 0, 2), ("buffer", "buf1", 0, 1)],
                          {"buf0": torch.tensor([1.0, 1.0]), "buf1": torch.tensor([0.0])},
                          {"buf0": torch.tensor([1.0, 1.0]), "buf1": torch.tensor([1.0])}, exact=False)
    same = {"0x47": {"buf0": torch.tensor([1.0, 1.0]), "buf1": torch.tensor([1.0])},
            "0xC7": {"buf0": torch.tensor([1.0, 1.0]), "buf1": torch.tensor([-1e5])}}
    assert value.wrong_buffers(launch, same) == ["buf1"]
    assert value.fill_dependent(same, ["buf1"]) == ["buf1"]
    steady = {fill: {"buf0": torch.tensor([1.0, 1.0]), "buf1": torch.tensor([2.0])} for fill in value.FILLS}
    assert value.wrong_buffers(launch, steady) == ["buf1"] and value.fill_dependent(steady, ["buf1"]) == []
    assert value.wrong_buffers(launch, {"0x47": "signal 11", "0xC7": steady["0xC7"]}) == ["buf0", "buf1"]
    # a buffer the reduced kernel no longer writes keeps its value from before the launch
    assert value.expected_after(launch, ["buf0"])["buf1"].tolist() == [0.0]


@needs_adapter
def test_each_store_is_traced_to_the_buffer_it_writes():
    from torchsim_diff.report import ttir_value_reduce as value
    kernel = amin_kernel()
    launch = value.Launch("k", (1, 1, 1), [("buffer", "buf0", 0, 2), ("buffer", "buf1", 0, 1), ("c_int32", 2)],
                          {}, {}, exact=False)
    store = next(k for k, op in enumerate(kernel.ops) if op.name == "tt.store")
    assert value.store_targets(kernel, launch) == {store: "buf1"}


@pytest.mark.e2e       # about 30 s: each candidate goes through the adapter, LLVM 19 and two launches
@needs_adapter
@pytest.mark.skipif(not all(map(shutil.which, HOST_TOOLS)), reason="needs LLVM 19 (mlir-opt-19, mlir-translate-19, clang-19)")
def test_a_wrong_value_that_depends_on_mallocs_fill_reduces_to_the_reduce_and_its_repro_judges_it_by_the_fills(
        tmp_path, monkeypatch):
    import torch
    from torchsim_diff.report import kernel_bundle
    from torchsim_diff.report.repro_runs import run_repro
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_ENV
    monkeypatch.setenv(ADAPTER_ENV, TOOL)
    # adapter-reduce-init-tensor-empty: amin over a (2, 1) input of ones; the reduce's init is an
    # uninitialised tensor.empty(), so the result is malloc's garbage under the 0xC7 fill
    kernel, grid, args = "triton_per_fused_amin_0", (1, 1, 1), [("buffer", "buf0", 0, 2), ("buffer", "buf1", 0, 1),
                                                                 ("c_int32", 2)]
    torch.save({"before": {"buf0": torch.tensor([1.0, 1.0]), "buf1": torch.tensor([0.0])},
                "expected": {"buf0": torch.tensor([1.0, 1.0]), "buf1": torch.tensor([1.0])}},
               tmp_path / kernel_bundle.LAUNCH_FILE)
    whole = fixture("amin_reduce_init.ttir")
    (tmp_path / "kernel.ttir").write_text(whole)
    (tmp_path / "repro.py").write_text(kernel_bundle.render_script("amin's init", kernel, grid, args, False))
    reproduces = lambda: run_repro(str(tmp_path))[0] == 1         # noqa: E731
    before, after = adapter_bundle.reduce_value_kernel(str(tmp_path), kernel, grid, args, False, budget_s=120,
                                                       check=reproduces, title="amin's init")
    found = adapter_bundle.reduction(str(tmp_path))
    assert found["mode"] == "fill" and found["buffers"] == ["buf1"] and found["file"] == "kernel.ttir"
    assert after < before / 2 and (tmp_path / adapter_bundle.ORIGINAL_FILE).read_text() == whole
    reduced = (tmp_path / "kernel.ttir").read_text()
    assert "tt.reduce" in reduced and "tt.load" not in reduced       # the input is not needed
    status, out, _err = run_repro(str(tmp_path))                     # the reduced kernel, judged by the fills
    assert status == 1 and "buf1[0]" in out and "0xC7" in out, out
    # the same judge on a buffer the fills do not change says fixed
    (tmp_path / "repro.py").write_text(kernel_bundle.render_script("amin's init", kernel, grid, args, False,
                                                                   fill_judged=("buf0",)))
    status, out, _err = run_repro(str(tmp_path))
    assert status == 0 and "do not depend on malloc's fill" in out, out


DUMP = """triton-adapter-opt: STLExtras.h:1281: back() const: Assertion `!empty()' failed.
Stack dump:
 #0 0x00005636f8b5c0c8 (/somewhere/triton-adapter-opt+0x203e0c8)
 #1 0x00005636f8b59bce (/somewhere/triton-adapter-opt+0x203bbce)
 #2 0x00007f1eefc5a050 (/lib/x86_64-linux-gnu/libc.so.6+0x3c050)
 #3 0x00007f1eefca8eec __pthread_kill_implementation ./nptl/./nptl/pthread_kill.c:44:76
 #4 0x00005636f765838d (/somewhere/triton-adapter-opt+0xb3a38d)
 #5 0x00005636f75689b4 (/somewhere/triton-adapter-opt+0xa4a9b4)
 #6 0x00005636f75728e6 (/somewhere/triton-adapter-opt+0xa548e6)
 #7 0x00005636f8783ae1 (/somewhere/triton-adapter-opt+0x1c65ae1)
"""


def test_a_crash_is_the_same_failure_only_at_the_same_site_of_the_adapters_code():
    site = ttir_reduce._crash_site(DUMP)
    assert site == " at 0xb3a38d,0xa4a9b4,0xa548e6"          # below the C library's frames, not the dumper's
    elsewhere = DUMP.replace("0xa4a9b4", "0xa4a9c0")           # the same assertion reached from another caller
    assert ttir_reduce._crash_site(elsewhere) != site
    assert ttir_reduce._crash_site(DUMP.replace("/somewhere", "/elsewhere")) == site
    assert ttir_reduce._crash_site("error: failed to legalize\n") == ""


@needs_adapter
def test_a_masked_load_without_other_gets_a_zero_other_so_no_lane_is_undefined():
    from torchsim_diff.report import ttir_value_reduce as value
    text = ttir_reduce.generic_form(fixture("amin_reduce_init.ttir"), TOOL)
    load = next(line for line in text.splitlines() if '"tt.load"' in line)
    ptr, mask, other = re.search(r'"tt.load"\((%\w+), (%\w+), (%\w+)\)', load).groups()
    bare = (load.replace(f"({ptr}, {mask}, {other})", f"({ptr}, {mask})").replace("1, 1, 1>", "1, 1, 0>")
            .replace(", tensor<1x2xf32>) -> ", ") -> "))
    bare_text = text.replace(load, bare)
    assert ttir_reduce.generic_form(bare_text, TOOL) is not None       # Triton allows it: masked lanes undefined
    defined = value.with_defined_loads(bare_text)
    assert "1, 1, 1>" in defined and "dense<0.000000e+00> : tensor<1x2xf32>" in defined
    assert ttir_reduce.generic_form(defined, TOOL) is not None
    assert value.with_defined_loads(text) == text                      # a load with its other is left alone


def test_a_candidate_fails_the_same_way_if_it_shows_any_failure_the_whole_kernel_showed(tmp_path, monkeypatch):
    # the adapter names one of two types in the same error from run to run on some kernels
    shown = iter(["from A", "from B", "from A"])
    monkeypatch.setattr(ttir_reduce, "adapter_failure", lambda text, tool, passes: next(shown))
    assert ttir_reduce.adapter_failures("k", "tool", ()) == {"from A", "from B"}
    converts = iter(["from A", None, "from A"])
    monkeypatch.setattr(ttir_reduce, "adapter_failure", lambda text, tool, passes: next(converts))
    assert ttir_reduce.adapter_failures("k", "tool", ()) == set()      # it converted once: no failure to keep
