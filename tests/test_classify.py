"""Signatures: one bug, one bucket, whatever sizes, names and paths its messages carry."""
import pytest

from torchsim_diff.classify import bucket_of, finding_type, normalise, signature

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
    base = signature("triton", "wrong_values", "output 0: 3 / 9 differ at (0, 1)", "softmax", "output 0")
    assert base == signature("triton", "wrong_values", "output 2: 7 / 99 differ", "softmax", "output 2")
    assert base != signature("triton", "wrong_values", "", "softmax", "input x0")
    assert base != signature("inductor", "wrong_values", "", "softmax", "output 0")
    assert base != signature("triton", "nonfinite_mismatch", "", "softmax", "output 0")


def test_each_bucket_raises_its_own_exception_type():
    assert finding_type("crash", "aaa") is finding_type("crash", "aaa")
    assert finding_type("crash", "aaa") is not finding_type("crash", "bbb")
    assert issubclass(finding_type("crash", "aaa"), AssertionError)


def test_generated_kernel_names_do_not_split_buckets():
    a = "RuntimeError: cannot capture kernel triton_poi_fused_gelu_0: not readable"
    b = "RuntimeError: cannot capture kernel triton_per_fused__softmax_exp_3: not readable"
    assert normalise(a) == normalise(b)
