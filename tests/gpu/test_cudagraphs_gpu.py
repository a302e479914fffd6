"""CUDA graphs on the GPU: the triton backend's mode="reduce-overhead" and the backend
"cudagraphs" record real CUDA graphs, replay them with new inputs and in-place changed
parameters, keep outputs that are held intact, and train as eager does."""
import pytest
import torch
import torch.nn.functional as F

import pydynamo
from pydynamo.backends import cudagraphs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(autouse=True)
def _fresh():
    """No runner of an earlier test left to count (reset drops them; collect frees them)."""
    import gc
    pydynamo.reset()
    gc.collect()
    yield


class Block(torch.nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.norm = torch.nn.LayerNorm(64)
        self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)
        self.p = p

    def forward(self, x):
        h = F.dropout(F.gelu(self.up(self.norm(x))), self.p, self.training)
        return x + self.down(h)


def compiled(model, backend):
    if backend == "triton":
        return pydynamo.compile(model, backend="triton", mode="reduce-overhead")
    return pydynamo.compile(model, backend=backend)


def recorded():
    rs = [r for r in cudagraphs._RUNNERS if r.calls]
    return [r for r in rs if r.recordings], [r.off for r in rs if r.off]


@pytest.mark.parametrize("backend", ["triton", "cudagraphs"])
def test_inference_replays_with_new_inputs_and_keeps_held_outputs(backend):
    pydynamo.reset()
    torch.manual_seed(0)
    model = Block().cuda().eval()
    fn = compiled(model, backend)
    xs = [torch.randn(8, 64, device="cuda") for _ in range(6)]
    with torch.no_grad():
        held = [fn(x) for x in xs]
        for x, out in zip(xs, held):
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
        model.down.weight.mul_(2.0)  # a parameter changed in place: the replay reads it
        x = torch.randn(8, 64, device="cuda")
        torch.testing.assert_close(fn(x), model(x), rtol=1e-4, atol=1e-4)
    graphs, off = recorded()
    assert graphs and not off
    pydynamo.reset()


@pytest.mark.parametrize("backend", ["triton", "cudagraphs"])
def test_training_matches_eager(backend):
    pydynamo.reset()
    torch.manual_seed(0)
    ref = torch.nn.Sequential(Block(), Block()).cuda()
    model = torch.nn.Sequential(Block(), Block()).cuda()
    model.load_state_dict(ref.state_dict())
    fn = compiled(model, backend)
    xs = [torch.randn(16, 64, device="cuda") for _ in range(6)]

    def train(m, params):
        opt = torch.optim.SGD(params, lr=0.05)
        losses = []
        for x in xs:
            loss = m(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        return torch.stack(losses)
    torch.testing.assert_close(train(fn, model.parameters()), train(ref, ref.parameters()),
                               rtol=1e-4, atol=1e-4)
    for p, q in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-4)
    graphs, off = recorded()
    assert any("backward" in r.name for r in graphs) and any("forward" in r.name for r in graphs)
    assert not off
    assert all(r.replays == r.calls - 1 for r in graphs)  # every call after the warm-up replayed
    pydynamo.reset()


def test_dropout_draws_new_masks_at_each_replay_and_follows_the_seed():
    pydynamo.reset()
    torch.manual_seed(0)
    model = Block(p=0.5).cuda().train()
    fn = compiled(model, "triton")
    x = torch.randn(8, 64, device="cuda")
    fn(x), fn(x)  # the warm-up, then the recording: every call below replays

    def outputs():
        torch.manual_seed(123)
        return [fn(x).detach().clone() for _ in range(5)]
    first, second = outputs(), outputs()
    graphs, off = recorded()
    assert graphs and not off
    for a, b in zip(first, second):
        assert torch.equal(a, b)  # the same seed, the same masks
    assert not torch.equal(first[3], first[4])  # two replays, two masks
    pydynamo.reset()
