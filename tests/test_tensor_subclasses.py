"""Tensor subclasses (issue 41): traceable wrapper subclasses (``__torch_dispatch__`` with the
flatten protocol) as graph inputs, traced through torch's fake mode and handed to the backend as
they are (AOTAutograd flattens them). Results, gradients and graph counts compared with eager and
torch.compile."""
import os
import sys

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import pydynamo
from pydynamo.testing import CompileCounter, CompiledCodes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from subclass_defs import scaled  # noqa: E402

BACKENDS = ["eager", "aot_eager", "inductor"]


def _two(seed, n=3, grad=False):
    g = torch.Generator().manual_seed(seed)
    return TwoTensor(torch.randn(n, generator=g, requires_grad=grad),
                     torch.randn(n, generator=g, requires_grad=grad))


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, TwoTensor):
        assert torch.allclose(a.a, b.a) and torch.allclose(a.b, b.b)
    elif isinstance(a, torch.Tensor):
        assert torch.allclose(a, b)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b) and all(_same(x, y) is None for x, y in zip(a, b))
    else:
        assert a == b


def _ops(x, y):
    z = x * 2 + y
    return z.sin(), type(z).__name__, z.shape, z.dtype


def _torch_frames(fn, *calls):
    import torch._dynamo
    import torch._dynamo.testing
    torch._dynamo.reset()
    cnt = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(fn, backend=cnt)
    for args in calls:
        compiled(*args)
    return cnt.frame_count


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_tensor_input_in_one_graph(backend):
    pydynamo.reset()
    x, y = _two(0), torch.randn(3)
    _same(pydynamo.optimize(backend)(_ops)(x, y), _ops(x, y))
    explained = pydynamo.explain(_ops)(x, y)
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def test_two_tensor_hits_and_recompiles_like_torch_compile():
    calls = [(_two(0), torch.randn(3)), (_two(1), torch.randn(3)), (_two(2, n=5), torch.randn(5)),
             (_two(3, n=5), torch.randn(5))]
    pydynamo.reset()
    cnt = CompileCounter()
    f = pydynamo.optimize(cnt)(_ops)
    for args in calls:
        _same(f(*args), _ops(*args))
    # a new size recompiles once, with the sizes symbolic (automatic dynamic), then hits
    assert cnt.frame_count == 2
    assert cnt.frame_count <= _torch_frames(_ops, *calls) + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_tensor_sizes_become_symbolic_once_changed(backend):
    """After a second size, a TwoTensor input's sizes (outer and inner) are symbolic: later sizes
    hit, in inference and training; a new layout or dtype still recompiles."""
    def loss(x, w):
        return (x * w).sin().sum(0)
    pydynamo.reset()
    cnt = CompileCounter()
    compiled = pydynamo.optimize(cnt if backend == "eager" else backend)(loss)
    w = torch.randn(4, generator=torch.Generator().manual_seed(5))
    for n in (3, 5, 7, 9):
        g = torch.Generator().manual_seed(n)
        x = TwoTensor(torch.randn(n, 4, generator=g), torch.randn(n, 4, generator=g)).requires_grad_()
        ref_x = TwoTensor(x.a.detach().clone(), x.b.detach().clone()).requires_grad_()
        out, ref = compiled(x, w), loss(ref_x, w)
        _same(out, ref)
        out.sum().backward()
        ref.sum().backward()
        _same(x.grad, ref_x.grad)
    if backend == "eager":
        assert cnt.frame_count == 2
        other = TwoTensor(torch.randn(4, 6), torch.randn(4, 6)).t()
        _same(compiled(other, w), loss(other, w))
        assert cnt.frame_count == 3


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_two_tensor_training_gradients(backend):
    def loss(x, w):
        return (x * w).sin().sum()

    def run(compile_fn):
        x = _two(0, grad=True)
        w = torch.randn(3, generator=torch.Generator().manual_seed(9), requires_grad=True)
        out = compile_fn(loss)(x, w)
        out.backward()
        return out, x, w
    e_out, e_x, e_w = run(lambda f: f)
    pydynamo.reset()
    c_out, c_x, c_w = run(pydynamo.optimize(backend))
    _same(c_out, e_out)
    assert torch.allclose(c_w.grad, e_w.grad)
    _same(c_x.grad, e_x.grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scaled_wrapper_metadata_is_guarded(backend):
    """A float8-style wrapper: its scale is the flatten context, guarded by equality."""
    def f(x, y):
        return (x + y).sum() * 2, type(x.t()).__name__
    pydynamo.reset()
    cnt = CompileCounter()
    g = pydynamo.optimize(cnt)(f) if backend == "eager" else pydynamo.optimize(backend)(f)
    y = torch.ones(3, 4)
    values = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    for scale in (0.5, 0.5, 0.25):
        x = scaled(values, scale)
        _same(g(x, y), f(x, y))
    if backend == "eager":
        assert cnt.frame_count == 2  # the new scale recompiled, the equal one hit


def test_nested_wrapper_subclass():
    def f(x):
        return x * 3
    pydynamo.reset()
    x = TwoTensor(TwoTensor(torch.randn(2), torch.randn(2)), TwoTensor(torch.randn(2), torch.randn(2)))
    got, expected = pydynamo.optimize("aot_eager")(f)(x), f(x)
    assert type(got) is TwoTensor and type(got.a) is TwoTensor
    assert torch.allclose(got.a.b, expected.a.b)


class _Untraceable(torch.Tensor):
    """A wrapper subclass without the flatten protocol: it cannot be traced."""
    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

    def __init__(self, inner):
        self.inner = inner

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.inner if isinstance(t, _Untraceable) else t  # noqa: E731
        return func(*[unwrap(a) for a in args], **(kwargs or {}))


def test_untraceable_subclass_breaks_with_its_name():
    pydynamo.reset()
    x = _Untraceable(torch.randn(2))
    explained = pydynamo.explain(lambda t: t + 1)(x)
    assert any("_Untraceable" in str(b.reason) for b in explained.break_reasons)
    got = pydynamo.optimize("eager")(lambda t: t + 1)(x)
    assert torch.equal(got, x.inner + 1)


# ---- __torch_function__ subclasses ---------------------------------------------------------

SEEN = []


class Logged(torch.Tensor):
    """Records each function offered to it, then defers to torch's default (which converts)."""
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        SEEN.append(func.__name__)
        return super().__torch_function__(func, types, args, kwargs or {})


class Doubling(torch.Tensor):
    """Overrides one op (add doubles its result) and computes with dispatch disabled."""
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if func is torch.Tensor.add or func is torch.add:
            out = out * 2
        return out.as_subclass(cls) if isinstance(out, torch.Tensor) else out


class Plain(torch.Tensor):
    pass


def _tf_program(x, y):
    z = x + y
    w = torch.relu(z) * 2 - 1
    v = 1 - w
    return w, type(w).__name__, torch.nn.functional.gelu(v).sum(), torch.add(x, 1), v is v


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cls", [Logged, Doubling, Plain])
def test_torch_function_subclass_in_one_graph(cls, backend):
    x = torch.randn(3, generator=torch.Generator().manual_seed(0)).as_subclass(cls)
    y = torch.randn(3, generator=torch.Generator().manual_seed(1))
    SEEN.clear()
    expected = _tf_program(x, y)
    seen_eager = list(SEEN)
    pydynamo.reset()
    SEEN.clear()
    got = pydynamo.optimize(backend)(_tf_program)(x, y)
    assert list(SEEN) == seen_eager  # the override's own effects replayed, in order
    _same(got, expected)
    explained = pydynamo.explain(_tf_program)(x, y)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


def test_torch_function_subclass_graphs_at_most_torch_compile():
    """(torch.compile fails on Doubling with a RecursionError on torch 2.13: compared on Logged.)"""
    y = torch.randn(3)
    calls = [(torch.randn(3).as_subclass(Logged), y), (torch.randn(3).as_subclass(Logged), y)]
    pydynamo.reset()
    cnt = CompileCounter()
    f = pydynamo.optimize(cnt)(_tf_program)
    for args in calls:
        SEEN.clear()  # (appending to a list read from the globals guards its length)
        f(*args)
    assert cnt.frame_count == 1
    assert cnt.frame_count <= _torch_frames(_tf_program, *calls)
    # another class at the same place: the exact type is guarded
    _same(f(torch.randn(3).as_subclass(Doubling), y)[1], "Doubling")
    assert cnt.frame_count == 2


def test_torch_function_subclass_gradients():
    def loss(x, w):
        return (x * w + x).sum()

    def run(compile_fn):
        base = torch.randn(3, generator=torch.Generator().manual_seed(0), requires_grad=True)
        w = torch.randn(3, generator=torch.Generator().manual_seed(1), requires_grad=True)
        out = compile_fn(loss)(base.as_subclass(Doubling), w)
        out.backward()
        return out, base.grad, w.grad
    expected = run(lambda f: f)
    pydynamo.reset()
    got = run(pydynamo.optimize("aot_eager"))
    assert type(got[0]) is Doubling
    assert all(torch.allclose(a, b) for a, b in zip(got, expected))


def test_as_subclass_in_the_trace_and_parameter_subclass():
    class MyParam(torch.nn.Parameter):
        pass

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = MyParam(torch.ones(3))

        def forward(self, x):
            y = (x * self.w).as_subclass(Logged)
            return y + 1, type(self.w).__name__, isinstance(self.w, torch.nn.Parameter)
    m = M()
    x = torch.randn(3)
    expected = m(x)
    pydynamo.reset()
    got = pydynamo.optimize("eager")(m)(x)
    _same(got, expected)
    explained = pydynamo.explain(m)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


def test_compiling_never_calls_the_override_itself():
    """The compiler's own reads of a subclass input (fake tensors, guards) are not offered to
    its __torch_function__: only the program's calls are."""
    def f(x):
        return x * 3
    x = torch.randn(2).as_subclass(Logged)
    SEEN.clear()
    f(x)
    seen_eager = list(SEEN)
    pydynamo.reset()
    SEEN.clear()
    pydynamo.optimize("eager")(f)(x)
    assert SEEN == seen_eager == ["mul"]


def test_torchao_float8_training_equals_eager():
    """torchao's float8 training (installed beside the pinned torch where it can be): its linear
    makes Float8TrainingTensor wrappers inside autograd.Functions, whose backward computes scales
    under no_grad and applies another Function. The subclass is made by a graph node; the model
    is one graph, as under torch.compile. Results and gradients equal eager's, and no frame of
    torch's or torchao's own (their __torch_dispatch__ handlers, run by the dispatcher) is ever
    compiled."""
    pytest.importorskip("torchao.float8")
    import copy
    from torchao.float8 import convert_to_float8_training
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
    convert_to_float8_training(m)
    ref = copy.deepcopy(m)
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1))
    pydynamo.reset()
    explained = pydynamo.explain(m)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    assert explained.graph_count <= _torch_frames(m, (x,))
    expected = ref(x)
    expected.sum().backward()
    pydynamo.reset()
    with CompiledCodes() as seen:
        got = pydynamo.optimize("aot_eager")(m)(x)
        got.sum().backward()
    assert torch.allclose(got, expected)
    assert all(torch.allclose(p.grad, q.grad) for p, q in zip(m.parameters(), ref.parameters()))
    # module forwards and autograd.Function forwards are the model's code; the subclass's op
    # handlers (float8_ops.py, reached from __torch_dispatch__) are dispatch
    dispatch = [c.co_qualname for c in seen.codes
                if c.co_filename.endswith(("float8_ops.py", "float8_training_tensor.py", "_python_dispatch.py"))]
    assert not dispatch, dispatch


def test_an_input_changed_in_place_that_is_a_wrapper_subclass_inner_tensor():
    """A wrapper subclass's memory is its inner tensors': when another input changed in place is
    one of them, the graph traced apart from it must not serve it (found by the fuzzer's subclass
    family; the wrapper's own storage holds no memory, so it looked as if nothing overlapped)."""
    def f(t, a):
        a.add_(1)
        return t * 2

    def run(fn, alias):
        a = torch.zeros(3)
        t = TwoTensor(a if alias else torch.zeros(3), torch.ones(3))
        out = fn(t, a)
        return out.a.clone(), out.b.clone(), a.clone()
    pydynamo.reset()
    cnt = CompileCounter()
    cf = pydynamo.optimize(cnt)(f)
    for alias in (False, True, False, True):
        expected, got = run(f, alias), run(cf, alias)
        assert all(torch.equal(e, g) for e, g in zip(expected, got)), (alias, expected, got)
    assert cnt.frame_count == 2  # one graph per layout of the overlap


def test_portable_tensor_guards_read_a_subclass_with_its_override_off():
    """The portable TENSOR_MATCH path (pydynamo._tensor_guard not built, as after a build without
    torch) reads metadata through torch's getters: a __torch_function__ subclass must not see
    them as calls, and the memory of a wrapper subclass is read from its inner tensors. This
    file's tests, run again in a process where the C++ module cannot be imported."""
    import subprocess
    if os.environ.get("PYDYNAMO_TESTS_PORTABLE_GUARDS") == "1":
        from pydynamo import _C
        assert not _C.fast_tensor_guards()
        return
    env = dict(os.environ, PYDYNAMO_TESTS_PORTABLE_GUARDS="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
