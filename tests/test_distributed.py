"""torch.distributed under pydynamo (issue 22): DDP with both wrappings, its bucket split, comm
hooks and no_sync; FSDP2; collectives in user code. Two Gloo processes on loopback
(tests/_distributed_worker.py) run each program eagerly, under pydynamo and under torch.compile;
the results are compared here. The split itself is also tested in this process, without
torch.distributed.
"""
import os
import pickle
import subprocess
import sys
import tempfile

import pytest
import torch

import pydynamo
from pydynamo.backends.distributed import bucket_nodes, split_for_ddp

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with Gloo is not available", allow_module_level=True)

WORKER = os.path.join(os.path.dirname(__file__), "_distributed_worker.py")
WORLD = 2
TIMEOUT_S = 150


def _run_workers(parts):
    """Run the worker on WORLD ranks; the list of their result dicts."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1",
                   PYDYNAMO_LOGS="")
        procs = [subprocess.Popen([sys.executable, WORKER, str(r), str(WORLD), os.path.join(d, "store"),
                                   os.path.join(d, f"out{r}.pkl"), parts],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for r in range(WORLD)]
        logs = []
        try:
            for p in procs:
                out, _ = p.communicate(timeout=TIMEOUT_S)
                logs.append(out.decode(errors="replace"))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
        results = []
        for r, p in enumerate(procs):
            path = os.path.join(d, f"out{r}.pkl")
            assert p.returncode == 0 and os.path.exists(path), f"rank {r} failed:\n{logs[r][-4000:]}"
            with open(path, "rb") as f:
                res = pickle.load(f)
            assert "error" not in res, f"rank {r}:\n{res['error']}"
            results.append(res)
        return results


@pytest.fixture(scope="module")
def ranks():
    return _run_workers("ddp,fsdp,coll")


def _same_steps(a, b, exact=False):
    """Two lists of (loss, grads, params) per step agree."""
    assert len(a) == len(b)
    for (la, ga, pa), (lb, gb, pb) in zip(a, b):
        if exact:
            assert la == lb
        else:
            assert la == pytest.approx(lb, rel=1e-5, abs=1e-6)
        for x, y in zip(ga + pa, gb + pb):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


# ---- DDP ---------------------------------------------------------------------------------------

def test_ddp_optimize_wrapping_ddp_matches_eager_ddp(ranks):
    for res in ranks:
        _same_steps(res["ddp_eager"], res["ddp_outer"])


def test_ddp_wrapping_compiled_module_matches_eager_ddp(ranks):
    for res in ranks:
        _same_steps(res["ddp_eager"], res["ddp_inner"])


def test_ddp_ranks_agree_after_all_reduce(ranks):
    for key in ("ddp_outer", "ddp_inner"):
        for (_, g0, p0), (_, g1, p1) in zip(ranks[0][key], ranks[1][key]):
            for x, y in zip(g0 + p0, g1 + p1):
                torch.testing.assert_close(x, y)


def test_ddp_graph_split_at_buckets_as_torch_compile(ranks):
    for res in ranks:
        # 10 layers of 263168 bytes, 1 MiB buckets: 4 + 4 + 2 layers
        assert res["ddp_outer_graphs"] == res["ddp_outer_torch_graphs"] == 3
        assert res["ddp_inner_graphs"] == res["ddp_inner_torch_graphs"] == 3


def test_ddp_split_switched_off_gives_one_graph(ranks):
    for res in ranks:
        assert res["ddp_nosplit_graphs"] == 1
        _same_steps(res["ddp_eager"], res["ddp_nosplit"])


def test_ddp_comm_hook_runs_under_pydynamo(ranks):
    for res in ranks:
        _same_steps(res["hook_eager"], res["hook_pyd"])
        # the hook halves the averaged gradient: not what plain DDP gives
        assert not torch.allclose(res["hook_eager"][0][1][0], res["ddp_eager"][0][1][0])


def test_ddp_no_sync_under_pydynamo(ranks):
    for res in ranks:
        for x, y in zip([t for part in res["nosync_eager"] for t in part],
                        [t for part in res["nosync_pyd"] for t in part]):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
    # inside no_sync the gradients stay local: they differ between ranks
    assert not torch.allclose(ranks[0]["nosync_pyd"][0][0], ranks[1]["nosync_pyd"][0][0])


# ---- FSDP2 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["model", "blocks"])
def test_fsdp2_training_matches_eager(ranks, layout):
    for res in ranks:
        _same_steps(res["fsdp_eager"], res[f"fsdp_{layout}_pyd"])


def test_fsdp2_blocks_share_one_graph(ranks):
    for res in ranks:
        # Compiled whole: the graph before the blocks, the blocks' forward (its FSDP hooks run
        # natively around it, as under torch.compile), the graph after them. The blocks share one
        # graph: modules are guarded by class, not identity. torch.compile runs the model's own
        # frame eagerly (a break inside its loop) and shares one graph between the blocks too.
        assert res["fsdp_model_pyd_graphs"] == 2 + 1
        assert res["fsdp_model_torch_graphs"] == 1
        # compiled block by block (torchtitan's way): one graph for all blocks, as torch.compile
        assert res["fsdp_blocks_pyd_graphs"] == res["fsdp_blocks_torch_graphs"] == 1


# ---- collectives in user code ------------------------------------------------------------------

CAPTURED = ["c_all_reduce", "c_all_reduce_max_group", "c_all_reduce_input", "c_funcol", "c_gather_scatter"]


@pytest.mark.parametrize("name", CAPTURED + ["c_async", "c_requires_grad"])
def test_collectives_match_eager(ranks, name):
    for res in ranks:
        expected, got, x_eager, x_pyd, _ = res[f"coll_{name}"]
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        torch.testing.assert_close(x_pyd, x_eager, rtol=0, atol=0)  # what was written in place


@pytest.mark.parametrize("name", CAPTURED)
def test_collectives_captured_in_one_graph(ranks, name):
    for res in ranks:
        assert res[f"coll_{name}"][4] == 1
        assert res[f"coll_{name}_torch_graphs"] == 1


def test_collectives_refused_forms_break(ranks):
    for res in ranks:
        # async_op=True: the graph before it; the call, and the resume code that holds its Work
        # handle, run natively
        assert res["coll_c_async"][4] == 1
        assert res["coll_c_requires_grad"][4] == 1  # the graph before it; the call runs natively


def test_functional_collective_backward(ranks):
    for res in ranks:
        eager, compiled = res["coll_funcol_grad"]
        torch.testing.assert_close(compiled, eager, rtol=0, atol=0)


# ---- the split, in this process ----------------------------------------------------------------

class _Chain(torch.nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(n, n, bias=False) for n in sizes])

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x)) + x
        return x


def _capture(model, x):
    graphs = []

    def keep(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward
    pydynamo.optimize(keep)(model)(x)
    pydynamo.reset()
    return graphs[0]


@pytest.mark.parametrize("cap,first,expected", [
    (10**9, 10**9, 1),        # everything fits one bucket: no split
    (1024, 1024, 4),          # each 16x16 weight (1024 bytes) fills a bucket
    (2048, 1024, 3),          # the first bucket (last layer) is smaller: 1 + 2 + 1 layers
    (4096, 4096, 1),
])
def test_bucket_count_by_parameter_bytes(cap, first, expected):
    torch.manual_seed(0)
    gm, example = _capture(_Chain([16] * 4), torch.randn(2, 16))
    buckets = bucket_nodes(gm, example, cap, first)
    assert len(buckets) == expected
    assert sum(len(b.params) for b in buckets) == 4  # each parameter counted once


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_split_graph_computes_the_same(backend):
    torch.manual_seed(0)
    model = _Chain([16] * 4)
    x = torch.randn(2, 16, requires_grad=True)
    gm, example = _capture(model, x)
    calls = []

    def counting(g, ex):
        calls.append(g)
        return pydynamo.lookup_backend(backend)(g, ex)
    compiled = split_for_ddp(gm, example, counting, 1024, 1024)
    assert len(calls) == 4
    got = compiled(*example)
    expected = gm(*example)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    got[0].sum().backward()
    g1 = [t.grad.clone() for t in example]
    for t in example:
        t.grad = None
    expected[0].sum().backward()
    for a, t in zip(g1, example):
        torch.testing.assert_close(a, t.grad, rtol=1e-5, atol=1e-6)  # Inductor reorders sums


def test_no_split_outside_ddp():
    from pydynamo.backends.distributed import active_ddp_module
    assert active_ddp_module() is None
    calls = []

    def counting(g, ex):
        calls.append(g)
        return g.forward
    torch.manual_seed(0)
    pydynamo.optimize(counting)(_Chain([16] * 4))(torch.randn(2, 16))
    pydynamo.reset()
    assert len(calls) == 1


class _Regions(torch.nn.Module):
    """A no_grad block and an autocast block between parameterized layers: a piece must not end
    inside either (AOTAutograd would trace its end in the block's grad mode)."""

    def __init__(self):
        super().__init__()
        self.l = torch.nn.ModuleList([torch.nn.Linear(16, 16, bias=False) for _ in range(4)])

    def forward(self, x):
        x = self.l[0](x)
        with torch.no_grad():
            y = self.l[1](x) * 2
        x = x + y
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x = self.l[2](x)
        return self.l[3](x.float())


def test_split_respects_grad_mode_and_autocast_regions():
    torch.manual_seed(0)
    model = _Regions()
    x = torch.randn(2, 16)
    gm, example = _capture(model, x)
    split = split_for_ddp(gm, example, pydynamo.lookup_backend("aot_eager"), 1024, 1024)
    for name, piece in split.named_children():
        code = piece.compiled.__self__.code if hasattr(piece.compiled, "__self__") else ""
        assert code.count("_enter_autocast") == code.count("_exit_autocast"), name
    got = split(*example)[0]
    got.sum().backward()
    grads = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    for g, p in zip(grads, model.parameters()):
        assert (g is None) == (p.grad is None)
        if g is not None:
            torch.testing.assert_close(g, p.grad)


def test_cache_size_limit_with_blocks_compiled_one_by_one(monkeypatch):
    """A block class compiled once per block (FSDP2 per block): the blocks share their entries
    (modules are guarded by class); a recompile for one block (another dtype) is an entry that
    blocks of that dtype share. Past cache_size_limit for the code, a block that compiled
    nothing yet may still compile (the limit counts per instance), up to
    accumulated_cache_size_limit."""
    monkeypatch.setattr(pydynamo.config, "cache_size_limit", 2)
    monkeypatch.setattr(pydynamo.config, "accumulated_cache_size_limit", 5)
    graphs = []

    def counting(gm, ex):
        graphs.append(gm)
        return gm.forward
    torch.manual_seed(0)
    # a class of this file: a torch.nn class given to optimize() would stay requested for good
    blocks = [pydynamo.optimize(counting)(_Chain([4])) for _ in range(6)]
    x = torch.randn(2, 4)
    try:
        for b in blocks[:4]:
            torch.testing.assert_close(b(x), b._orig_mod(x))
        assert len(graphs) == 1  # one entry serves every block
        blocks[0].to(torch.float64)
        blocks[1].to(torch.float64)
        for b in blocks[:2]:
            torch.testing.assert_close(b(x.double()), b._orig_mod(x.double()))
        assert len(graphs) == 2  # float64: the second entry, shared by the float64 blocks
        blocks[2].to(torch.bfloat16)
        y = blocks[2](x.bfloat16())  # past cache_size_limit, but block 2's first compile
        torch.testing.assert_close(y, blocks[2]._orig_mod(x.bfloat16()))
        assert len(graphs) == 3
        blocks[0].to(torch.float16)  # block 0 compiled two entries: its limit
        torch.testing.assert_close(blocks[0](x.half()), blocks[0]._orig_mod(x.half()))
        assert len(graphs) == 3
        for b in blocks[3:]:
            torch.testing.assert_close(b(x), b._orig_mod(x))
        assert len(graphs) == 3
    finally:
        pydynamo.reset()


@pytest.mark.parametrize("backend,cap,pieces", [("aot_eager", 1024, 4), ("aot_eager", 10**9, 1),
                                                ("inductor", 1024, 4)])
def test_split_under_a_ddp_forward_with_symbolic_sizes(monkeypatch, backend, cap, pieces):
    """What a compile inside a DDP forward does (a stand-in for the active DDP module): pieces
    with symbolic batch sizes, compiled by AOTAutograd-based backends, train as eager does."""
    import types
    from pydynamo.backends import distributed as pd_dist
    monkeypatch.setattr(pd_dist, "active_ddp_module", lambda: types.SimpleNamespace(bucket_bytes_cap=cap))
    calls = []

    def counting(gm, ex):
        calls.append(gm)
        return pydynamo.lookup_backend(backend)(gm, ex)
    torch.manual_seed(0)
    model = _Chain([16] * 4)
    compiled = pydynamo.optimize(counting, dynamic=True)(model)
    try:
        for batch in (2, 3, 5):
            x = torch.randn(batch, 16)
            got = compiled(x)
            got.pow(2).sum().backward()
            grads = [p.grad.clone() for p in model.parameters()]
            model.zero_grad(set_to_none=True)
            expected = model(x)
            expected.pow(2).sum().backward()
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            for g, p in zip(grads, model.parameters()):
                torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-5)
            model.zero_grad(set_to_none=True)
        assert len(calls) == pieces  # one compile (sizes symbolic from the start), its pieces
    finally:
        pydynamo.reset()
