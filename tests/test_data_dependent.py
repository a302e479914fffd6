"""Issue 19 (A): data-dependent values. By default .item(), .tolist() and nonzero() break the
graph; with config.capture_scalar_outputs / capture_dynamic_output_shape_ops they stay in it as
unbacked SymInts / SymFloats and data-dependent sizes. A branch on one breaks the graph; facts
the trace relied on are checked at run time. Results equal eager, calls with other data reuse
the entry, and graph counts are never above torch.compile's on the same program."""
import pytest
import torch
import torch._dynamo

import pydynamo
from pydynamo.exc import DataDependentError
from pydynamo.testing import CompileCounter, same

SCALARS = {"capture_scalar_outputs": True}
SHAPES = {"capture_dynamic_output_shape_ops": True}


def _counts(fn, args, flags):
    """(pydynamo's graph count, break count), torch.compile's graph count, on ``fn(*args)``."""
    with pydynamo.config.patch(flags):
        ours = pydynamo.explain(fn)(*args)
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(flags):
            theirs = torch._dynamo.explain(fn)(*args).graph_count
    finally:
        torch._dynamo.reset()
    return (ours.graph_count, ours.graph_break_count), theirs


def _check_calls(fn, inputs, flags, backend, frames=None):
    """Compiled ``fn`` equals eager on every input (raising the same exception type where eager
    raises), without recompiling; returns the counting backend."""
    cnt = CompileCounter() if backend == "count" else None
    with pydynamo.config.patch(flags):
        opt = pydynamo.optimize(cnt or backend)(fn)
        for args in inputs:
            try:
                want = fn(*args)
            except Exception as e:  # noqa: BLE001
                with pytest.raises(type(e)):
                    opt(*args)
                continue
            got = opt(*args)
            assert same(got, want, exact=backend in ("count", "eager")), (got, want)
    if cnt is not None and frames is not None:
        assert cnt.frame_count == frames
    return cnt


def scale_by_sum(x):
    return x * x.sum().item()


def item_types(x):
    return x.sum().item() * 2, x.long().sum().item() + 1, x.gt(0).any().item()


def zeros_of_size(x):
    n = x.long().sum().item()
    return torch.zeros(n) + 1, x[:n] * 2, int(x.max().item()) + x


def branch_on_item(x):
    y = x * 2
    if y.sum().item() > 0:
        return y + 1
    return y - 1


def loop_on_item(x):
    for i in range(x.long().sum().item()):
        x = x + i
    return x


def int_tolist(x):
    a, b = x.long().tolist()
    return x * a + b, [v * 2 for v in x.long().tolist()]


def float_tolist(x):
    return x.tolist()


def nonzero_ops(x):
    idx = x.nonzero()
    return idx.float().mean(), idx.shape, x[x > 0] * 2, torch.nonzero(x, as_tuple=True)[0] + 1


def item_across_a_break(x):
    n = x.long().sum().item()
    print("a graph break with n live")
    return x[:n] + n


v = torch.tensor


# ---- default: a graph break, as today and as torch.compile ------------------------------------

@pytest.mark.parametrize("fn,args", [(scale_by_sum, (v([1.0, 2.0]),)), (int_tolist, (v([1.0, 2.0]),)),
                                     (nonzero_ops, (v([1.0, 0.0, 2.0]),))])
def test_default_breaks_the_graph(fn, args):
    (graphs, breaks), theirs = _counts(fn, args, {})
    assert breaks >= 1 and graphs <= theirs
    _check_calls(fn, [args, tuple(a + 1 for a in args)], {}, "count")


def test_default_item_reason_names_the_config():
    out = pydynamo.explain(scale_by_sum)(v([1.0, 2.0]))
    assert "item()" in out.break_reasons[0].reason


# ---- capture_scalar_outputs --------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["count", "eager", "aot_eager", "inductor"])
def test_item_stays_in_the_graph(backend):
    inputs = [(v([1.5, 2.0]),), (v([-3.0, 1.0]),), (v([0.25, 0.5]),)]
    _check_calls(scale_by_sum, inputs, SCALARS, backend, frames=1)
    (graphs, breaks), theirs = _counts(scale_by_sum, inputs[0], SCALARS)
    assert (graphs, breaks) == (1, 0) and graphs <= theirs


def test_item_node_and_result_types():
    cnt = _check_calls(item_types, [(v([1.5, -2.0]),), (v([0.0, 0.0]),), (v([3.0, 4.0]),)], SCALARS,
                       "count", frames=1)
    assert sum(1 for n in cnt.graphs[0].graph.nodes if n.target == "item") == 3
    with pydynamo.config.patch(SCALARS):
        got = pydynamo.optimize("eager")(item_types)(v([1.5, 2.0]))
    assert [type(r) for r in got] == [float, int, bool]


@pytest.mark.parametrize("backend", ["count", "aot_eager", "inductor"])
def test_item_as_a_size_is_checked_at_run_time(backend):
    # a negative size raises as eager does (a runtime assert of the graph, as torch.compile's)
    inputs = [(v([1.0, 2.0, 0.0]),), (v([3.0, 0.0, 0.0]),), (v([-5.0, 1.0, 0.0]),)]
    _check_calls(zeros_of_size, inputs, SCALARS, backend, frames=1)
    (graphs, breaks), theirs = _counts(zeros_of_size, inputs[0], SCALARS)
    assert (graphs, breaks) == (1, 0) and graphs <= theirs


def test_branch_on_an_unbacked_value_breaks_cleanly():
    inputs = [(v([1.0, 2.0]),), (v([-1.0, -2.0]),), (v([3.0, -1.0]),)]
    _check_calls(branch_on_item, inputs, SCALARS, "count", frames=3)  # graph + one per branch
    (graphs, breaks), theirs = _counts(branch_on_item, inputs[0], SCALARS)
    assert (graphs, breaks) == (2, 1) and graphs <= theirs
    with pydynamo.config.patch(SCALARS):
        out = pydynamo.explain(branch_on_item)(*inputs[0])
        assert "data-dependent" in out.break_reasons[0].reason
        opt = pydynamo.optimize(CompileCounter(), fullgraph=True)(branch_on_item)
        with pytest.raises(DataDependentError):
            opt(*inputs[0])


def test_python_loop_over_an_unbacked_count_breaks():
    inputs = [(v([1.0, 2.0]),), (v([0.0, 1.0]),)]
    _check_calls(loop_on_item, inputs, SCALARS, "count")
    (graphs, breaks), theirs = _counts(loop_on_item, inputs[0], SCALARS)
    assert breaks == 1 and graphs <= theirs


def test_unbacked_value_live_across_a_graph_break():
    _check_calls(item_across_a_break, [(v([1.0, 1.0, 0.0]),), (v([2.0, 0.0, 0.0]),)], SCALARS, "count")


def test_tolist_of_an_integer_tensor_is_captured():
    inputs = [(v([1.0, 2.0]),), (v([3.0, -4.0]),)]
    _check_calls(int_tolist, inputs, SCALARS, "count", frames=1)
    (graphs, breaks), theirs = _counts(int_tolist, inputs[0], SCALARS)
    assert (graphs, breaks) == (1, 0) and graphs <= theirs


def test_tolist_of_a_float_tensor_still_breaks():
    with pydynamo.config.patch(SCALARS):
        out = pydynamo.explain(float_tolist)(v([1.0, 2.0]))
    assert out.graph_break_count == 1 and "tolist" in out.break_reasons[0].reason
    _check_calls(float_tolist, [(v([1.0, 2.0]),)], SCALARS, "count")


def test_scalars_with_dynamic_shapes():
    def fn(x):
        n = x.long().sum().item()
        return x[:n] * x.shape[0]
    cnt = CompileCounter()
    with pydynamo.config.patch(SCALARS):
        opt = pydynamo.optimize(cnt, dynamic=True)(fn)
        for x in (v([1.0, 1.0, 0.0]), v([2.0, 0.0, 0.0, 1.0]), v([1.0, 0.0, 0.0, 0.0, 0.0])):
            assert same(opt(x), fn(x))
    assert cnt.frame_count == 1


# ---- capture_dynamic_output_shape_ops ---------------------------------------------------------

@pytest.mark.parametrize("backend", ["count", "eager", "aot_eager", "inductor"])
def test_nonzero_stays_in_the_graph(backend):
    inputs = [(v([1.0, 0.0, 2.0]),), (v([0.0, 0.0, 3.0]),), (v([0.0, 0.0, 0.0]),), (v([1.0, 2.0, 3.0]),)]
    _check_calls(nonzero_ops, inputs, SHAPES, backend, frames=1)
    (graphs, breaks), theirs = _counts(nonzero_ops, inputs[0], SHAPES)
    assert (graphs, breaks) == (1, 0) and graphs <= theirs


def test_branch_on_a_data_dependent_size_breaks():
    def fn(x):
        idx = x.nonzero()
        if idx.shape[0] > 1:
            return idx.sum()
        return idx.sum() - 1
    inputs = [(v([1.0, 0.0, 2.0]),), (v([0.0, 0.0, 3.0]),)]
    _check_calls(fn, inputs, SHAPES, "count")
    (graphs, breaks), theirs = _counts(fn, inputs[0], SHAPES)
    assert breaks == 1 and graphs <= theirs


def test_scalar_flag_alone_does_not_capture_nonzero():
    with pydynamo.config.patch(SCALARS):
        out = pydynamo.explain(nonzero_ops)(v([1.0, 0.0, 2.0]))
    assert out.graph_break_count >= 1


def clamp_count(x):
    n = x.long().sum().item()
    return x[:max(n, 1)] * min(n, 2), max(n, 0), float(n) / 2


def test_builtins_on_unbacked_ints_stay_symbolic():
    inputs = [(v([1.0, 2.0, 0.0]),), (v([0.0, 0.0, 0.0]),), (v([-3.0, 0.0, 1.0]),)]
    _check_calls(clamp_count, inputs, SCALARS, "count", frames=1)
    (graphs, breaks), theirs = _counts(clamp_count, inputs[0], SCALARS)
    assert (graphs, breaks) == (1, 0) and graphs <= theirs
    with pydynamo.config.patch(SCALARS):
        got = pydynamo.optimize("eager")(clamp_count)(*inputs[0])
    assert [type(r) for r in got[1:]] == [int, float]
