"""CUDA graphs (pydynamo/backends/cudagraphs.py): the bookkeeping around recordings, on the CPU.

A real CUDA graph needs a GPU (tests/gpu/test_cudagraphs_gpu.py); here a stand-in "recording"
replays by re-running the graph on the recording's static inputs and writing the results into
the memory of the recorded outputs, which is what a replay does. So every test below would see
a wrong value if pydynamo replayed over an output someone still holds, or read a stale input.
"""
import pytest
import torch

import pydynamo
from pydynamo.backends import cudagraphs
from pydynamo.backends.cudagraphs import CUDAGraphed


def replaying_capture(fn, inputs, device):
    outputs = fn(list(inputs))

    def replay():
        for o, n in zip(outputs, fn(list(inputs))):
            if isinstance(o, torch.Tensor):
                o.copy_(n)
    return replay, outputs


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(cudagraphs, "CAPTURE", replaying_capture)
    monkeypatch.setattr(cudagraphs, "DEVICE_TYPE", "cpu")


def boxed(f):
    calls = []

    def run(args):
        calls.append(1)
        a = list(args)
        args.clear()
        return f(*a)
    run.calls = calls
    return run


def linear():
    return boxed(lambda w, x: [x @ w + 1])


def test_replays_read_new_inputs_and_parameters_changed_in_place(on_cpu):
    w = torch.randn(3, 3)
    g = CUDAGraphed(linear(), static=[0])
    for i in range(5):
        x = torch.randn(2, 3)
        (out,) = g([w, x])
        assert torch.equal(out, x @ w + 1)
        del out
        w.add_(1.0)  # a parameter changed in place: read where it is
    assert len(g.recordings) == 1  # call 1 warms up, call 2 records, the rest replay it


def test_an_output_someone_holds_is_never_overwritten(on_cpu):
    w = torch.randn(3, 3)
    g = CUDAGraphed(linear(), static=[0])
    xs = [torch.randn(2, 3) for _ in range(6)]
    held = [g([w, x])[0] for x in xs]  # all held: each call must leave the others alone
    for x, out in zip(xs, held):
        assert torch.equal(out, x @ w + 1)
    assert len(g.recordings) == cudagraphs.MAX_RECORDINGS


def test_a_view_of_an_output_holds_it_too(on_cpu):
    w = torch.randn(3, 3)
    g = CUDAGraphed(linear(), static=[0])
    g([w, torch.randn(2, 3)])
    x = torch.randn(2, 3)
    row = g([w, x])[0][1]  # the output itself is dropped, a view of it kept
    for _ in range(4):
        g([w, torch.randn(2, 3)])
    assert torch.equal(row, (x @ w + 1)[1])


def test_the_usual_loop_alternates_two_recordings(on_cpu):
    w = torch.randn(3, 3)
    g = CUDAGraphed(linear(), static=[0])
    out = None
    for _ in range(8):
        x = torch.randn(2, 3)
        out = g([w, x])[0]  # the previous `out` is alive while the call runs
        assert torch.equal(out, x @ w + 1)
    assert len(g.recordings) == 2
    assert len(g.fn.calls) == 8 + 2  # every call ran the graph once, plus one run per recording


def test_a_moved_parameter_is_read_at_its_new_address(on_cpu):
    g = CUDAGraphed(linear(), static=[0])
    for _ in range(5):
        w, x = torch.randn(3, 3), torch.randn(2, 3)
        (out,) = g([w, x])
        assert torch.equal(out, x @ w + 1)


def test_threads_calling_one_graph_each_get_their_own_results(on_cpu):
    import threading
    w = torch.randn(3, 3)
    g = CUDAGraphed(linear(), static=[0])
    errors = []

    def work():
        for _ in range(50):
            x = torch.randn(2, 3)
            out = g([w, x])[0]
            if not torch.equal(out, x @ w + 1):
                errors.append(1)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and g.calls == 150


def test_an_input_handed_back_is_watched_like_an_output(on_cpu):
    """A forward returns its input to save it for the backward: the recording's static input
    buffer goes out, so the next call may not copy into it while it is held."""
    g = CUDAGraphed(boxed(lambda w, x: [x, x.sum() * w]), static=[0])
    w = torch.randn(1)
    xs = [torch.randn(4) for _ in range(5)]
    held = [g([w, x]) for x in xs]
    for x, (out, s) in zip(xs, held):
        assert torch.equal(out, x) and torch.equal(s, x.sum() * w)
    assert g.recordings and not g.off


def test_symbolic_sizes_get_recordings_of_their_own(on_cpu, monkeypatch):
    """A graph with a symbolic size takes it as an int input: one recording per value, up to
    MAX_SIZES values; calls with others run without graphs. All are right."""
    monkeypatch.setattr(cudagraphs, "MAX_SIZES", 3)
    g = CUDAGraphed(boxed(lambda w, x, n: [x @ w + n]), static=[0])
    w = torch.randn(3, 3)
    for n in [2, 3, 2, 3, 4, 5, 6, 2, 5]:
        x = torch.randn(n, 3)
        (out,) = g([w, x, n])
        assert out.shape == (n, 3) and torch.equal(out, x @ w + n)
        del out
    assert sorted(r.sizes for r in g.recordings) == [(2,), (3,), (4,)]


def test_other_inputs_and_other_devices_run_without_graphs(on_cpu, monkeypatch):
    g = CUDAGraphed(boxed(lambda x, s: [x * s]))
    for s in (0.5, 1.5, 2.5):
        assert torch.equal(g([torch.ones(2), s])[0], torch.full((2,), s))
    assert "float" in g.off and not g.recordings
    monkeypatch.setattr(cudagraphs, "DEVICE_TYPE", "cuda")
    g = CUDAGraphed(linear(), static=[0])
    w = torch.randn(3, 3)
    for _ in range(3):
        x = torch.randn(2, 3)
        assert torch.equal(g([w, x])[0], x @ w + 1)
    assert "cpu" in g.off and not g.recordings


def test_a_recording_that_fails_turns_graphs_off(on_cpu, monkeypatch):
    def failing(fn, inputs, device):
        raise RuntimeError("operation not permitted when stream is capturing")
    monkeypatch.setattr(cudagraphs, "CAPTURE", failing)
    g = CUDAGraphed(linear(), static=[0])
    w = torch.randn(3, 3)
    for _ in range(3):
        x = torch.randn(2, 3)
        assert torch.equal(g([w, x])[0], x @ w + 1)
    assert "not permitted" in g.off


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) * self.scale


@pytest.mark.parametrize("zero_to_none", [True, False])
def test_training_through_aot_autograd_matches_eager(on_cpu, zero_to_none):
    """The backend "cudagraphs" (AOTAutograd's graphs, each behind a CUDAGraphed): the backward
    reads the forward's saved tensors where its recording left them; gradients that autograd
    keeps in .grad hold their recording."""
    torch.manual_seed(0)
    earlier = set(cudagraphs._RUNNERS)
    ref = MLP()
    model = MLP()
    model.load_state_dict(ref.state_dict())
    xs = [torch.randn(5, 8) for _ in range(6)]
    pydynamo.reset()
    compiled = pydynamo.compile(model, backend="cudagraphs")

    def train(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = []
        for x in xs:
            loss = m(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=zero_to_none)
            losses.append(loss)
        return losses
    expected, got = train(ref), train(compiled)
    assert [a.item() for a in got] == pytest.approx([a.item() for a in expected], rel=1e-5)
    for p, q in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    runners = [r for r in cudagraphs._RUNNERS if r.recordings and r not in earlier]
    backward = [r for r in runners if "backward" in r.name]
    assert backward and any(r.recordings[0].fixed for r in backward)  # saved tensors read in place
    # every call after the warm-up replayed (none ran without graphs because a recording was held)
    assert runners and all(r.replays == r.calls - 1 for r in runners)
    pydynamo.reset()


def test_symbolic_batch_sizes_through_aot_autograd(on_cpu):
    """A model compiled with a dynamic batch: its graphs take the batch as an int; each batch
    size gets its recordings, and every call equals eager."""
    torch.manual_seed(0)
    earlier = set(cudagraphs._RUNNERS)
    model = MLP()
    compiled = pydynamo.compile(model, backend="cudagraphs", dynamic=True)
    with torch.no_grad():
        for b in [3, 5, 3, 5, 7, 3, 1, 2, 3]:  # (a batch of 1 would broadcast into a recording's)
            x = torch.randn(b, 8)
            torch.testing.assert_close(compiled(x), model(x))
    runners = [r for r in cudagraphs._RUNNERS if r not in earlier]
    graphed = [r for r in runners if r.recordings and r.dynamic]
    assert graphed and not [r.off for r in runners if r.off]
    # a recording's key: the graph's int inputs, then its tensors' (shape, stride)
    batches = {k[0][0] for g in graphed for r in g.recordings for k in r.sizes if isinstance(k, tuple)}
    assert batches >= {3, 5, 7}
    pydynamo.reset()


def test_modes_are_checked():
    f = lambda x: x + 1  # noqa: E731
    with pytest.raises(RuntimeError, match="triton backend's modes are 'default', 'reduce-overhead'"):
        pydynamo.compile(f, backend="triton", mode="max-autotune")
    with pytest.raises(RuntimeError, match="mode is for the inductor and triton backends"):
        pydynamo.compile(f, backend="cudagraphs", mode="reduce-overhead")
    with pytest.raises(RuntimeError, match="options are for the inductor backend"):
        pydynamo.compile(f, backend="triton", options={"x": 1})


def test_reduce_overhead_on_the_cpu_runs_without_graphs(monkeypatch):
    """Triton's interpreter on CPU tensors: the mode changes nothing but must not break."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pydynamo.reset()
    model = MLP()
    compiled = pydynamo.compile(model, backend="triton", mode="reduce-overhead")
    x = torch.randn(5, 8)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), model(x))
    pydynamo.reset()
