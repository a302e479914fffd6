"""A graph's writes into its own inputs (AOTAutograd keeps an input's mutation in the graph, as a
``copy_`` at its end): a batch norm's running statistics and counter in training, a buffer a
function updates in place. The kernel computing the new value stores it into the input where
nothing after it reads the input; otherwise the new value is copied over at the end of the call.
Either way the caller's tensors end as eager leaves them. Through Triton's CPU interpreter."""
import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

pytest.importorskip("triton")

import pydynamo  # noqa: E402
from pydynamo.backends.triton import runtime  # noqa: E402

os.environ["PYDYNAMO_TRITON_STRICT"] = "1"


@pytest.fixture
def sources(monkeypatch, tmp_path):
    """The generated modules' sources, each graph compiled afresh (an empty cache)."""
    monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path / "cache"))
    seen, load = [], runtime.load_source

    def record(src, key):
        seen.append(src)
        return load(src, key)
    monkeypatch.setattr(runtime, "load_source", record)
    pydynamo.reset()
    yield seen
    pydynamo.reset()


def _calls(src):
    return src.split("def call(args):")[1]


def _conv_bn(channels_last=False):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1),
                      nn.BatchNorm2d(4))
    return m.to(memory_format=torch.channels_last) if channels_last else m


@pytest.mark.parametrize("channels_last", [False, True])
def test_batch_norm_running_statistics_stored_by_their_kernel(sources, channels_last):
    ref = _conv_bn(channels_last)
    model = copy.deepcopy(ref)
    compiled = pydynamo.optimize("triton")(model)
    x = torch.randn(4, 3, 10, 10)
    for step in range(3):
        want = ref(x + step)
        got = compiled(x + step)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        got.square().mean().backward()
        want.square().mean().backward()
    for (name, a), b in zip(ref.named_buffers(), model.buffers()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert int(model[1].num_batches_tracked) == 3
    for (name, a), b in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-4, msg=name)
    forward = _calls(sources[0])
    # the running means and variances and the counters: all stored straight into the buffers
    assert forward.count("the graph's copy_ into its input: stored there") == 6, forward
    assert ".copy_(" not in forward


def test_eval_mode_reads_the_running_statistics_and_writes_nothing(sources):
    model = _conv_bn().eval()
    before = [b.clone() for b in model.buffers()]
    x = torch.randn(2, 3, 10, 10)
    out = pydynamo.optimize("triton")(model)(x)
    torch.testing.assert_close(out, _conv_bn().eval()(x), rtol=1e-4, atol=1e-4)
    assert all(torch.equal(a, b) for a, b in zip(before, model.buffers()))
    assert "copy_ into its input" not in _calls(sources[0])


def _check(fn, *args):
    """fn compiled and eager, on copies of the same arguments: results and every argument's
    final value equal."""
    eager_args = [a.clone() for a in args]
    want = fn(*eager_args)
    got = pydynamo.optimize("triton", fullgraph=True)(fn)(*args)
    torch.testing.assert_close(got, want)
    for a, b in zip(args, eager_args):
        torch.testing.assert_close(a, b)


def test_in_place_update_of_an_input_in_inference(sources):
    def f(x, buf):
        buf.mul_(0.5).add_(x)
        return buf * 2
    with torch.no_grad():
        _check(f, torch.randn(6, 5), torch.randn(6, 5))
    assert "copy_ into its input: stored there" in _calls(sources[0])


def test_new_value_read_at_other_elements_is_copied_in_at_the_end(sources):
    """buf[i] = buf[n - 1 - i] + 1: the kernel reads elements other programs write, so it
    stores apart and the call copies the result in after it."""
    def f(buf):
        buf.copy_(buf.flip(0) + 1)
        return buf.sum()
    with torch.no_grad():
        _check(f, torch.randn(64))
    call = _calls(sources[0])
    assert ".copy_(" in call and "stored there" not in call


def test_old_value_read_after_the_new_one_is_computed(sources):
    """The old value feeds an output computed (and stored) in a kernel after the one computing
    the new value: storing the new value early would change that output."""
    def f(x, buf):
        old = buf.clone()
        buf.add_(x.sum())
        return (old.unsqueeze(1) * x).cumsum(1), buf
    with torch.no_grad():
        _check(f, torch.randn(8, 16), torch.randn(8))


def test_mutation_of_an_input_with_gaps(sources):
    """An input that is not dense (every other element of a larger tensor): its new value is
    stored densely and copied in, leaving the elements between untouched."""
    base = torch.randn(32)

    def f(x, buf):
        buf.add_(x)
        return buf + 1
    with torch.no_grad():
        eager_base = base.clone()
        want = f(torch.ones(16), eager_base[::2])
        got = pydynamo.optimize("triton", fullgraph=True)(f)(torch.ones(16), base[::2])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(base, eager_base)


def test_integer_counter_update(sources):
    def f(x, n):
        n.add_(1)
        return x * 2
    n = torch.tensor(5)
    with torch.no_grad():
        fn = pydynamo.optimize("triton", fullgraph=True)(f)
        for _ in range(3):
            fn(torch.randn(4), n)
    assert int(n) == 8
    assert "stored there" in _calls(sources[0])


def test_reduce_overhead_mode_leaves_mutations_outside_the_graph(sources):
    """Under CUDA graphs some inputs are replayed from copies: the graph must not write into
    them, so AOTAutograd applies the mutation after the call, as before."""
    from pydynamo.backends.triton import triton_backend
    ref = _conv_bn()
    model = copy.deepcopy(ref)
    backend = lambda gm, ex: triton_backend(gm, ex, mode="reduce-overhead")  # noqa: E731
    compiled = pydynamo.optimize(backend)(model)
    x = torch.randn(2, 3, 10, 10)
    compiled(x).sum().backward()
    ref(x).sum().backward()
    for a, b in zip(ref.buffers(), model.buffers()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert all("copy_ into its input" not in _calls(s) for s in sources)


def test_parameters_updated_under_no_grad(sources):
    """An optimizer's update: leaves that require grad, changed in place under no_grad. The
    kernels write the new values into the parameters themselves."""
    torch.manual_seed(0)
    params = [torch.randn(6, requires_grad=True), torch.randn(3, 2, requires_grad=True)]
    for t in params:
        t.grad = torch.randn_like(t)
    want = [(t - 0.1 * t.grad).detach() for t in params]

    def update(ps):
        with torch.no_grad():
            for t in ps:
                t.add_(t.grad, alpha=-0.1)
    pydynamo.optimize("triton", fullgraph=True)(update)(params)
    for t, w in zip(params, want):
        torch.testing.assert_close(t.detach(), w)
        assert t.requires_grad and t.is_leaf
    assert _calls(sources[0]).count("stored there") == 2


def test_two_copies_into_one_input_are_refused():
    """AOTAutograd writes one copy_ per mutated input; a hand-made graph with two is refused
    (the backend then runs the graph with ATen) rather than keeping only one."""
    from pydynamo.backends.triton import generate_source
    g = torch.fx.Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    a.meta["val"], b.meta["val"] = torch.randn(4), torch.randn(4)
    first = g.call_function(torch.ops.aten.copy_.default, (a, b))
    twice = g.call_function(torch.ops.aten.mul.Tensor, (b, 2))
    second = g.call_function(torch.ops.aten.copy_.default, (a, twice))
    first.meta["val"] = second.meta["val"] = a.meta["val"]
    twice.meta["val"] = b.meta["val"] * 2
    g.output((twice,))
    with pytest.raises(NotImplementedError, match="twice"):
        generate_source(torch.fx.GraphModule({}, g))
