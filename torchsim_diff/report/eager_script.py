"""repro.py for a bug of eager PyTorch itself: eager against eager, with no compiler.

The fuzzer meets an ATen kernel's bug as "compiled differs from eager", yet there the compiler
is the side that is right, and a torch.compile script would say the opposite of the title. The
same program run in eager on an equivalent input must give the same values; each FORMS entry
is one such input, and the bundle keeps the first under which eager disagrees with itself:

    float64          the inputs in float64 (the value is the float64 one, to eager's dtype)
    contiguous       each input a contiguous copy of its view
    channels_last    each 4-d input in channels-last memory format
"""
from __future__ import annotations

from torchsim_diff.report import plain_script

# form -> (the expression of its inputs in repro.py, how ISSUE.md names it)
FORMS = {
    "float64": ("inputs(torch.float64)", "the same inputs in float64"),
    "contiguous": ("[x.contiguous() for x in inputs()]", "contiguous copies of the same inputs"),
    "channels_last": ("[x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs()]",
                      "the same inputs, the 4-d ones in channels-last memory format"),
}


def run_source(case, form: str) -> str:
    """The lines after program and inputs: eager on the case's inputs against eager on `form`,
    at torch.testing's default tolerances, in the dtype of the case's result."""
    expression, described = FORMS[form]
    return "\n".join([
        "eager = program(*inputs())",
        f"other = program(*{expression})  # {described}",
        f"for what, e, o in zip({plain_script.checked(case)[:len(case.outputs)]!r}, eager, other):",
        "    try:",
        "        torch.testing.assert_close(e, o.to(e.dtype), equal_nan=True)",
        "    except AssertionError as exc:",
        f'        print(f"{{what}}: eager differs from eager on {described}: {{exc}}")',
        '        sys.exit(print("REPRODUCES") or 1)',
        f'print("FIXED: eager agrees with itself on {described}")']) + "\n"


def description(expression: str, form: str) -> str:
    """ISSUE.md's opening sentence for an eager bug."""
    return (f"In eager PyTorch, `{expression}` gives different values on the inputs below and on {FORMS[form][1]}, "
            "with no compiler involved.")
