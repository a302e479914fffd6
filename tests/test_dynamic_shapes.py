"""Dynamic shapes (issue 7): automatic dynamic, dynamic=True/False, mark_dynamic/mark_static,
shape guards, symbolic graphs given to backends."""
import logging

import pytest
import torch

import pydynamo
from pydynamo import _C
from pydynamo.shapes import ConstraintViolationError
from pydynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset():
    pydynamo.reset()
    yield
    pydynamo.reset()


def _symbolic_placeholders(gm):
    return [n for n in gm.graph.nodes if n.op == "placeholder"
            and isinstance(n.meta["example_value"], torch.Tensor)
            and any(isinstance(s, torch.SymInt) for s in n.meta["example_value"].shape)]


def test_walkthrough_alternating_sizes_compile_twice():
    cnt = CompileCounter()

    @pydynamo.optimize(cnt)
    def fn(x):
        return torch.sin(x) + x.size(0)

    for _ in range(100):
        for n in (10, 8):
            x = torch.randn(n)
            torch.testing.assert_close(fn(x), torch.sin(x) + n)
    assert cnt.frame_count == 2
    x = torch.randn(37)
    torch.testing.assert_close(fn(x), torch.sin(x) + 37)
    assert cnt.frame_count == 2


def test_backend_gets_symbolic_graph_and_real_inputs():
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    @pydynamo.optimize(backend)
    def fn(x):
        return x.view(x.size(0) // 2, -1) * 2

    fn(torch.randn(8, 3))
    fn(torch.randn(6, 3))
    assert len(seen) == 2
    gm, inputs = seen[1]
    # as torch.compile hands them: real tensors, and a SymInt placeholder per symbol
    assert _symbolic_placeholders(gm) and [type(t) for t in inputs] == [torch.SymInt, torch.Tensor]
    for n in (4, 10, 12):
        x = torch.randn(n, 3)
        torch.testing.assert_close(fn(x), x.view(n // 2, -1) * 2)
    assert len(seen) == 2


class Attention(torch.nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.qkv, self.proj, self.heads = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d), heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


def test_attention_over_many_sequence_lengths_compiles_at_most_twice():
    torch.manual_seed(0)
    model, cnt = Attention(), CompileCounter()
    opt = pydynamo.optimize(cnt)(model)
    with torch.no_grad():
        for t in range(2, 102):
            x = torch.randn(2, t, 16)
            torch.testing.assert_close(opt(x), model(x))
    assert cnt.frame_count <= 2


def test_batch_size_change_on_module():
    model, cnt = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU()), CompileCounter()
    opt = pydynamo.optimize(cnt)(model)
    for b in (3, 5, 7, 9):
        x = torch.randn(b, 4)
        torch.testing.assert_close(opt(x), model(x))
    assert cnt.frame_count == 2


def test_int_argument_becomes_symbolic():
    cnt = CompileCounter()

    @pydynamo.optimize(cnt)
    def fn(x, n):
        return x[:n] * n

    x = torch.randn(20)
    for n in (3, 5, 7, 11):
        torch.testing.assert_close(fn(x, n), x[:n] * n)
    assert cnt.frame_count == 2


def test_size_arithmetic_as_python_ints():
    cnt = CompileCounter()

    @pydynamo.optimize(cnt)
    def fn(x):
        half = x.size(0) // 2
        return x[:half] + x[half:2 * half], half + 1

    for n in (6, 8, 10, 12):
        x = torch.randn(n, 2)
        out, h = fn(x)
        assert h == n // 2 + 1 and type(h) is int
        torch.testing.assert_close(out, x[:n // 2] + x[n // 2:2 * (n // 2)])
    assert cnt.frame_count == 2


def test_branch_on_size_is_guarded():
    cnt = CompileCounter()

    @pydynamo.optimize(cnt)
    def fn(x):
        if x.size(0) > 5:
            return x + 1
        return x - 1

    for n in (7, 8, 9, 3, 2, 10):
        x = torch.randn(n)
        torch.testing.assert_close(fn(x), x + 1 if n > 5 else x - 1)
    assert cnt.frame_count == 3  # static 7; symbolic with s0 > 5; symbolic with s0 <= 5


def test_equal_sizes_guarded():
    cnt = CompileCounter()

    @pydynamo.optimize(cnt)
    def fn(x, y):
        return x + y

    fn(torch.randn(3), torch.randn(3))
    fn(torch.randn(4), torch.randn(4))
    guards = "\n".join(_C.get_cache_entries(fn._pydynamo_orig_fn.__code__)[0].guards.texts())
    assert "L['y'].size()[0] == L['x'].size()[0]" in guards
    x = torch.randn(5)
    torch.testing.assert_close(fn(x, x * 2), x * 3)
    assert cnt.frame_count == 2
    torch.testing.assert_close(fn(torch.randn(5), torch.randn(1)).shape, torch.Size([5]))  # broadcast
    assert cnt.frame_count == 3


def test_rank_and_dtype_changes_still_recompile():
    cnt = CompileCounter()

    @pydynamo.optimize(cnt)
    def fn(x):
        return x * 2

    fn(torch.randn(3))
    fn(torch.randn(4))
    assert cnt.frame_count == 2
    fn(torch.randn(4, 2))
    assert cnt.frame_count == 3
    fn(torch.randn(5).double())
    assert cnt.frame_count == 4
    x = torch.randn(6)
    torch.testing.assert_close(fn(x), x * 2)
    assert cnt.frame_count == 4


def test_dynamic_true_and_false():
    cnt = CompileCounter()
    fn = pydynamo.optimize(cnt, dynamic=True)(lambda x: x.sum(0) * x.size(0))
    for n in (3, 4, 5):
        x = torch.randn(n, 2)
        torch.testing.assert_close(fn(x), x.sum(0) * n)
    assert cnt.frame_count == 1
    fn(torch.randn(1, 2))  # 1 is specialized
    assert cnt.frame_count == 2

    cnt = CompileCounter()
    fn = pydynamo.optimize(cnt, dynamic=False)(lambda x: x * 2)
    for n in (3, 4, 5):
        fn(torch.randn(n))
    assert cnt.frame_count == 3


def test_mark_dynamic_and_mark_static():
    cnt = CompileCounter()
    fn = pydynamo.optimize(cnt)(lambda x: x * 2)
    x = torch.randn(3, 4)
    pydynamo.mark_dynamic(x, 0)
    fn(x)
    fn(torch.randn(7, 4))
    assert cnt.frame_count == 1

    cnt = CompileCounter()
    fn = pydynamo.optimize(cnt)(lambda x: x * 2)
    for n in (3, 4, 5):
        x = torch.randn(n)
        pydynamo.mark_static(x, 0)
        fn(x)
    assert cnt.frame_count == 3


def test_mark_dynamic_specialized_is_reported_with_user_line():
    def fn(x):
        return x.view(3, -1)  # forces x.size(0) == 3

    x = torch.randn(3, 4)
    pydynamo.mark_dynamic(x, 0)
    with pytest.raises(ConstraintViolationError) as info:
        pydynamo.optimize(CompileCounter())(fn)(x)
    assert "L['x'].size()[0]" in str(info.value) and "test_dynamic_shapes.py" in str(info.value)


def test_recompile_log_names_failing_shape_fact(caplog):
    fn = pydynamo.optimize(CompileCounter())(lambda x: x + 1 if x.size(0) > 5 else x - 1)
    with caplog.at_level(logging.INFO, logger="pydynamo.recompiles"):
        fn(torch.randn(7))
        fn(torch.randn(8))
        fn(torch.randn(3))
    assert "symbolic shapes" in caplog.text and "(6 <= L['x'].size()[0])" in caplog.text


def test_explain_shows_shape_guards():
    def fn(x):
        return x * x.size(0)
    pydynamo.mark_dynamic(x := torch.randn(4), 0)
    out = pydynamo.explain(fn)(x)
    assert "symbolic shapes" in str(out) and "2 <= L['x'].size()[0]" in str(out)


def test_non_contiguous_input_strides_are_guarded():
    fn = pydynamo.optimize("eager")(lambda x: x.sum(0))
    base = torch.randn(8, 8)
    for n in (3, 4, 5):
        x = base[:n, :n]
        torch.testing.assert_close(fn(x), x.sum(0))
    x = torch.randn(8, 5).t()[:, :6]  # another stride pattern
    torch.testing.assert_close(fn(x), x.sum(0))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiling_backends_run_symbolic_graphs(backend):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    opt = pydynamo.compile(model, backend=backend)
    for b in (3, 5, 6):
        x = torch.randn(b, 4)
        torch.testing.assert_close(opt(x), model(x))
    x = torch.randn(7, 4, requires_grad=True)
    opt(x).sum().backward()
    assert x.grad is not None and x.grad.shape == (7, 4)
