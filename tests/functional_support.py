"""Shared by the functional-surface tests (control flow, torch.func, flex_attention, regions):
run a program eagerly, under torch.compile (a counting backend) and under pydynamo, and check
that pydynamo's result equals eager's and that it makes no more graphs than torch.compile,
with fullgraph=True wherever torch.compile's fullgraph succeeds."""
import torch
import torch._dynamo

import pydynamo
from pydynamo.testing import CompileCounter, same


def torch_compile_graphs(fn, args):
    """(graph count, whether fullgraph=True succeeded) of torch.compile on ``fn(*args)``."""
    torch._dynamo.reset()
    cnt = CompileCounter()
    try:
        torch.compile(fn, backend=cnt, fullgraph=True)(*args)
        return cnt.frame_count, True
    except Exception:  # noqa: BLE001 - torch.compile's own limits: compare with its breaking run
        torch._dynamo.reset()
        cnt.clear()
        torch.compile(fn, backend=cnt)(*args)
        return cnt.frame_count, False
    finally:
        torch._dynamo.reset()


def compare(fn, *args, exact=False, atol=1e-5, rtol=1e-4, backend=None):
    """Eager and pydynamo agree, pydynamo makes at most torch.compile's graph count (fullgraph
    where torch.compile's is). Returns pydynamo's counter (or result, with ``backend``)."""
    expected = fn(*args)
    tc_graphs, tc_full = torch_compile_graphs(fn, args)
    pydynamo.reset()
    cnt = CompileCounter()
    got = pydynamo.optimize(cnt, fullgraph=tc_full)(fn)(*args)
    assert same(expected, got, exact=exact, atol=atol, rtol=rtol), (expected, got)
    assert cnt.frame_count <= tc_graphs, (cnt.frame_count, tc_graphs)
    if backend is not None:
        pydynamo.reset()
        got = pydynamo.optimize(backend, fullgraph=tc_full)(fn)(*args)
        assert same(expected, got, exact=False, atol=atol, rtol=rtol), (backend, expected, got)
    pydynamo.reset()
    return cnt


def targets(cnt):
    """Every call target in the graphs a CompileCounter saw, bodies included."""
    found = set()
    for gm in cnt.graphs:
        for mod in gm.modules():
            if isinstance(mod, torch.fx.GraphModule):
                found.update(n.target for n in mod.graph.nodes if n.op == "call_function")
    return found


def raises_like_eager(fn, *args, expected=Exception):
    """``fn(*args)`` raises ``expected`` eagerly, and compiled (eager backend) it raises an
    exception of the same type."""
    import pytest
    with pytest.raises(expected) as eager:
        fn(*args)
    pydynamo.reset()
    try:
        with pytest.raises(type(eager.value)):
            pydynamo.optimize("eager")(fn)(*args)
    finally:
        pydynamo.reset()
