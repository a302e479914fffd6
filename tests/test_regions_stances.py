"""nested_compile_region (bodies traced per call, shared when equal, guarded as any call),
set_stance, and pydynamo.compiler's mirror of torch.compiler's names."""
import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter, same

from functional_support import compare


class Block(torch.nn.Module):
    def __init__(self, d=16, eps=1e-5):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d, eps=eps)
        self.fc = torch.nn.Linear(d, d)

    @torch.compiler.nested_compile_region
    def forward(self, x):
        return x + self.fc(self.ln(x)).relu()


class Stack(torch.nn.Module):
    def __init__(self, n=4, **kw):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(**kw) for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


@torch.compiler.nested_compile_region
def helper(x, w):
    return (x @ w).tanh()


def calls_helper_twice(x):
    w = torch.ones(3, 3)
    return helper(helper(x, w), w * 2)


def _bodies(cnt):
    return [name for name, m in cnt.graphs[0].named_children() if isinstance(m, torch.fx.GraphModule)]


def test_repeated_blocks_share_one_body():
    m = Stack().eval()
    x = torch.randn(2, 16)
    with torch.no_grad():
        cnt = compare(m, x)
        pydynamo.reset()
        cnt = CompileCounter()
        assert same(pydynamo.optimize(cnt, fullgraph=True)(m)(x), m(x), exact=False)
    assert cnt.frame_count == 1
    assert len(_bodies(cnt)) == 1, _bodies(cnt)
    targets = [n.target for n in cnt.graphs[0].graph.nodes if n.op == "call_function"]
    assert sum(getattr(t, "__name__", "") == "invoke_subgraph" for t in targets) == 4
    pydynamo.reset()


def test_a_function_region():
    cnt = compare(calls_helper_twice, torch.randn(2, 3))
    assert cnt.frame_count == 1


def test_blocks_with_other_python_state_get_their_own_body():
    m = Stack(n=2).eval()
    m.blocks[1].ln.eps = 0.5  # a constant of the body: the second block cannot reuse the first's
    x = torch.randn(2, 16)
    pydynamo.reset()
    cnt = CompileCounter()
    with torch.no_grad():
        assert same(pydynamo.optimize(cnt, fullgraph=True)(m)(x), m(x), exact=False)
    assert len(_bodies(cnt)) == 2
    pydynamo.reset()


def test_a_change_after_compiling_recompiles():
    m = Stack(n=2).eval()
    x = torch.randn(2, 16)
    pydynamo.reset()
    c = pydynamo.optimize("eager")(m)
    with torch.no_grad():
        assert same(c(x), m(x), exact=False)
        m.blocks[0].ln.eps = 0.25
        assert same(c(x), m(x), exact=False)
    pydynamo.reset()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_backends_and_training(backend):
    m = Stack(n=3)
    x = torch.randn(2, 16)
    m(x).sum().backward()
    expected = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    pydynamo.reset()
    out = pydynamo.optimize(backend)(m)(x)
    assert same(out, m(x), exact=False, atol=1e-5)
    out.sum().backward()
    assert same(expected, [p.grad for p in m.parameters()], exact=False, atol=1e-5)
    pydynamo.reset()


def test_a_region_that_cannot_be_a_subgraph_is_inlined():
    log = []

    @torch.compiler.nested_compile_region
    def noisy(x):
        log.append(x.shape)  # a side effect: inlined, not a subgraph
        return x * 2

    def f(x):
        return noisy(x) + 1
    pydynamo.reset()
    cnt = CompileCounter()
    out = pydynamo.optimize(cnt, fullgraph=True)(f)(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 3.0))
    assert cnt.frame_count == 1 and not _bodies(cnt)
    assert len(log) == 1
    pydynamo.reset()


def _counted():
    cnt = CompileCounter()

    @pydynamo.optimize(cnt)
    def f(x):
        return x.sin() + 1
    return cnt, f


def test_force_eager_as_context_manager_and_decorator():
    pydynamo.reset()
    cnt, f = _counted()
    x = torch.randn(3)
    with pydynamo.compiler.set_stance("force_eager"):
        assert torch.equal(f(x), x.sin() + 1)
    assert cnt.frame_count == 0

    @pydynamo.compiler.set_stance("force_eager")
    def g(x):
        return f(x)
    assert pydynamo.stance.current.stance == "default"  # a decorator sets it only during calls
    g(x)
    assert cnt.frame_count == 0
    f(x)
    assert cnt.frame_count == 1
    pydynamo.reset()


def test_eager_on_recompile_and_fail_on_recompile():
    pydynamo.reset()
    cnt, f = _counted()
    x = torch.randn(3)
    f(x)
    with pydynamo.compiler.set_stance("eager_on_recompile"):
        y = torch.randn(4, 5)
        assert torch.equal(f(y), y.sin() + 1)
        f(x)  # a hit is still served
    assert cnt.frame_count == 1
    with pydynamo.compiler.set_stance("fail_on_recompile"):
        f(x)
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            f(torch.randn(2, 2, 2))
    assert pydynamo.stance.current.stance == "default"
    pydynamo.reset()


def test_eager_then_compile():
    pydynamo.reset()
    cnt, f = _counted()
    x = torch.randn(3)
    with pydynamo.compiler.set_stance("eager_then_compile"):
        f(x)
        assert cnt.frame_count == 0
        f(x)
        assert cnt.frame_count == 1
    pydynamo.reset()


def test_set_stance_as_a_call_and_bad_arguments():
    try:
        pydynamo.compiler.set_stance("force_eager")
        assert pydynamo.stance.current.stance == "force_eager"
    finally:
        pydynamo.compiler.set_stance("default")
    with pytest.raises(ValueError, match="unknown stance"):
        pydynamo.compiler.set_stance("sometimes")
    with pytest.raises(ValueError, match="skip_guard_eval_unsafe"):
        pydynamo.compiler.set_stance(skip_guard_eval_unsafe=True)
    assert pydynamo.stance.current.stance == "default"


def test_force_backend():
    pydynamo.reset()
    cnt, f = _counted()
    other = CompileCounter()
    with pydynamo.compiler.set_stance(force_backend=other):
        f(torch.randn(3))
    assert other.frame_count == 1 and cnt.frame_count == 0
    pydynamo.reset()


def test_compiler_names_mirror_torch_compiler():
    for name in pydynamo.compiler.__all__:
        assert hasattr(torch.compiler, name), name
    assert not any(n.endswith("_unsafe") for n in pydynamo.compiler.__all__)


def test_substitute_in_graph():
    def original(x):
        return x * 3

    @pydynamo.compiler.substitute_in_graph(original)
    def replacement(x):
        return x + x + x

    def f(x):
        return original(x) + 1
    pydynamo.reset()
    cnt = CompileCounter()
    x = torch.randn(3)
    assert same(pydynamo.optimize(cnt, fullgraph=True)(f)(x), f(x), exact=False)
    ops = [n.target for n in cnt.graphs[0].graph.nodes if n.op == "call_function"]
    assert sum(getattr(t, "__name__", "") == "add" for t in ops) >= 2  # the replacement was traced
    pydynamo.reset()


def test_inductor_compiles_a_shared_body_once():
    from pydynamo.backends import regions
    m = Stack(n=3).eval()
    x = torch.randn(2, 16)
    pydynamo.reset()
    seen = []
    original = regions.split_at_regions

    def spy(gm, backend, **kw):
        out = original(gm, backend, **kw)
        seen.append(out._pydynamo_region_bodies)
        return out
    regions.split_at_regions = spy
    try:
        with torch.no_grad():
            assert same(pydynamo.optimize("inductor")(m)(x), m(x), exact=False, atol=1e-5)
    finally:
        regions.split_at_regions = original
        pydynamo.reset()
    assert seen == [1]


def test_generator_inside_a_region_is_its_own():
    @torch.compiler.nested_compile_region
    def split3(x):
        a, b, c = (z * 2 for z in x.chunk(3, dim=-1))
        return a + b + c

    def f(x):
        return split3(x) + split3(x + 1)
    pydynamo.reset()
    cnt = CompileCounter()
    x = torch.randn(2, 6)
    assert same(pydynamo.optimize(cnt, fullgraph=True)(f)(x), f(x), exact=False)
    assert len(_bodies(cnt)) == 1
    pydynamo.reset()
