"""NumPy code traced as tensor operations (variables/ndarray.py): ndarray inputs, NumPy
functions, methods and operators in the graph, arrays (and NumPy scalars) given back as NumPy
gives them, in-place changes reaching the caller's arrays, and breaks where the layer and NumPy
would differ."""
import numpy as np
import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter


def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _same(x, y):
    if isinstance(x, (tuple, list)):
        return type(x) is type(y) and len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and torch.allclose(x, y)
    if isinstance(x, (np.ndarray, np.generic)):
        return type(x) is type(y) and x.dtype == y.dtype and np.shape(x) == np.shape(y) and np.allclose(x, y)
    return x == y


def _torch_graphs(fn, args):
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter as TorchCounter
    torch._dynamo.reset()
    cnt = TorchCounter()
    torch.compile(fn, backend=cnt)(*_copy(args))
    torch._dynamo.reset()
    return cnt.frame_count


def check(fn, *args, backend="eager", graphs=1):
    """``fn`` compiled gives what eager gives (values, dtypes, result types, and the changes to
    its array arguments), in ``graphs`` graphs, never more than torch.compile makes (unless it
    captures nothing)."""
    pydynamo.reset()
    cnt = CompileCounter()
    compiled = pydynamo.optimize(cnt if backend == "eager" else backend)(fn)
    eager_args, compiled_args = _copy(args), _copy(args)
    expected, got = fn(*eager_args), compiled(*compiled_args)
    assert _same(expected, got), (expected, got)
    for a, b in zip(eager_args, compiled_args):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)
    if backend == "eager":
        assert cnt.frame_count == graphs
        theirs = _torch_graphs(fn, args)
        assert theirs == 0 or graphs <= theirs  # 0: torch.compile ran the whole frame eagerly
    pydynamo.reset()
    return got


A = np.arange(6.0).reshape(2, 3)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_functions_methods_and_operators_in_one_graph(backend):
    def f(a):
        b = np.sin(a) * 2 + a.sum()
        c = np.where(b > 1, b, 0.5).astype(np.float32)
        return c.T @ c.reshape(2, 3), np.mean(a, axis=0), a.shape, a.dtype, np.linalg.norm(a), a[:, 1:]

    check(f, A, backend=backend)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_numpy_scalars_come_back_as_numpy_scalars(backend):
    def f(a):
        return a.sum() * 2, a.max() > 1, np.float32(2.0) * a, a[0, 1], np.int64(a.argmax())

    got = check(f, A, backend=backend)
    assert [type(v) for v in got] == [np.float64, np.bool_, np.ndarray, np.float64, np.int64]
    assert got[2].dtype == np.float64  # NumPy scalars keep their dtype in the graph (NEP 50)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_in_place_changes_reach_the_callers_array_and_keep_its_identity(backend):
    def f(a):
        a += 1
        a[0, 0] = 7
        return a

    a = A.copy()
    out = pydynamo.optimize(backend)(f)(a)
    assert out is a and a[0, 0] == 7 and a[1, 2] == 6
    check(f, A, backend=backend)


def test_copies_and_views_as_numpy_makes_them():
    """torch's NumPy layer gives views where NumPy copies (astype to the same dtype, flatten, an
    element): the graph copies, so a write through the result leaves the operand alone."""
    def f(a):
        b = a.astype(a.dtype)
        b += 1
        c = a.flatten()
        c[0] = 5
        v = a[0]  # a view in both
        v[1] = -1
        return a, b, c

    check(f, A)


def test_tensors_and_arrays_convert_both_ways():
    def f(x):
        a = x.numpy()
        b = np.exp(a) + 1
        return torch.from_numpy(b) * 2, torch.as_tensor(a).sum(), torch.tensor(b)

    check(f, torch.randn(3))


def test_array_from_tensor_shares_its_memory():
    def f(x):
        a = x.numpy()
        a[0] = 10
        return x * 1

    x = torch.zeros(3)
    assert pydynamo.optimize("eager")(f)(x)[0] == 10 and x[0] == 10


def test_guards_recompile_on_dtype_shape_and_strides():
    def f(a):
        return a * 2

    cnt = CompileCounter()
    cf = pydynamo.optimize(cnt)(f)
    pydynamo.reset()
    for a in (np.ones(3), np.ones(3, dtype=np.float32), np.ones(4), np.ones((3, 2)).T, np.ones(3)):
        got = cf(a)
        assert got.dtype == a.dtype and np.array_equal(got, a * 2)
    assert cnt.frame_count == 4  # the last one hits the first entry


def test_read_only_array_runs_as_numpy_does():
    def f(a):
        a += 1
        return a

    cf = pydynamo.optimize("eager")(f)
    pydynamo.reset()
    cf(np.zeros(2))
    ro = np.zeros(2)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        cf(ro)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_arrays_sharing_memory_changed_in_place(backend):
    def f(a, b):
        a += 1
        return b * 2

    cf = pydynamo.optimize(backend)(f)
    pydynamo.reset()
    assert np.array_equal(cf(np.zeros(3), np.zeros(3)), np.zeros(3))
    x = np.zeros(3)
    assert np.array_equal(cf(x, x), np.full(3, 2.0))
    x = np.zeros(4)
    assert np.array_equal(cf(x[:3], x[1:]), [2.0, 2.0, 0.0])
    assert np.array_equal(cf(np.zeros(3), np.ones(3)), np.full(3, 2.0))


def test_data_dependent_branch_breaks_and_stays_right():
    def f(a):
        b = a * 2
        if b.sum() > 0:
            return b + 1
        return b - 1

    report = pydynamo.explain(f)(np.ones(3))
    assert report.graph_count == 2 and "branching on the value of an ndarray" in report.break_reasons[0].reason
    for a in (np.ones(3), -np.ones(3)):
        check(f, a, graphs=2)


def test_loop_over_rows_and_len():
    def f(a):
        total = np.zeros(a.shape[1])
        for row in a:
            total = total + row * len(a)
        return total

    check(f, A)


def test_refused_forms_break_with_a_reason():
    def rnd(a):
        return a + np.random.rand(3)

    def mixed(a, x):
        return a + x  # ndarray + tensor

    def item(a):
        return float(a.sum()) + 1

    assert pydynamo.explain(rnd)(np.ones(3)).break_reasons
    assert any("data" in b.reason for b in pydynamo.explain(item)(np.ones(3)).break_reasons)
    x, t = np.ones(3), torch.ones(3)
    with pytest.raises(TypeError, match="Concatenation"):  # NumPy's own error, as in eager
        mixed(x, t)
    with pytest.raises(TypeError, match="Concatenation"):
        pydynamo.optimize("eager")(mixed)(x, t)


def test_unsupported_dtype_input_runs_eagerly():
    def f(a):
        return a + a

    a = np.array(["x", "y"])
    assert list(pydynamo.optimize("eager")(f)(a)) == ["xx", "yy"]


def test_pydynamo_compiles_without_numpy_installed():
    """NumPy is optional (torch runs without it, and pydynamo does not depend on it): with no
    numpy to import, frames still compile. A fresh venv of the README's quick start has none."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['numpy'] = None\n"  # import numpy raises ImportError
            "import torch, pydynamo\n"
            "from pydynamo.testing import CompileCounter\n"
            "counter = CompileCounter()\n"
            "f = pydynamo.optimize(counter, fullgraph=True)(lambda x: x.sin() + 1)\n"
            "assert torch.equal(f(torch.ones(3)), torch.ones(3).sin() + 1)\n"
            "assert 'numpy' not in sys.modules or sys.modules['numpy'] is None\n"
            "print(counter.frame_count)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "1", out.stdout + out.stderr
