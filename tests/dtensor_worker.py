"""Run by tests/test_dtensor.py: a tensor-parallel block's training steps compiled by pydynamo on
N Gloo ranks (CPU), compared on each rank with the same steps run eagerly. Prints one JSON line
per rank: {"rank": r, "same": bool, "graphs": n, "breaks": n, "torch_graphs": n} (torch.compile's
graph count for the block on that rank).

    python tests/dtensor_worker.py WORLD_SIZE BACKEND
"""
import copy
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def _full(p):
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def run(rank, world, backend, init, queue):
    try:
        _run(rank, world, backend, init, queue)
    except BaseException as e:
        queue.put({"rank": rank, "error": f"{type(e).__name__}: {e}"})
        raise


def _run(rank, world, backend, init, queue):
    import pydynamo
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
    model = parallelize_module(Block(), mesh, plan)
    ref = parallelize_module(copy.deepcopy(Block()), mesh, plan)
    torch.manual_seed(0)
    ref.load_state_dict(model.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref)]
    step = pydynamo.optimize(backend)(model)
    same = True
    for i in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(i))
        for m, fn, opt in ((model, step, opts[0]), (ref, ref, opts[1])):
            opt.zero_grad()
            fn(x).pow(2).mean().backward()
            opt.step()
        same = same and all(torch.allclose(_full(p), _full(q), atol=1e-6)
                            for p, q in zip(model.parameters(), ref.parameters()))

    def redistribute(t):  # a DTensor input, resharded inside
        return (t.redistribute(mesh, [Replicate()]).to_local() * 2).sum()
    d = distribute_tensor(torch.arange(8.0).reshape(world * 2, -1), mesh, [Shard(0)])
    same = same and torch.equal(pydynamo.optimize(backend)(redistribute)(d), redistribute(d))
    explained = pydynamo.explain(model)(torch.randn(4, 8))
    from torch._dynamo import explain as torch_explain
    torch_graphs = torch_explain(model)(torch.randn(4, 8)).graph_count
    queue.put({"rank": rank, "same": bool(same), "graphs": explained.graph_count,
               "breaks": explained.graph_break_count, "torch_graphs": torch_graphs})
    dist.destroy_process_group()


def main():
    world, backend = int(sys.argv[1]), sys.argv[2]
    fd, path = tempfile.mkstemp()
    os.close(fd)
    os.unlink(path)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, world, backend, f"file://{path}", queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=int(os.environ.get("DTENSOR_WORKER_TIMEOUT", "240"))) for _ in procs]
    for p in procs:
        p.join(60)
    if os.path.exists(path):
        os.unlink(path)
    for r in sorted(results, key=lambda r: r["rank"]):
        print(json.dumps(r))
    sys.exit(max(p.exitcode or 0 for p in procs))


if __name__ == "__main__":
    main()
