"""Python attributes stored on tensors (``x.tag = ...``): read, tested and written in traced code,
guarded present or absent, writes replayed after the graph."""
import torch

import pydynamo


def _compiled(fn, backend="eager"):
    pydynamo.reset()
    return pydynamo.optimize(backend)(fn)


def test_getattr_default_follows_the_attribute_and_recompiles():
    def f(x):
        return x * (2 if getattr(x, "tag", None) == "t" else 3)

    cf = _compiled(f)
    x = torch.ones(2)
    assert torch.equal(cf(x), f(x))          # absent: guarded absent
    x.tag = "t"
    assert torch.equal(cf(x), f(x)) and torch.equal(f(x), torch.full((2,), 2.0))
    x.tag = "u"
    assert torch.equal(cf(x), f(x))
    del x.tag
    assert torch.equal(cf(x), f(x))


def test_hasattr_and_read_of_an_input_attribute():
    def f(x):
        if hasattr(x, "scale"):
            return x * x.scale
        return x + 1

    cf = _compiled(f)
    x = torch.ones(3)
    assert torch.equal(cf(x), f(x))
    x.scale = 5.0
    assert torch.equal(cf(x), f(x))
    x.scale = 7.0
    assert torch.equal(cf(x), torch.full((3,), 7.0))


def test_attribute_write_on_an_input_is_replayed_and_seen_by_later_reads():
    def f(x):
        x.tag = 5
        return x + x.tag

    cf = _compiled(f)
    x = torch.zeros(2)
    out = cf(x)
    assert torch.equal(out, torch.full((2,), 5.0)) and x.tag == 5
    report = pydynamo.explain(f)(torch.zeros(2))
    assert report.graph_count == 1 and report.graph_break_count == 0


def test_missing_attribute_raises_as_eager():
    def f(x):
        try:
            return x.nothing
        except AttributeError:
            return x - 1

    cf = _compiled(f)
    x = torch.ones(2)
    assert torch.equal(cf(x), f(x))
    x.nothing = torch.zeros(2)
    assert torch.equal(cf(x), f(x))


def test_inplace_result_is_the_input():
    def f(x):
        y = x.add_(1)
        return y * getattr(y, "k", 1)

    cf = _compiled(f)
    x, x2 = torch.ones(2), torch.ones(2)
    x.k, x2.k = 3, 3
    assert torch.equal(cf(x), f(x2))


def test_attribute_of_a_computed_tensor_breaks_with_a_reason():
    def f(x):
        y = x + 1
        y.tag = "a"
        return y * 2, y.tag

    report = pydynamo.explain(f)(torch.ones(2))
    assert report.graph_break_count >= 1
    assert any("computed in the graph" in r.reason for r in report.break_reasons)
    out, tag = _compiled(f)(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 4.0)) and tag == "a"


def test_grad_of_an_input_is_read_and_guarded():
    def f(p):
        return p * 2 if p.grad is None else p - p.grad

    cf = _compiled(f)
    p = torch.nn.Parameter(torch.ones(3))
    assert torch.equal(cf(p), f(p))
    (p * 3).sum().backward()
    assert torch.equal(cf(p), f(p)) and torch.equal(f(p), torch.full((3,), -2.0))
    p.grad = torch.full((3,), 0.5)
    assert torch.equal(cf(p), f(p))
    p.grad = None
    assert torch.equal(cf(p), f(p))
    report = pydynamo.explain(f)(p)
    assert report.graph_count == 1 and report.graph_break_count == 0


def test_size_methods():
    def f(x):
        s = x.shape
        return x.new_zeros(s + (2,)), s.numel(), s.index(4), s.count(3), s[1:] == torch.Size([4]), x.size(dim=-1)

    x = torch.randn(3, 4)
    assert pydynamo.explain(f)(x).graph_break_count == 0
    got, want = _compiled(f)(x), f(x)
    assert torch.equal(got[0], want[0]) and got[1:] == want[1:]


def test_computed_tensors_have_no_attributes():
    def f(x):
        y = x * 2
        z = x.contiguous()  # the input itself
        return y + (1 if hasattr(y, "jax") else 0) + getattr(z, "k", 0)

    x = torch.ones(2)
    x.k = 4
    report = pydynamo.explain(f)(x)
    assert (report.graph_count, report.graph_break_count) == (1, 0)
    assert torch.equal(_compiled(f)(x), f(x))
