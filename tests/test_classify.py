"""Signatures: one bug, one bucket, whatever sizes, names and paths its messages carry."""
import pytest

from torchsim_diff.buckets.signatures import bucket_of, finding_type, normalise, signature, unwrap_nested
from torchsim_diff.judge.comparison import Where

SAME_BUG = [
    ("torch-mlir import failed: failed to legalize operation 'torch.constant.bool': "
     "%0 = \"torch.constant.bool\"() <{value = false}> : () -> !torch.bool",
     "torch-mlir import failed: failed to legalize operation 'torch.constant.bool': "
     "%0 = \"torch.constant.bool\"() <{value = true}> : () -> !torch.bool"),
    ("LoweringException: cannot lower exp at buf3 for size [3, 5]",
     "LoweringException: cannot lower exp at buf12 for size [129, 7, 2]"),
    ("InductorError: CppCompileError: C++ compile error in /tmp/torchinductor_root/ab/cabc123.cpp line 42",
     "InductorError: CppCompileError: C++ compile error in /tmp/torchinductor_x/zz/c99.cpp line 7"),
    ("RuntimeError: triton_poi_fused_add_mul_0 failed at 0x7ffd1234abcd",
     "RuntimeError: triton_poi_fused_add_mul_12 failed at 0x55aa00ff"),
    ("worker killed by SIGSEGV\nFatal Python error: Segmentation fault\nThread 0x00007f (most recent call first)",
     "worker killed by SIGSEGV\nFatal Python error: Segmentation fault\nThread 0x00009a (most recent call first)"),
    ("IndexError: index out of range in self",
     "RuntimeError: index -30720 is out of bounds for dimension 1 with size 9"),
    ("IndexError: index_copy_(): index 7 is out of bounds for dimension 0 with size 3",
     "RuntimeError: INDICES element is out of DATA bounds, id=-30720 axis_dim=4"),
]
DIFFERENT_BUGS = [
    ("LoweringException: cannot lower exp", "LoweringException: cannot lower log"),
    ("RuntimeError: index out of bounds", "RuntimeError: misaligned address"),
    ("worker killed by SIGSEGV", "worker killed by SIGABRT"),
]


@pytest.mark.parametrize("a,b", SAME_BUG)
def test_same_bug_same_bucket(a, b):
    assert normalise(a) == normalise(b)
    assert bucket_of(signature("inductor", "compile_error", a)) == bucket_of(signature("inductor", "compile_error", b))


@pytest.mark.parametrize("a,b", DIFFERENT_BUGS)
def test_different_bugs_different_buckets(a, b):
    assert bucket_of(signature("inductor", "compile_error", a)) != bucket_of(signature("inductor", "compile_error", b))


def test_value_failures_bucket_by_route_kind_op_and_place():
    base = signature("triton", "wrong_values", "output 0: 3 / 9 differ at (0, 1)", "softmax", Where.output(0))
    assert base == signature("triton", "wrong_values", "output 2: 7 / 99 differ", "softmax", Where.output(2))
    assert base != signature("triton", "wrong_values", "", "softmax", Where.input("x0"))
    assert base != signature("inductor", "wrong_values", "", "softmax", Where.output(0))
    assert base != signature("triton", "nonfinite_mismatch", "", "softmax", Where.output(0))


def test_each_bucket_raises_its_own_exception_type():
    assert finding_type("crash", "aaa") is finding_type("crash", "aaa")
    assert finding_type("crash", "aaa") is not finding_type("crash", "bbb")
    assert issubclass(finding_type("crash", "aaa"), AssertionError)


def test_generated_kernel_names_do_not_split_buckets():
    a = "RuntimeError: cannot capture kernel triton_poi_fused_gelu_0: not readable"
    b = "RuntimeError: cannot capture kernel triton_per_fused__softmax_exp_3: not readable"
    assert normalise(a) == normalise(b)


# -- signatures from the minimal case ------------------------------------------------------
def _verdict(**fields):
    from torchsim_diff.run.checker import Verdict
    from torchsim_diff.results.kinds import Status
    from tests.conftest import make_case
    case = make_case(nodes=[{"id": "v0", "op": "sin", "args": ["x0"], "attrs": {}},
                            {"id": "v1", "op": "add_", "args": ["x1", "v0"], "attrs": {}},
                            {"id": "v2", "op": "exp", "args": ["v0"], "attrs": {}}],
                     inputs=[("x0", [3], [1], 0, 3, {}), ("x1", [3], [1], 0, 3, {"mutated": True})],
                     outputs=["v2"])
    return Verdict(case, "triton", Status.FAIL, **{"kind": "wrong_values", **fields})


def test_reduction_key_keeps_route_kind_and_place_but_not_the_op():
    from torchsim_diff.buckets.signatures import reduction_key
    assert reduction_key(_verdict(op="exp", where=Where.output(0))) == reduction_key(_verdict(op="sin", where=Where.output(2)))
    assert reduction_key(_verdict(where=Where.output(0))) != reduction_key(_verdict(where=Where.input("x1")))
    # a NaN where the truth is finite may reduce to the wrong value behind it
    assert reduction_key(_verdict(kind="nonfinite_mismatch")) == reduction_key(_verdict(kind="wrong_values"))
    assert reduction_key(_verdict(kind="shape_mismatch")) != reduction_key(_verdict(kind="wrong_values"))
    assert reduction_key(_verdict(kind="compile_error", message="LoweringException: exp")) != \
        reduction_key(_verdict(kind="compile_error", message="LoweringException: log"))


def test_refined_signature_is_route_kind_first_op_and_trigger():
    from torchsim_diff.buckets.signatures import refined_signature
    assert refined_signature("triton", "wrong_values", "add", ["strided", "offset"]) == \
        "triton|wrong_values|add|offset+strided"
    assert refined_signature("triton", "wrong_values", "add", []).endswith("|any")
    assert refined_signature("triton", "wrong_values", "bmm", []) == refined_signature("triton", "wrong_values", "mm", [])
    assert refined_signature("triton", "wrong_values", "index_add_", ["inout"]) == \
        refined_signature("triton", "wrong_values", "add_", ["inout"])
    assert refined_signature("triton", "wrong_values", "mul", []) != refined_signature("triton", "wrong_values", "add", [])
    verdict = _verdict(op="exp", where=Where.output(0))
    verdict.refined = refined_signature("triton", "wrong_values", "sin", ["strided"])
    assert verdict.signature == verdict.refined and verdict.bucket == bucket_of(verdict.refined)


def test_intermediates_as_outputs_names_the_first_divergent_node():
    from torchsim_diff.case.transforms import first_divergent_node, intermediates_as_outputs
    verdict = _verdict()
    wide, refs = intermediates_as_outputs(verdict.case)
    assert refs == ["v0", "v2"] and wide.outputs == refs          # the in-place node stays an effect
    assert [n["id"] for n in wide.nodes] == ["v0", "v1", "v2"]
    assert first_divergent_node(wide, _verdict(where=Where.output(1)), refs)["op"] == "exp"
    assert first_divergent_node(wide, _verdict(where=Where.output(0)), refs)["op"] == "sin"
    assert first_divergent_node(wide, _verdict(where=Where.input("x1")), refs) is None


def test_buckets_rank_distinct_first():
    from torchsim_diff.buckets.signatures import rank_buckets
    ranked = rank_buckets({"a": ("triton|wrong_values|add|strided", 9), "b": ("triton|wrong_values|mul|strided", 8),
                           "c": ("triton|compile_error|LoweringException", 1)})
    assert ranked == ["a", "c", "b"]


class InterpreterError(Exception):
    """Stands for triton.runtime.errors.InterpreterError, which wraps repr(error)."""


def test_an_error_rewrapped_once_per_kernel_nesting_is_one_message():
    inner = TypeError("ufunc 'bitwise_or' not supported for the input types, and the inputs could not be "
                      "safely coerced to any supported types according to the casting rule ''safe''")
    once = InterpreterError(repr(inner))
    twice = InterpreterError(repr(InterpreterError(repr(inner))))
    other = InterpreterError(repr(ValueError("ufunc 'bitwise_and' not supported")))
    message = "InterpreterError: {!r}\n--- traceback tail ---\n  File ...".format
    assert signature("triton", "compile_error", message(once)) == signature("triton", "compile_error", message(twice))
    assert signature("triton", "compile_error", message(once)) != signature("triton", "compile_error", message(other))
    assert unwrap_nested(message(once).splitlines()[0]) == message(once).splitlines()[0]  # one layer: kept as is
