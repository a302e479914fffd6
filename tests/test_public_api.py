"""Issue 19 (A): graph_break, allow_in_graph, disallow_in_graph, run, is_compiling,
mark_static_address, maybe_mark_dynamic and config.patch, under torch._dynamo's names and with
its behaviour; graph counts are never above torch.compile's on the same program."""
import inspect
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter as TorchCounter

import pydynamo
from pydynamo.exc import Unsupported
from pydynamo.testing import CompileCounter, same

BACKENDS = ["eager", "aot_eager"]


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _torch_graphs(fn, *args):
    torch._dynamo.reset()
    try:
        return torch._dynamo.explain(fn)(*args).graph_count
    finally:
        torch._dynamo.reset()


# ---- graph_break ------------------------------------------------------------------------------

def breaks_here(x):
    x = x * 2
    pydynamo.graph_break()
    return x - 1


def torch_breaks_here(x):
    x = torch.sin(x)
    torch._dynamo.graph_break()
    return x + 1


def helper_breaks(x):
    x = x.cos()
    torch._dynamo.graph_break()
    return x * 3


def calls_helper_that_breaks(x):
    return helper_breaks(x + 1) - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_break_splits_the_graph_at_the_users_line(backend):
    x = torch.randn(4)
    out = pydynamo.explain(breaks_here)(x)
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    reason = out.break_reasons[0]
    assert reason.location == f"{__file__}:{_line_of(breaks_here, 'graph_break()')}"
    assert "graph_break()" in reason.reason
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(breaks_here)
    assert same(opt(x), breaks_here(x)) and same(opt(x), breaks_here(x))
    assert cnt.frame_count == 2
    assert same(pydynamo.optimize(backend)(breaks_here)(x), breaks_here(x))
    assert pydynamo.graph_break() is None  # eagerly: nothing


@pytest.mark.parametrize("fn", [torch_breaks_here, calls_helper_that_breaks])
def test_torch_graph_break_is_honoured_and_counts_match_torch(fn):
    x = torch.randn(4)
    out = pydynamo.explain(fn)(x)
    assert out.graph_break_count >= 1
    assert out.break_reasons[0].location == f"{__file__}:{_line_of(fn if fn is torch_breaks_here else helper_breaks, 'graph_break()')}"
    assert out.graph_count <= _torch_graphs(fn, x)
    for backend in BACKENDS:
        pydynamo.reset()
        assert same(pydynamo.optimize(backend)(fn)(x), fn(x), exact=False)


def test_graph_break_with_fullgraph_is_an_error_naming_it():
    opt = pydynamo.optimize(CompileCounter(), fullgraph=True)(breaks_here)
    with pytest.raises(Unsupported) as info:
        opt(torch.randn(3))
    err = info.value
    assert "graph_break()" in err.reason
    assert err.location == f"{__file__}:{_line_of(breaks_here, 'graph_break()')}"


def test_graph_break_message_is_reported():
    def fn(x):
        x = x + 1
        torch._dynamo.graph_break("here, please")
        return x * 2
    out = pydynamo.explain(fn)(torch.randn(2))
    assert out.graph_count == 2 and "here, please" in out.break_reasons[0].reason


# ---- allow_in_graph / disallow_in_graph --------------------------------------------------------

traced_calls = []


def opaque(x, scale):
    traced_calls.append(type(x).__name__)
    print("pydynamo would break the graph on this print if it traced opaque()")
    return x.sin() * scale, x.cos()


pydynamo.allow_in_graph(opaque)


def uses_opaque(x):
    a, b = opaque(x * 2, 3.0)
    return a + b


def torch_allowed(x):
    seen_compiling.append(torch.compiler.is_compiling())
    return torch.tanh(x) + 1


seen_compiling = []
torch.compiler.allow_in_graph(torch_allowed)


def uses_torch_allowed(x):
    return torch_allowed(x - 1) * 2


@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_allow_in_graph_is_one_opaque_node(backend, capsys):
    x = torch.randn(5)
    cnt = CompileCounter()
    traced_calls.clear()
    opt = pydynamo.optimize(cnt)(uses_opaque)
    assert same(opt(x), uses_opaque(x))
    assert cnt.frame_count == 1
    assert traced_calls[0] == "FakeTensor"  # run on fake tensors to learn its outputs, not traced
    nodes = [n for n in cnt.graphs[0].graph.nodes if n.target is opaque]
    assert len(nodes) == 1 and nodes[0].op == "call_function"
    pydynamo.reset()
    want = uses_opaque(x)
    opt = pydynamo.optimize(backend)(uses_opaque)
    for _ in range(2):
        assert same(opt(x), want, exact=False)


def test_torch_allow_in_graph_is_honoured_and_reads_is_compiling():
    x = torch.randn(3)
    seen_compiling.clear()
    out = pydynamo.explain(uses_torch_allowed)(x)
    assert (out.graph_count, out.graph_break_count) == (1, 0)
    assert seen_compiling == [True, False]  # on fake tensors while compiling, then the graph runs
    assert any(n.target is torch_allowed for n in out.graphs[0].graph.nodes)
    assert out.graph_count <= _torch_graphs(uses_torch_allowed, x)
    for backend in BACKENDS:
        pydynamo.reset()
        assert same(pydynamo.optimize(backend)(uses_torch_allowed)(x), uses_torch_allowed(x))


def test_allow_in_graph_results_in_place_and_constant():
    def bump(x):
        x.add_(1)  # returns None: the node stays for its effect

    def three(x):
        return 3  # no tensor: folding it would assume it never changes, so the call breaks

    pydynamo.allow_in_graph([bump, three])

    def fn(x):
        y = x * 2
        bump(y)
        return y * three(y)
    x = torch.randn(3)
    out = pydynamo.explain(fn)(x)
    assert out.graph_break_count == 1 and "returned no tensor" in out.break_reasons[0].reason
    assert any(n.target is bump for n in out.graphs[0].graph.nodes)
    for backend in BACKENDS:
        pydynamo.reset()
        assert same(pydynamo.optimize(backend)(fn)(x), fn(x))


def test_allow_in_graph_takes_lists_and_refuses_non_callables():
    def a(x):
        return x + 1

    def b(x):
        return x - 1
    assert pydynamo.allow_in_graph([a, b]) == [a, b]
    with pytest.raises(TypeError):
        pydynamo.allow_in_graph(3)
    from pydynamo.api import mark_of
    assert mark_of(a) == mark_of(b) == "allow"
    pydynamo.disallow_in_graph(a)
    assert mark_of(a) == "disallow"


def sub_then_add(x):
    return torch.add(torch.sub(torch.mul(x, 2), 1), 3)


def test_disallow_in_graph_breaks_at_a_torch_op():
    from torch._dynamo import trace_rules
    x = torch.randn(4)
    pydynamo.disallow_in_graph(torch.sub)
    torch._dynamo.disallow_in_graph(torch.sub)
    try:
        out = pydynamo.explain(sub_then_add)(x)
        assert (out.graph_count, out.graph_break_count) == (2, 1)
        assert all(n.target is not torch.sub for g in out.graphs for n in g.graph.nodes)
        assert "disallow_in_graph" in out.break_reasons[0].reason
        assert out.graph_count <= _torch_graphs(sub_then_add, x)
        for backend in BACKENDS:
            pydynamo.reset()
            assert same(pydynamo.optimize(backend)(sub_then_add)(x), sub_then_add(x))
    finally:
        pydynamo.allow_in_graph(torch.sub)  # torch ops are in the graph anyway: unmarked
        trace_rules._disallowed_callable_ids.remove(id(torch.sub))
    pydynamo.reset()
    assert pydynamo.explain(sub_then_add)(x).graph_count == 1


def inner_disallowed(x):
    return x.relu() + 1


def calls_disallowed(x):
    return inner_disallowed(x * 2) * 3


def test_disallow_in_graph_user_function_runs_in_python():
    pydynamo.disallow_in_graph(inner_disallowed)
    try:
        x = torch.randn(4)
        cnt = CompileCounter()
        opt = pydynamo.optimize(cnt)(calls_disallowed)
        assert same(opt(x), calls_disallowed(x))
        # caller's two graphs around the call, and the function's own frame compiled by itself
        assert cnt.frame_count == 3
        assert not any(n.target == "relu" for n in cnt.graphs[0].graph.nodes)
    finally:
        pydynamo.allow_in_graph(inner_disallowed)


# ---- run, is_compiling -------------------------------------------------------------------------

def doubled(x):
    return x * 2


def test_run_serves_cache_hits_and_never_compiles():
    cnt = CompileCounter()
    x4, x5 = torch.randn(4), torch.randn(5)
    pydynamo.optimize(cnt)(doubled)(x4)
    assert cnt.frame_count == 1
    assert same(pydynamo.run(doubled)(x4), x4 * 2)
    assert same(pydynamo.run(doubled)(x5), x5 * 2)  # a miss: eager, nothing compiled
    with pydynamo.run():
        assert same(doubled(x5), x5 * 2)
    with pydynamo.run_only():
        assert same(doubled(x5), x5 * 2)
    assert cnt.frame_count == 1
    from pydynamo import _C
    assert _C.cache_size(doubled.__code__) == 1
    assert pydynamo.run(pydynamo.optimize(cnt)(doubled))(x5).shape == (5,)  # the wrapped function
    assert cnt.frame_count == 1


def test_is_compiling_false_eagerly_true_while_tracing():
    def fn(x):
        if pydynamo.is_compiling():
            return x + 1
        return x - 1
    x = torch.randn(3)
    assert pydynamo.is_compiling() is False and torch.equal(fn(x), x - 1)
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(fn)
    assert torch.equal(opt(x), x + 1) and torch.equal(opt(x), x + 1)
    assert cnt.frame_count == 1
    assert pydynamo.is_compiling() is False and torch.compiler.is_compiling() is False


# ---- mark_static_address, maybe_mark_dynamic ---------------------------------------------------

def add(x, y):
    return x + y


def test_mark_static_address_tells_the_backend_and_guards_the_address_if_asked():
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(add)
    x, y = torch.randn(4), torch.randn(4)
    pydynamo.mark_static_address(x, guard=True)
    assert same(opt(x, y), x + y) and same(opt(x, y), x + y)
    assert cnt.frame_count == 1
    static = [n.meta["pydynamo_static"] for n in cnt.graphs[0].graph.nodes if n.op == "placeholder"]
    assert static == [True, False]
    x2 = torch.randn(4)
    pydynamo.mark_static_address(x2, guard=True)
    assert same(opt(x2, y), x2 + y) and cnt.frame_count == 2  # another address: recompiled
    pydynamo.reset()
    cnt.clear()
    opt = pydynamo.optimize(cnt)(add)
    x3, x4 = torch.randn(4), torch.randn(4)
    pydynamo.mark_static_address(x3)  # unguarded: the address is the caller's promise
    assert same(opt(x3, y), x3 + y) and same(opt(x4, y), x4 + y) and cnt.frame_count == 1
    with pytest.raises(TypeError):
        pydynamo.mark_static_address([1])


def twice(x):
    return x * 2


def specializes(x):
    if x.shape[0] == 4:
        return x + 1
    return x - 1


def test_maybe_mark_dynamic_is_symbolic_from_the_first_compile():
    cnt, theirs = CompileCounter(), TorchCounter()
    opt = pydynamo.optimize(cnt)(twice)
    torch._dynamo.reset()
    t_opt = torch.compile(twice, backend=theirs)
    for n in (4, 5, 6):
        x = torch.randn(n, 3)
        pydynamo.maybe_mark_dynamic(x, 0)
        torch._dynamo.maybe_mark_dynamic(x, 0)
        assert same(opt(x), x * 2) and same(t_opt(x), x * 2)
    torch._dynamo.reset()
    assert cnt.frame_count == 1 <= theirs.frame_count


def test_maybe_mark_dynamic_specialized_is_no_error():
    from pydynamo.shapes import ConstraintViolationError
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(specializes)
    for n in (4, 5):
        x = torch.randn(n, 2)
        pydynamo.maybe_mark_dynamic(x, [0])
        assert same(opt(x), specializes(x))
    assert cnt.frame_count == 2
    pydynamo.reset()
    x = torch.randn(4, 2)
    pydynamo.mark_dynamic(x, 0)
    with pytest.raises(ConstraintViolationError):
        pydynamo.optimize(CompileCounter())(specializes)(x)
    pydynamo.mark_static(x, 0)  # marks replace each other
    assert not getattr(x, "_pydynamo_dynamic_dims") and not getattr(x, "_pydynamo_maybe_dynamic_dims", set())


# ---- config.patch -------------------------------------------------------------------------------

def test_config_patch_context_manager_and_decorator():
    config = pydynamo.config
    before = (config.cache_size_limit, config.capture_scalar_outputs, config.suppress_errors)
    assert config.capture_scalar_outputs is False and config.capture_dynamic_output_shape_ops is False
    with config.patch(cache_size_limit=3, capture_scalar_outputs=True):
        assert (config.cache_size_limit, config.capture_scalar_outputs) == (3, True)
    with config.patch({"suppress_errors": True}):
        assert config.suppress_errors is True
    with config.patch("cache_size_limit", 5):
        assert config.cache_size_limit == 5
    assert (config.cache_size_limit, config.capture_scalar_outputs, config.suppress_errors) == before

    patch = config.patch(capture_dynamic_output_shape_ops=True)

    @patch
    def read():
        return config.capture_dynamic_output_shape_ops
    assert read() is True and config.capture_dynamic_output_shape_ops is False
    with patch:
        with patch:  # re-entered: each exit restores what its enter saw
            assert config.capture_dynamic_output_shape_ops is True
        assert config.capture_dynamic_output_shape_ops is True
    assert config.capture_dynamic_output_shape_ops is False
    with pytest.raises(ValueError), config.patch(cache_size_limit=1):
        raise ValueError
    assert config.cache_size_limit == before[0]
    with pytest.raises(AttributeError, match="no_such_knob"):
        config.patch(no_such_knob=1)
    with pytest.raises(AttributeError, match="nope"):
        config.patch({"nope": 1})
    with pytest.raises(AttributeError):
        config.patch("patch", 1)  # functions are not knobs


def test_config_capture_flags_read_from_the_environment():
    env = dict(os.environ, PYDYNAMO_CAPTURE_SCALAR_OUTPUTS="1", PYDYNAMO_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS="0")
    out = subprocess.run([sys.executable, "-c", "import pydynamo.config as c; "
                          "print(c.capture_scalar_outputs, c.capture_dynamic_output_shape_ops)"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_new_names_are_exported():
    for name in ("graph_break", "allow_in_graph", "disallow_in_graph", "run", "is_compiling",
                 "mark_static_address", "maybe_mark_dynamic", "config"):
        assert name in pydynamo.__all__ and getattr(pydynamo, name) is not None
    assert set(pydynamo.__all__) <= set(dir(pydynamo))
