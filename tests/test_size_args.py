"""Size arguments of tensor constructors, factories and shape methods, in every form Python
accepts (ints, a tuple, a list, a torch.Size constant or read from a tensor, symbolic sizes,
SymInts, 0-d tensors, NumPy ints, ``size=`` keywords), each compared with eager. A torch.Size
must reach a graph op as a torch.Size: ``x.new(torch.Size([5, 2]))`` is an empty 5x2 tensor,
``x.new((5, 2))`` the tensor ``[5., 2.]`` (output_graph.OutputGraph._size_node)."""
import numpy as np
import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter, same


def _fn(expr, params="x, y, n"):
    ns = {"torch": torch, "np": np}
    exec(f"def f({params}):\n    return {expr}\n", ns)
    return ns["f"]


def _outcome(fn, args):
    torch.manual_seed(0)
    try:
        return "ok", fn(*args)
    except Exception as e:  # noqa: BLE001 - the exception type is what is compared
        return "raise", type(e)
    finally:
        torch.manual_seed(0)


def _check(expr, args, fullgraph=False, graphs=None, params="x, y, n"):
    """``expr`` under pydynamo (eager backend) gives what eager gives (value, or exception type)."""
    fn = _fn(expr, params)
    want = _outcome(fn, args)
    pydynamo.reset()
    cnt = CompileCounter()
    got = _outcome(pydynamo.optimize(cnt, fullgraph=fullgraph)(fn), args)
    assert want[0] == got[0] and (same(want[1], got[1]) if want[0] == "ok" else want[1] is got[1]), \
        f"{expr}: eager {want}, pydynamo {got}"
    if graphs is not None:
        assert cnt.frame_count == graphs, f"{expr}: {cnt.frame_count} graphs"
    return got[1]


def _args():
    return torch.randn(3), torch.randn(4, 6), 4


# size forms of a 4x6 size (y is 4x6, n is 4); every one is accepted by every call below
FORMS = {"ints": "4, 6", "tuple": "(4, 6)", "list": "[4, 6]", "Size": "torch.Size([4, 6])",
         "size()": "y.size()", "shape": "y.shape", "shape items": "y.shape[0], y.shape[1]",
         "starred": "*y.shape", "Size(shape)": "torch.Size(y.shape)", "concat": "y.shape[:1] + (6,)",
         "reflected concat": "(4,) + y.shape[1:]", "Size of items": "torch.Size([y.size(0), 6])",
         "numpy ints": "np.int64(4), 6", "numpy tuple": "(np.int64(4), 6)", "int argument": "n, 6",
         "size(0)": "y.size(0), y.size(1)", "Size * 1": "y.shape * 1", "list of size(i)": "[y.size(0), 6]"}
# the result's values are compared: uninitialized memory is zeroed first
CALLS = {"new": "x.new({}).zero_()", "new_empty": "x.new_empty({}).zero_()", "new_zeros": "x.new_zeros({})",
         "new_ones": "x.new_ones({}, dtype=torch.int64)", "empty": "torch.empty({}).zero_()",
         "zeros": "torch.zeros({})", "ones": "torch.ones({})", "rand": "torch.rand({})", "randn": "torch.randn({})",
         "randint": "torch.randint(10, ({},))", "view": "torch.arange(24.).view({})",
         "reshape": "torch.arange(24.).reshape({})", "expand": "torch.arange(6.).expand({})",
         "repeat": "torch.ones(2, 3).repeat({})", "tile": "torch.ones(2, 3).tile({})",
         "resize_": "x.clone().resize_({}).zero_()", "new_empty_strided": "x.new_empty_strided(({},), (1, 4)).zero_()",
         "empty_strided": "torch.empty_strided(({},), (1, 4)).zero_()"}
_TUPLE_ONLY = ("randint", "new_empty_strided", "empty_strided")  # the size is one argument of several


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("form", FORMS)
def test_size_forms_match_eager_in_one_graph(call, form):
    template, size = CALLS[call], FORMS[form]
    if call in _TUPLE_ONLY and _is_one_argument(size):
        template = template.replace("({},)", "{}")
    # a NumPy scalar is never a graph op's argument: the graph breaks and eager runs the call
    numpy = form.startswith("numpy")
    out = _check(template.format(size), _args(), fullgraph=not numpy, graphs=None if numpy else 1)
    if not (call == "new" and form in ("tuple", "list", "numpy tuple", "list of size(i)")):  # data
        assert tuple(out.shape) in ((4, 6), (8, 18))


def _is_one_argument(size):
    import ast
    args = ast.parse(f"f({size})").body[0].value.args
    return len(args) == 1 and not isinstance(args[0], ast.Starred)


@pytest.mark.parametrize("kind", ["new", "new_zeros", "zeros", "view", "expand"])
def test_sizes_keyword(kind):
    expr = {"new": "x.new(size=y.shape).zero_()", "new_zeros": "x.new_zeros(size=y.shape)",
            "zeros": "torch.zeros(size=y.size())", "view": "torch.arange(24).view(size=y.shape)",
            "expand": "torch.ones(1, 6).expand(size=torch.Size([4, 6]))"}[kind]
    _check(expr, _args(), fullgraph=True, graphs=1)


@pytest.mark.parametrize("expr", [
    "x.new(torch.Size([5, 2])).zero_()", "x.new(y.size()).zero_()", "x.new(y.shape).zero_()",
    "x.new(y.shape[1:]).zero_()", "x.new(torch.Size()).zero_()", "x.new(torch.Size([n])).zero_()",
    "x.new(y.shape + (1,)).zero_()", "x.new((1,) + y.shape).zero_()", "x.new(y.shape * 2).zero_()",
    "x.new(y.shape[::-1]).zero_()", "x.new(5, 2).zero_()", "x.new(n).zero_()", "x.new(y.size(0)).zero_()",
    "x.new().zero_()",
    # data, not sizes: a list, a tuple (of ints or sizes), a tensor of x's dtype
    "x.new([5, 2])", "x.new((5, 2))", "x.new(())", "x.new([[1, 2]])", "x.new((n, 2))", "x.new([y.size(0), 2])",
    "x.new(x)", "x.new_tensor(y.shape)", "x.new_tensor(torch.Size([2, 3]))",
    "torch.tensor(y.shape)", "torch.as_tensor(torch.Size([4]))",
])
def test_tensor_new_data_or_sizes(expr):
    """Tensor.new's overloads as torch resolves them: sizes (ints, or one torch.Size) or data (a
    sequence that is not a torch.Size, a tensor); the values of the result are compared."""
    _check(expr, _args(), fullgraph=True, graphs=1)


@pytest.mark.parametrize("expr", ["x.new(np.int64(3)).zero_()", "x.new(np.array([1, 2]))",
                                  "x.new(torch.Size([np.int64(3)])).zero_()", "torch.zeros(np.int64(2))"])
def test_tensor_new_with_numpy_values(expr):
    """NumPy values are not graph arguments: the graph breaks, eager decides."""
    _check(expr, _args())


@pytest.mark.parametrize("expr", [
    "torch.zeros(2, (3,))", "torch.zeros(2.5)", "torch.zeros((True, 2))", "torch.zeros([2, None])",
    "x.new(torch.Size([2]), 3)", "x.new([1, 2], dtype=torch.int64)", "x.new(True)", "x.new(2, 3.0)",
    "x.view(3, (1,))", "torch.arange(6).view(True, 6)", "torch.ones(2).expand(2.0)",
    "torch.Size([2.5])", "torch.Size([None])", "torch.Size(5)", "torch.Size([1], [2])", "torch.Size(seq=[1])",
    "torch.Size([y.size(0), 2.5])", "y.shape + [1]", "y.shape * 2.0", "torch.Size(['a'])",
])
def test_forms_eager_rejects_raise_the_same_error(expr):
    _check(expr, _args())


@pytest.mark.parametrize("expr", [
    "torch.Size([True, 2])", "type(torch.Size([True, 2])[0])", "type(torch.Size([np.int64(2)])[0])",
    "torch.Size(range(3))", "torch.Size({1: 2, 3: 4})", "torch.Size([y.size(0), n])", "torch.Size()",
    "torch.Size((i for i in range(3)))", "type(y.shape + (1,))", "type((1,) + y.shape)", "type(y.shape * 2)",
    "type(2 * y.shape)", "y.shape + (True,)", "type(y.shape[1:])", "torch.broadcast_shapes(x.shape, y.shape[1:])",
])
def test_size_objects_the_trace_computes(expr):
    _check(expr, (torch.randn(6), torch.randn(4, 6), 4))


def test_a_folded_op_leaves_no_torch_size_node():
    def f(x, y):
        return x + torch.broadcast_shapes(x.shape, y.shape)[0]

    cnt = CompileCounter()
    pydynamo.reset()
    x, y = torch.randn(6), torch.randn(4, 6)
    assert same(pydynamo.optimize(cnt, fullgraph=True)(f)(x, y), f(x, y))
    assert not [n for n in cnt.graphs[0].graph.nodes if n.target is torch.Size]


@pytest.mark.parametrize("expr", [
    "torch.zeros(t, 2)", "torch.zeros((t, 2))", "x.new_zeros(t)", "x.new_zeros((t, 1))",
    "torch.arange(12).view(t, -1)", "x.new(t, 1).zero_()", "torch.Size([t])", "torch.ones(1).expand(t)",
])
def test_zero_dim_tensor_sizes_are_not_guessed(expr):
    """A 0-d integer tensor as a size is read by ``__index__``: its value is data, so the graph
    breaks there; a second call with another value gives another size."""
    fn = _fn(expr, "x, t")
    pydynamo.reset()
    opt = pydynamo.optimize("eager")(fn)
    for v in (3, 2):
        x, t = torch.randn(3), torch.tensor(v)
        want, got = _outcome(fn, (x, t)), _outcome(opt, (x, t))
        assert want[0] == got[0] == "ok" and same(want[1], got[1]), (expr, v, want, got)


@pytest.mark.parametrize("expr", [
    "x.new(y.shape).zero_()", "x.new_zeros(y.size())", "torch.zeros(y.shape[0], 2)", "y.new_ones(size=y.shape)",
    "torch.zeros(y.shape[:-1] + (3,))", "y.view(y.shape[0], 2, 3)", "y.reshape(y.size()[::-1])",
    "y.new_empty_strided(y.shape, y.stride()).zero_()", "torch.ones(1, 6).expand(y.shape)",
    "x.new(torch.Size([y.shape[0], 2])).zero_()", "torch.Size([y.size(0), 2])", "y.shape[:1] + (2, 3)",
    "y.view(y.size()[:-1] + (2, 3))", "torch.empty(y.shape * 1).zero_()", "torch.full(y.shape, 2.0)",
    "torch.arange(y.shape[0])", "torch.randint(10, y.shape)", "y.repeat(y.shape[:1] + (1,))",
])
def test_symbolic_sizes_stay_symbolic(expr):
    """Under mark_dynamic the size forms keep y's first size symbolic: one graph serves the next
    size too, each call equal to eager."""
    fn = _fn(expr, "x, y")
    pydynamo.reset()
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt, fullgraph=True)(fn)
    for rows in (4, 7):
        x, y = torch.randn(3), torch.randn(rows, 6)
        pydynamo.mark_dynamic(y, 0)
        want, got = _outcome(fn, (x, y)), _outcome(opt, (x, y))
        assert want[0] == got[0] == "ok" and same(want[1], got[1]), (expr, rows, want, got)
    assert cnt.frame_count == 1


@pytest.mark.parametrize("expr", [
    "torch.zeros(n, 2)", "x.new(n).zero_()", "x.new(n, 2).zero_()", "x.new(torch.Size([n])).zero_()",
    "x.new(torch.Size([n]) + (1,)).zero_()", "torch.zeros(torch.Size([n]) + torch.Size([2]))",
    "torch.arange(n)", "torch.ones(1).expand(n)", "x.new_full((n,), 2.0)", "torch.empty_strided((n, 2), (1, n)).zero_()",
    "x.new((n, 2))", "torch.tensor(n)",
])
def test_int_arguments_that_become_symbolic(expr):
    """An int argument that changes becomes a SymInt (automatic dynamic); data made from it
    (``x.new((n, 2))``) specializes and recompiles, never reuses the old value."""
    fn = _fn(expr, "x, n")
    pydynamo.reset()
    opt = pydynamo.optimize("eager")(fn)
    for n in (3, 4, 5):
        x = torch.randn(3)
        want, got = _outcome(fn, (x, n)), _outcome(opt, (x, n))
        assert want[0] == got[0] == "ok" and same(want[1], got[1]), (expr, n, want, got)
