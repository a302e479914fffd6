"""TorchScript functions called from compiled code are one opaque graph call (no break)."""
import pytest
import torch

import pydynamo


@torch.jit.script
def _scripted(x, k: int):
    return x * k + 1


_traced = torch.jit.trace(lambda x: x.sin() * 2, torch.randn(3))


def _f(x):
    return _scripted(x, 3).relu() + _traced(x)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_script_and_trace_functions_are_one_call_in_the_graph(backend):
    x = torch.randn(3)
    pydynamo.reset()
    assert torch.allclose(pydynamo.optimize(backend)(_f)(x), _f(x))
    report = pydynamo.explain(_f)(x)
    assert (report.graph_count, report.graph_break_count) == (1, 0)
    import torch._dynamo as td  # the same program under torch.compile, to compare
    td.reset()
    theirs = td.explain(_f)(x)
    assert report.graph_count <= theirs.graph_count


def test_script_function_gradients():
    x = torch.randn(3, requires_grad=True)
    pydynamo.reset()
    pydynamo.optimize("aot_eager")(_f)(x).sum().backward()
    got = x.grad.clone()
    x.grad = None
    _f(x).sum().backward()
    assert torch.allclose(got, x.grad)


@pydynamo.optimize("eager")
def _optimized(x):
    return x * 2


class _Calls(torch.nn.Module):
    def forward(self, x):
        return _optimized(x) + 1


def test_other_tracers_calling_an_optimized_function_get_a_clear_error():
    with pytest.raises(RuntimeError, match="torch.fx.symbolic_trace is tracing"):
        torch.fx.symbolic_trace(_Calls())
    with pytest.raises(RuntimeError, match="torch.jit.trace is tracing"):
        torch.jit.trace(_Calls(), torch.randn(2))

    def backend(gm, example_inputs):
        _optimized(example_inputs[0])
        return gm.forward

    pydynamo.reset()
    with pytest.raises(Exception, match="pydynamo is compiling"):
        pydynamo.optimize(backend)(lambda x: x - 1)(torch.randn(2))
    assert torch.equal(_optimized(torch.ones(2)), torch.full((2,), 2.0))  # outside: fine
