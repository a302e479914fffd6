"""Python attributes stored on tensors (``x.tag = ...``): read, tested and written in traced code,
guarded present or absent, writes replayed after the graph (on inputs, and on computed tensors the
graph returns); ``Tensor.data`` read and assigned in the graph."""
import operator

import pytest
import torch

import pydynamo
from pydynamo.backends import lookup_backend
from pydynamo.testing import CompileCounter


def _compiled(fn, backend="eager"):
    pydynamo.reset()
    return pydynamo.optimize(backend)(fn)


class _Counting:
    """A named backend that also keeps the graphs it compiles."""

    def __init__(self, name):
        self.backend, self.graphs = lookup_backend(name), []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return self.backend(gm, example_inputs)


def _counts(fn, *args):
    """(ours, torch.compile's) (graph count, graph break count) of fn(*args); each call gets
    its own copy of the tensor arguments (the programs change them)."""
    import torch._dynamo

    def fresh():
        return [type(a)(a.detach().clone()) if type(a) is torch.nn.Parameter else
                a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                for a in args]
    pydynamo.reset()
    ours = pydynamo.explain(fn)(*fresh())
    torch._dynamo.reset()
    try:
        theirs = torch._dynamo.explain(fn)(*fresh())
    finally:
        torch._dynamo.reset()
    return (ours.graph_count, ours.graph_break_count), (theirs.graph_count, theirs.graph_break_count)


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


def test_attribute_of_a_computed_tensor_is_read_in_the_trace():
    def f(x):
        y = x + 1
        y.tag = "a"
        y.tag = y.tag + "b"
        return y * 2, y.tag, hasattr(y, "tag"), getattr(y, "other", 7), hasattr(y, "other")

    ours, theirs = _counts(f, torch.ones(2))
    assert ours == (1, 0) and theirs[0] == 1
    out, *rest = _compiled(f)(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 4.0)) and rest == ["ab", True, 7, False]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_attribute_of_a_returned_computed_tensor_is_set_after_the_graph(backend):
    kept = []

    def f(x):
        y = x * 2
        y.tag = 5
        y.scale = x + 1             # a tensor value: an output of the graph as well
        z = y.add_(1)               # the same tensor: the same attributes
        z.more = [1, 2]
        w = x * 3                   # dead at the end: its attribute is never seen
        w.tag = 6
        kept.append(y)              # escapes through a list of the caller's
        return y + y.tag + w.tag, z, y.view(-1)

    counter = _Counting(backend)
    cf = _compiled(f, counter)
    x = torch.randn(3)
    out, z, view = cf(x)
    ref_out, ref_z, _ = f(x)
    assert torch.equal(out, ref_out) and torch.equal(z, ref_z)
    assert (z.tag, z.more) == (5, [1, 2]) and torch.equal(z.scale, x + 1)
    assert kept[0] is z and not hasattr(view, "tag")
    assert len(counter.graphs) == 1
    graph_outputs = next(n for n in counter.graphs[0].graph.nodes if n.op == "output").args[0]
    assert not any(n.target is operator.mul and n.args[1] == 3 for n in graph_outputs)  # not w


def test_attribute_of_a_computed_tensor_alive_at_a_break():
    def f(x):
        y = x * 2
        y.tag = 3
        print("break")
        return y + y.tag, y

    report = pydynamo.explain(f)(torch.ones(2))
    assert report.graph_break_count == 1 and "print" in report.break_reasons[0].reason
    out, y = _compiled(f)(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 5.0)) and y.tag == 3


def test_missing_attribute_of_a_computed_tensor_raises_as_eager():
    def f(x):
        y = x * 2
        try:
            return y.tag
        except AttributeError:
            y.tag = 1
            return y + y.tag

    assert torch.equal(_compiled(f)(torch.ones(2)), torch.full((2,), 3.0))
    assert pydynamo.explain(f)(torch.ones(2)).graph_break_count == 0


# ---- Tensor.data --------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_data_read_is_a_detached_alias(backend):
    def f(x):
        y = x.data
        y.add_(1)
        z = (x * 2).data
        return y, y.requires_grad, y.is_leaf, type(y), x * 2, z.requires_grad

    x = torch.randn(3, requires_grad=True)
    ref_x = x.detach().clone().requires_grad_()
    ref = f(ref_x)
    got = _compiled(f, backend)(x)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[4], ref[4]) and torch.equal(x, ref_x)
    assert got[1:4] == (False, True, torch.Tensor) and got[5] is False
    assert got[4].requires_grad and got[4].grad_fn is not None
    got[0].mul_(3)  # the returned alias is x's memory
    ref[0].mul_(3)
    assert torch.equal(x, ref_x)
    if backend == "eager":  # the alias has its own version counter, as in eager
        assert x._version == ref_x._version == 0
    assert _counts(f, torch.randn(3, requires_grad=True))[0] == (1, 0)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_data_assignment_to_a_parameter(backend):
    def f(x, p):
        p.data = x * 3
        return p, p + 1

    counter = _Counting(backend)
    cf = _compiled(f, counter)
    for _ in range(2):
        x, p = torch.randn(3, requires_grad=True), torch.nn.Parameter(torch.randn(3))
        ref_x, ref_p = x.detach().clone().requires_grad_(), torch.nn.Parameter(p.detach().clone())
        same_p, out = cf(x, p)
        _, ref_out = f(ref_x, ref_p)
        assert same_p is p and type(p) is torch.nn.Parameter and p.requires_grad and p.is_leaf
        assert torch.equal(p, ref_p) and torch.equal(out, ref_out)
        out.sum().backward()
        ref_out.sum().backward()
        assert torch.equal(p.grad, ref_p.grad) and x.grad is None and ref_x.grad is None
        if backend == "eager":  # eager's setter leaves the version counter
            assert p._version == ref_p._version == 0
    assert len(counter.graphs) == 1
    ours, theirs = _counts(f, torch.randn(3), torch.nn.Parameter(torch.randn(3)))
    assert ours == (1, 0) and theirs[0] == 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_data_assignment_in_a_training_loop(backend):
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.linspace(-1, 1, 4))

        def forward(self, x):
            if self.w.grad is not None:
                self.w.data = self.w.data - 0.1 * self.w.grad
            return (self.w * x).sin().sum()

    torch.manual_seed(0)
    ref, model = Model(), Model()
    cm = _compiled(model, backend)
    for _ in range(3):
        x = torch.randn(4)
        loss, ref_loss = cm(x), ref(x)
        loss.backward()
        ref_loss.backward()
        assert torch.equal(loss, ref_loss) and torch.equal(model.w, ref.w)
        assert torch.equal(model.w.grad, ref.w.grad)
    model = Model()
    model.w.grad = torch.ones(4)
    ours, theirs = _counts(model, torch.randn(4))
    assert ours == (1, 0) and theirs[0] == 1


def test_data_assignment_is_seen_by_guards_on_the_next_call():
    def f(x, p):
        p.data = torch.cat([p.data, x])
        return p * 2, p.shape[0]

    counter = CompileCounter()
    cf = _compiled(f, counter)
    p, ref_p = torch.zeros(1), torch.zeros(1)
    for i in range(3):  # p grows at each call: its guard fails, never a wrong hit
        x = torch.full((2,), float(i))
        got, want = cf(x, p), f(x, ref_p)
        assert torch.equal(got[0], want[0]) and got[1] == want[1] and torch.equal(p, ref_p)
    assert counter.frame_count >= 2
    p.data, ref_p.data = p.data.double(), ref_p.data.double()  # another dtype: another entry
    x = torch.ones(2, dtype=torch.double)
    got, want = cf(x, p), f(x, ref_p)
    assert got[0].dtype == torch.double and torch.equal(got[0], want[0])


def test_data_assignment_of_a_parameter_also_passed_as_an_argument():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

    def f(m, q):
        m.w.data = m.w.data * 2
        return q * 1

    cf = _compiled(f)
    m, ref = Model(), Model()
    assert torch.equal(cf(m, torch.zeros(3)), f(ref, torch.zeros(3)))
    assert torch.equal(cf(m, m.w), f(ref, ref.w))  # q is m.w now: not the entry traced for another q
    assert torch.equal(m.w, ref.w)
    # one object by two paths is one graph input (one tracker): the new data is seen by both
    both, ref = Model(), Model()
    assert pydynamo.explain(f)(Model(), Model().w).graph_break_count == 0
    out, expected = cf(both, both.w), f(ref, ref.w)
    assert torch.equal(out, expected) and torch.equal(both.w, ref.w)
    out.sum().backward()
    expected.sum().backward()
    assert torch.equal(both.w.grad, ref.w.grad)


def test_data_assignment_keeps_autograd_metadata():
    def f(x, p):
        p.data = x[1:]
        return p.is_leaf, p.requires_grad, p.storage_offset(), p * 1

    base = torch.randn(3, requires_grad=True)
    p, ref_p = base * 2, base * 2  # not leaves: they keep their grad_fn
    x = torch.arange(4.0)
    got, want = _compiled(f)(x, p), f(x, ref_p)
    assert got[:3] == want[:3] == (False, True, 1) and torch.equal(got[3], want[3])
    assert type(p.grad_fn) is type(ref_p.grad_fn) and torch.equal(p, x[1:])
    assert pydynamo.explain(f)(x, base * 2).graph_break_count == 0


@pytest.mark.parametrize("program, reason", [
    ("used", "after the graph used it"),
    ("changed", "after the graph changed it in place"),
    ("dtype", "another dtype"),
    ("sizes", "other sizes"),
    ("computed", "computed in the graph"),
])
def test_data_assignment_refused_where_backends_differ(program, reason):
    def f(x, p):
        if program == "used":
            y = (p.sin() * x).sum()     # may save p: eager's backward then reads the new data
        else:
            y = x.sum()
        if program == "changed":
            p.data.mul_(2)              # AOTAutograd drops a change made before set_()
        if program == "computed":
            q = p * 1
            q.data = x
        elif program == "dtype":
            p.data = x.double()
        elif program == "sizes":
            p.data = torch.cat([x, x])
        else:
            p.data = x * 3
        return y, p * 2

    def run(fn):
        torch.manual_seed(0)
        x, p = torch.randn(3, requires_grad=True), torch.nn.Parameter(torch.randn(3))
        y, out = fn(x, p)
        (y + out.sum()).backward()
        return y, out, p.detach().clone(), p.grad, x.grad

    report = pydynamo.explain(f)(torch.randn(3, requires_grad=True), torch.nn.Parameter(torch.randn(3)))
    assert any(reason in r.reason for r in report.break_reasons), report.break_reasons
    # (with "sizes", AOTAutograd fails on p's gradient even after the break: the graph before it
    # takes p as an input it does not use, which gives p a grad accumulator of its old size)
    for backend in ("eager",) if program == "sizes" else ("eager", "aot_eager"):
        got, want = run(_compiled(f, backend)), run(f)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), backend


def test_data_assignment_then_changed_in_place_runs_eagerly():
    def f(x, p):
        p.data = x + 1
        p.data.add_(1)                  # AOTAutograd cannot compile set_() with a later change
        return p * 2

    report = pydynamo.explain(f)(torch.randn(3), torch.randn(3))
    assert report.graph_count == 0 and "changed in place" in report.break_reasons[0].reason
    x, p = torch.randn(3), torch.randn(3)
    ref_p = p.clone()
    assert torch.equal(_compiled(f, "aot_eager")(x, p), f(x, ref_p)) and torch.equal(p, ref_p)


def test_parameter_made_in_the_trace_breaks_with_a_reason():
    def f(x):
        return torch.nn.Parameter(x * 2)

    report = pydynamo.explain(f)(torch.ones(2))
    assert report.graph_break_count == 1 and "_make_subclass" in report.break_reasons[0].reason
    out = _compiled(f)(torch.ones(2))
    assert type(out) is torch.nn.Parameter and out.requires_grad and torch.equal(out, torch.full((2,), 2.0))


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
