"""Programs are written only from typed attributes and checked before they run: every op's
signature fits what the generator draws, every program the generator writes passes the gate,
and text the registry never writes is refused."""
import collections

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from torchsim_diff.generate import strategies
from torchsim_diff.ops import all_ops
from torchsim_diff.ops.attrs import check_attrs
from torchsim_diff.case.program_check import ProgramRejected, check_program, eval_expression, load_program

DTYPES = ("float32", "float16", "bfloat16", "int32", "int64")


@pytest.fixture(scope="module")
def drawn():
    """Cases of every dtype, derandomized: (case, program source) pairs."""
    found = []
    for dtype in DTYPES:
        @settings(max_examples=25, database=None, derandomize=True, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck), deadline=None)
        @given(strategies.cases(dtype=dtype, special_values=dtype == "float32"))
        def collect(case):
            found.append(case)
        collect()
    return found


def test_every_drawn_node_fits_its_ops_signature_and_every_op_is_drawn(drawn):
    ops = all_ops()
    seen = collections.Counter()
    for case in drawn:
        for node in case.nodes:
            seen[node["op"]] += 1
            assert check_attrs(ops[node["op"]].signature, node.get("attrs", {})) is None, node
    assert set(seen) == set(ops), f"never drawn: {sorted(set(ops) - set(seen))}"


def test_every_drawn_program_passes_the_gate(drawn):
    for case in drawn:
        check_program(case.program_source())


REFUSED = {
    "dunder import": "import torch\n\n\ndef program(x0):\n    v0 = __import__('os').getcwd()\n    return (v0,)\n",
    "open": "import torch\n\n\ndef program(x0):\n    v0 = open('f', 'w')\n    return (v0,)\n",
    "eval": "import torch\n\n\ndef program(x0):\n    v0 = eval('1')\n    return (v0,)\n",
    "torch.hub": "import torch\n\n\ndef program(x0):\n    v0 = torch.hub.load('a', 'b')\n    return (v0,)\n",
    "torch.save": "import torch\n\n\ndef program(x0):\n    v0 = torch.save(x0, 'f')\n    return (v0,)\n",
    "private attribute": "import torch\n\n\ndef program(x0):\n    v0 = x0.__class__\n    return (v0,)\n",
    "second import": "import torch\nimport os\n\n\ndef program(x0):\n    return (x0,)\n",
    "aliased import": "import torch as os\n\n\ndef program(x0):\n    return (x0,)\n",
    "top-level call": "import torch\nprint(1)\n\n\ndef program(x0):\n    return (x0,)\n",
    "statement after a node": "import torch\n\n\ndef program(x0):\n    v0 = x0; print(1)\n    return (v0,)\n",
    "lambda": "import torch\n\n\ndef program(x0):\n    v0 = (lambda: 1)()\n    return (v0,)\n",
    "binary operator": "import torch\n\n\ndef program(x0):\n    v0 = x0 + 1\n    return (v0,)\n",
    "conditional": "import torch\n\n\ndef program(x0):\n    v0 = x0 if x0 else x0\n    return (v0,)\n",
    "decorator": "import torch\n\n\n@torch.relu\ndef program(x0):\n    return (x0,)\n",
    "default argument": "import torch\n\n\ndef program(x0=print(1)):\n    return (x0,)\n",
    "star arguments": "import torch\n\n\ndef program(*x0):\n    return (x0,)\n",
    "keyword splat": "import torch\n\n\ndef program(x0):\n    v0 = torch.relu(**x0)\n    return (v0,)\n",
    "undefined name": "import torch\n\n\ndef program(x0):\n    v0 = torch.relu(y)\n    return (v0,)\n",
    "rebinding torch": "import torch\n\n\ndef program(x0):\n    torch = x0\n    return (x0,)\n",
    "comprehension with a filter": "import torch\n\n\ndef program(x0):\n    v0 = [c for c in x0 if c]\n    return (v0,)\n",
    "walrus": "import torch\n\n\ndef program(x0):\n    v0 = torch.relu((y := x0))\n    return (v0,)\n",
    "f-string": "import torch\n\n\ndef program(x0):\n    v0 = f'{x0}'\n    return (v0,)\n",
    "bytes constant": "import torch\n\n\ndef program(x0):\n    v0 = torch.relu(b'x')\n    return (v0,)\n",
    "no return": "import torch\n\n\ndef program(x0):\n    v0 = torch.relu(x0)\n",
    "not python": "import torch\n\n\ndef program(x0):\n    v0 = torch.relu(x0\n",
    "two functions": "import torch\n\n\ndef program(x0):\n    return (x0,)\n\n\ndef other():\n    pass\n",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_text_the_registry_never_writes_is_refused(name):
    with pytest.raises(ProgramRejected):
        check_program(REFUSED[name])


def test_a_checked_program_runs_and_a_node_expression_evaluates():
    import torch
    program = load_program("import torch\n\n\ndef program(x0):\n    v0 = torch.relu(x0)\n"
                           "    v1 = torch.stack([c.sum(0) for c in torch.chunk(v0, 2, dim=0)])\n    return (v1,)\n")
    x = torch.tensor([[-1.0, 2.0], [3.0, -4.0]])
    assert torch.equal(program(x)[0], torch.tensor([[0.0, 2.0], [3.0, 0.0]]))
    assert eval_expression("x0[:, 1:2]", {"torch": torch, "x0": x}).tolist() == [[2.0], [-4.0]]
    with pytest.raises(ProgramRejected):
        eval_expression("x0.__class__", {"torch": torch, "x0": x})


def test_each_load_compiles_afresh_never_reusing_an_earlier_cases_graph():
    """Dynamo caches graphs on the code object: two loads of one text sharing it made a fresh
    torch.compile reuse the graph compiled for an earlier case (its guards skip storage
    offsets), so a case run after others was not the case run alone."""
    import torch
    from torch._dynamo.testing import CompileCounter
    source = "import torch\n\ndef program(x0):\n    v0 = torch.neg(x0)\n    return (v0,)\n"
    storage = torch.arange(8.0)
    counter, compiles = CompileCounter(), []
    for offset in (0, 4):                 # as two cases of one graph, on a warm worker
        compiled = torch.compile(load_program(source), backend=counter, fullgraph=True, dynamic=False)
        compiled(storage.as_strided((4,), (1,), offset))
        compiles.append(counter.frame_count)
    assert compiles == [1, 2], "the second load reused the first load's compiled graph"


def test_torchs_warnings_about_a_cases_own_computation_are_not_shown_and_others_are():
    """var of one element warns in torch; a campaign meets it on purpose (an edge), in the
    program, its node expressions and the judge's float64 run, and would print it each time.
    The same call from anywhere else still warns."""
    import subprocess
    import sys
    script = (
        "import torch\n"
        "from torchsim_diff.case.program_check import eval_expression, load_program\n"
        "from torchsim_diff.judge.carried_rounding import carried\n"
        "x = torch.ones(1)\n"
        "eval_expression('torch.var(x0, correction=1)', {'torch': torch, 'x0': x})\n"
        "program = load_program('import torch\\ndef program(x0):\\n    v0 = torch.var(x0, correction=1)\\n    return [v0]\\n')\n"
        "program(x)\n"
        "carried(program, [x.double()], torch.float32)\n"
        "print('quiet so far', flush=True)\n"
        "torch.var(x, correction=1)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "quiet so far" in done.stdout, done.stderr
    assert done.stderr.count("UserWarning") == 1 and "<string>" in done.stderr, done.stderr


def test_the_module_case_code_runs_as_can_be_imported_and_holds_torch():
    """torch.compile may import the module a function's globals name and read the function's
    globals through it (torch 2.11's Dynamo does): under a module name that did not exist, every
    case compiled there failed with ModuleNotFoundError."""
    import importlib

    import torch
    from torchsim_diff.case.program_check import CASE_MODULE
    program = load_program("import torch\ndef program(x0):\n    v0 = torch.relu(x0)\n    return [v0]\n")
    assert program.__globals__["__name__"] == CASE_MODULE
    assert importlib.import_module(CASE_MODULE).torch is torch


def test_an_input_named_like_the_module_name_is_still_the_input():
    """Node expressions run with the case module's name (the warning filter), which never
    shadows a case's own names: any identifier, `__name__` too, is a usable input name."""
    import torch
    x = torch.tensor([-1.0, 2.0])
    assert torch.equal(eval_expression("torch.relu(__name__)", {"torch": torch, "__name__": x}), torch.relu(x))
