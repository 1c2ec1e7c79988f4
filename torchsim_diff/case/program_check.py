"""The one gate where program text becomes code.

A case's program is written from its JSON (`Case.program_source()`), and case files come from
outside: shared corpora, bundles attached to upstream issues, results files. Attributes are
type-checked when a case is read (`ops.attrs`); this gate is the second line. Before any
program or node expression is compiled, its syntax tree must use only what the op registry
writes: `import torch`, one `def program(...)`, assignments of calls on the program's own
names, literals, slices, one-level list comprehensions, and attribute names from a closed
vocabulary (so neither `__import__`, `open`, `eval` nor `torch.hub.load` can appear).

Imports only the standard library, so route workers under another interpreter can use it.

    >>> program = load_program(case.program_source())        # raises ProgramRejected
    >>> value = eval_expression("torch.relu(x0)", {"torch": torch, "x0": t})
"""
from __future__ import annotations

import ast
import functools
import itertools
import threading
import warnings

RESULT = "program"
# The module name a case's code runs under. torch's warnings about what a case computes (var
# of one element, a cast that overflows) are the case's semantics, met on purpose by the
# generator's edges, never news: they would bury a campaign's progress lines, so they are not
# shown (a torch warning from anywhere else still is).
# A real module (case/case_code.py): torch.compile may import it.
CASE_MODULE = "torchsim_diff.case.case_code"
warnings.filterwarnings("ignore", category=UserWarning, module=CASE_MODULE.replace(".", r"\.") + "$")
# Names a program may read that it does not define: the module and the one builtin the
# registry writes (`float('-inf')` for a masked fill).
FREE_NAMES = frozenset({"torch", "float"})
# Every attribute the op registry writes: torch functions, tensor methods, dtypes and the
# `.values` of a (values, indices) pair. A new op that writes a new name adds it here
# (tests/test_op_entry.py draws every op and fails naming the missing one).
ATTRIBUTES = frozenset("""
abs adaptive_avg_pool2d add add_ addbmm addcdiv addcmul addmm amax amin argmax argmin argsort atan2
avg_pool2d baddbmm bfloat16 bitwise_and bitwise_not bitwise_or bitwise_xor bmm cat chunk clamp
constant_pad_nd contiguous conv1d conv2d copy_ cos cummax cumprod cumsum div dtype einsum elu embedding eq
erf exp expand expm1 flip float16 float32 float64 floor floor_divide fmod functional gather ge gelu group_norm
gt hardswish hardtanh index_add_ index_copy_ index_put_ index_reduce index_select int32 int64 interpolate
layer_norm le leaky_relu lerp linear log log1p log_softmax logcumsumexp logical_and logical_not logical_or
logsumexp lt masked_fill masked_fill_ masked_scatter matmul max max_pool1d max_pool2d maximum mean minimum
mm mul mul_ nan_to_num narrow ne neg nn permute pow prod reciprocal relu remainder repeat reshape rms_norm
roll round rsqrt scatter_ scatter_add scatter_reduce select sigmoid sign silu sin softmax sort split sqrt
squeeze stack std sub sum tanh to topk transpose tril triu unsqueeze values var view where
""".split())
_CONSTANTS = (int, float, bool, str, type(None))


class ProgramRejected(ValueError):
    """Program text that uses something the op registry never writes."""


def check_program(source: str) -> None:
    """Raise ProgramRejected unless `source` is `import torch` and one `def program(...)`
    made only of what the op registry writes."""
    _checked_program(_text(source))


def load_program(source: str):
    """The `program` function of checked `source`, with a code object of its own.

    Dynamo keeps compiled graphs on the code object and remembers input sizes per file name
    and line: had every load of one text shared the cached code object, a fresh
    torch.compile would reuse graphs compiled for an earlier case of the same text (its
    guards skip storage offsets and aliasing; the reused graph then fails with a NameError
    for the earlier function's `__compiled_fn`), and dynamic shapes would be decided from
    other cases' sizes. A case run alone and the same case run after others must be the
    same computation."""
    namespace: dict = {"__name__": CASE_MODULE}
    exec(_checked_program(_text(source)), namespace)  # noqa: S102 - only checked code objects
    program = namespace[RESULT]
    program.__code__ = program.__code__.replace(co_filename=f"<torchsim-diff program {next(_LOADS)}>")
    return program


def eval_expression(expr: str, env: dict):
    """The value of one node expression over `env` (names -> values; `torch` among them)."""
    code = _checked_expression(_text(expr), frozenset(env))
    # env's names come first: a case may name an input `__name__` (an identifier like any other)
    return eval(code, {"__name__": CASE_MODULE, **env})  # noqa: S307 - checked code only


# A text is checked and compiled once: the same program is written, checked and loaded by the
# checker, the worker and the reducer, and the generator evaluates the same node texts again
# and again. Only texts that pass are cached (a rejection raises).
_LOADS = itertools.count()


@functools.lru_cache(maxsize=4096)
def _checked_program(source: str):
    tree = _parse(source, "exec")
    body = tree.body
    _need(len(body) == 2 and isinstance(body[0], ast.Import) and isinstance(body[1], ast.FunctionDef),
          "a program is `import torch` and one function")
    _need([(a.name, a.asname) for a in body[0].names] == [("torch", None)], "the only import is `import torch`")
    _check_function(body[1])
    return compile(tree, "<torchsim-diff program>", "exec")


@functools.lru_cache(maxsize=4096)
def _checked_expression(expr: str, names: frozenset):
    tree = _parse(expr, "eval")
    _Checker(set(names) | FREE_NAMES).visit(tree.body)
    return compile(tree, "<torchsim-diff node>", "eval")


def _text(text) -> str:
    if not isinstance(text, str):
        raise ProgramRejected(f"program text must be a string, got {type(text).__name__}")
    return text


# CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state (see
# gh-106905): two threads parsing at once (a campaign draws its next case on one while the
# other checks a program) ended a drawing in "SystemError: AST constructor recursion depth mismatch".
_PARSING = threading.Lock()


def _parse(text: str, mode: str) -> ast.AST:
    try:
        with _PARSING:
            return ast.parse(text, mode=mode)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ProgramRejected(f"program text does not parse: {type(exc).__name__}") from None


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ProgramRejected(message)


def _check_function(fn: ast.FunctionDef) -> None:
    args = fn.args
    _need(fn.name == RESULT and not fn.decorator_list and fn.returns is None,
          f"the function is a plain `def {RESULT}(...)`")
    _need(not (args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults
               or args.kw_defaults), "the program takes plain positional parameters")
    defined = set(FREE_NAMES)
    for arg in args.args:
        _need(arg.annotation is None, "parameters carry no annotations")
        defined.add(_plain_name(arg.arg))
    statements = fn.body
    _need(statements and isinstance(statements[-1], ast.Return), "the program ends with its return")
    for stmt in statements[:-1]:
        _need(isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name),
              "each node is one assignment to a name")
        _Checker(defined).visit(stmt.value)
        defined.add(_plain_name(stmt.targets[0].id))
    _Checker(defined).visit(statements[-1].value)


def _plain_name(name: str) -> str:
    _need(not name.startswith("_") and name not in FREE_NAMES, f"name {name!r} may not be defined")
    return name


class _Checker(ast.NodeVisitor):
    """Rejects any expression node outside the registry's vocabulary."""

    def __init__(self, names: set):
        self.names = set(names)

    def generic_visit(self, node):
        raise ProgramRejected(f"{type(node).__name__} is not something the op registry writes")

    def visit_Name(self, node: ast.Name):
        _need(node.id in self.names, f"name {node.id!r} is not a parameter, node or torch")

    def visit_Constant(self, node: ast.Constant):
        _need(isinstance(node.value, _CONSTANTS), f"constant of type {type(node.value).__name__}")

    def visit_Attribute(self, node: ast.Attribute):
        _need(node.attr in ATTRIBUTES, f"attribute {node.attr!r} is not one the op registry writes")
        self.visit(node.value)

    def visit_Call(self, node: ast.Call):
        _need(isinstance(node.func, (ast.Attribute, ast.Name)), "only named functions are called")
        _need(all(k.arg is not None for k in node.keywords), "no ** arguments")
        self.visit(node.func)
        for child in [*node.args, *(k.value for k in node.keywords)]:
            self.visit(child)

    def _visit_all(self, node):
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.expr_context, ast.unaryop)):
                self.visit(child)

    visit_Tuple = visit_List = visit_Subscript = visit_Slice = _visit_all

    def visit_UnaryOp(self, node: ast.UnaryOp):
        _need(isinstance(node.op, (ast.USub, ast.UAdd)), "only signs")
        self.visit(node.operand)

    def visit_ListComp(self, node: ast.ListComp):
        _need(len(node.generators) == 1, "one loop per comprehension")
        loop = node.generators[0]
        _need(isinstance(loop.target, ast.Name) and not loop.ifs and not loop.is_async,
              "a comprehension loops a plain name")
        self.visit(loop.iter)
        inner = _Checker(self.names | {_plain_name(loop.target.id)})
        inner.visit(node.elt)
