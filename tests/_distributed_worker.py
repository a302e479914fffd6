"""One rank of tests/test_distributed.py: ``python _distributed_worker.py RANK WORLD STORE OUT``.

Runs every scenario (DDP with both wrappings, its comm hooks and no_sync, FSDP2, collectives in
user code) under eager torch.distributed, pydynamo and torch.compile on the Gloo backend, and
writes what the test compares (losses, gradients, parameters, graph counts) to OUT as a pickle.
"""
import os
import pickle
import sys
import traceback

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.nn.parallel import DistributedDataParallel as DDP

import pydynamo

STEPS = 3
BUCKET_CAP_MB = 1  # four of the Linear(256, 256) layers below per bucket (torch.compile's
# DDPOptimizer wants at least DDP's first bucket, 1 MiB)


class Stack(torch.nn.Module):
    def __init__(self, n=10, width=256):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(width, width) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


class Block(torch.nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.a = torch.nn.Linear(width, width)
        self.b = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + self.b(torch.relu(self.a(x)))


class Net(torch.nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.inp = torch.nn.Linear(16, 32)
        self.layers = torch.nn.ModuleList([Block() for _ in range(n)])
        self.out = torch.nn.Linear(32, 4)

    def forward(self, x):
        x = self.inp(x)
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


class Counter:
    """A backend that counts the graphs it is given and runs them with ``inner``."""

    def __init__(self, inner=None):
        self.graphs, self.inner = 0, inner

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        if self.inner is None:
            return gm.forward
        return self.inner(gm, example_inputs)


def pyd_aot_eager(counter=None):
    return Counter(pydynamo.lookup_backend("aot_eager"))


def inputs(rank, step, shape):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(*shape, generator=g)


def train(model, rank, shape, steps=STEPS, before_step=None):
    """Steps of SGD; what each step gives: loss, gradients and parameters after the step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    out = []
    for step in range(steps):
        if before_step is not None:
            before_step(model, step)
        loss = model(inputs(rank, step, shape)).pow(2).mean()
        loss.backward()
        grads = [_full(p.grad).clone() for p in model.parameters()]
        opt.step()
        opt.zero_grad()
        out.append((loss.item(), grads, [_full(p.detach()).clone() for p in model.parameters()]))
    return out


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def stack(seed=0):
    torch.manual_seed(seed)
    return Stack()


# ---- DDP ---------------------------------------------------------------------------------------

def ddp_scenarios(rank, res):
    shape = (8, 256)
    res["ddp_eager"] = train(DDP(stack(), bucket_cap_mb=BUCKET_CAP_MB), rank, shape)

    c = pyd_aot_eager()
    res["ddp_outer"] = train(pydynamo.optimize(c)(DDP(stack(), bucket_cap_mb=BUCKET_CAP_MB)), rank, shape)
    res["ddp_outer_graphs"] = c.graphs
    pydynamo.reset()

    c = pyd_aot_eager()
    res["ddp_inner"] = train(DDP(pydynamo.compile(stack(), backend=c), bucket_cap_mb=BUCKET_CAP_MB), rank, shape)
    res["ddp_inner_graphs"] = c.graphs
    pydynamo.reset()

    with pydynamo.config.patch(optimize_ddp=False):
        c = pyd_aot_eager()
        res["ddp_nosplit"] = train(pydynamo.optimize(c)(DDP(stack(), bucket_cap_mb=BUCKET_CAP_MB)), rank, shape)
        res["ddp_nosplit_graphs"] = c.graphs
    pydynamo.reset()

    # graph counts of torch.compile on the same programs
    for name, wrap in (("outer", lambda m, c: torch.compile(DDP(m, bucket_cap_mb=BUCKET_CAP_MB), backend=c)),
                       ("inner", lambda m, c: DDP(torch.compile(m, backend=c), bucket_cap_mb=BUCKET_CAP_MB))):
        c = Counter()
        train(wrap(stack(), c), rank, shape, steps=1)
        res[f"ddp_{name}_torch_graphs"] = c.graphs
        torch._dynamo.reset()

    # a communication hook (scales the averaged gradients) and no_sync (a step accumulates
    # local gradients, the next one all-reduces): eager and compiled
    def hook(state, bucket):
        t = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 0.5)

    def hooked_model(compile_fn):
        m = DDP(stack(), bucket_cap_mb=BUCKET_CAP_MB)
        m.register_comm_hook(None, hook)
        return compile_fn(m)

    def no_sync_steps(model, rank_):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        with model.no_sync() if hasattr(model, "no_sync") else model._orig_mod.no_sync():
            model(inputs(rank_, 0, shape)).pow(2).mean().backward()
        local = [p.grad.clone() for p in model.parameters()]
        model(inputs(rank_, 1, shape)).pow(2).mean().backward()
        opt.step()
        return local, [p.grad.clone() for p in model.parameters()], [p.detach().clone() for p in model.parameters()]

    res["hook_eager"] = train(hooked_model(lambda m: m), rank, shape)
    res["hook_pyd"] = train(hooked_model(lambda m: pydynamo.optimize(pyd_aot_eager())(m)), rank, shape)
    pydynamo.reset()
    res["nosync_eager"] = no_sync_steps(DDP(stack(), bucket_cap_mb=BUCKET_CAP_MB), rank)
    res["nosync_pyd"] = no_sync_steps(pydynamo.optimize(pyd_aot_eager())(DDP(stack(), bucket_cap_mb=BUCKET_CAP_MB)), rank)
    pydynamo.reset()


# ---- FSDP2 -------------------------------------------------------------------------------------

def fsdp_model(compile_fn, per_block):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    m = Net()
    for i, block in enumerate(m.layers):
        if per_block:
            m.layers[i] = block = compile_fn(block)
        fully_shard(block)
    fully_shard(m)
    return m if per_block else compile_fn(m)


def fsdp_scenarios(rank, res):
    shape = (4, 16)
    res["fsdp_eager"] = train(fsdp_model(lambda m: m, False), rank, shape)
    for layout, per_block in (("model", False), ("blocks", True)):
        c = pyd_aot_eager()
        res[f"fsdp_{layout}_pyd"] = train(fsdp_model(pydynamo.optimize(c), per_block), rank, shape)
        res[f"fsdp_{layout}_pyd_graphs"] = c.graphs
        pydynamo.reset()
        c = Counter()
        train(fsdp_model(lambda m: torch.compile(m, backend=c), per_block), rank, shape, steps=1)
        res[f"fsdp_{layout}_torch_graphs"] = c.graphs
        torch._dynamo.reset()


# ---- collectives in user code ------------------------------------------------------------------

def c_all_reduce(x):
    y = x * 2
    dist.all_reduce(y)
    return y + 1


def c_all_reduce_max_group(x):
    y = x.sin()
    dist.all_reduce(y, op=dist.ReduceOp.MAX, group=dist.group.WORLD)
    return y * dist.get_world_size() + dist.get_rank()


def c_all_reduce_input(x):
    dist.all_reduce(x)  # the caller's tensor is written
    return x * 2


def c_funcol(x):
    y = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)
    g = funcol.all_gather_single(y + 1, 0, dist.group.WORLD)
    return funcol.reduce_scatter_single(g * 3, "sum", 0, dist.group.WORLD) - y


def c_gather_scatter(x):
    world = dist.get_world_size()
    out = torch.empty(x.shape[0] * world, *x.shape[1:])
    dist.all_gather_into_tensor(out, x + 1)
    back = torch.empty_like(x)
    dist.reduce_scatter_tensor(back, out * 2)
    return out.sum(0), back


def c_async(x):
    y = x * 2
    dist.all_reduce(y, async_op=True).wait()
    return y + 1


def c_requires_grad(w):
    y = w * 2
    dist.all_reduce(y)  # the c10d op is not differentiable: runs natively
    return y


def c_funcol_grad(w):
    return funcol.all_reduce(w * 2, "sum", dist.group.WORLD).sum()


COLLECTIVES = [c_all_reduce, c_all_reduce_max_group, c_all_reduce_input, c_funcol, c_gather_scatter,
               c_async, c_requires_grad]


def collective_scenarios(rank, res):
    for fn in COLLECTIVES:
        x = torch.arange(12.).reshape(4, 3) + rank
        if fn is c_requires_grad:
            x.requires_grad_()
        x_e, x_p = x.detach().clone().requires_grad_(x.requires_grad), x.detach().clone().requires_grad_(x.requires_grad)
        expected = fn(x_e)
        c = Counter(pydynamo.lookup_backend("aot_eager"))
        got = pydynamo.optimize(c)(fn)(x_p)
        res[f"coll_{fn.__name__}"] = (_detach(expected), _detach(got), x_e.detach(), x_p.detach(), c.graphs)
        pydynamo.reset()
        c = Counter()
        torch.compile(fn, backend=c)(x.detach().clone().requires_grad_(x.requires_grad))
        res[f"coll_{fn.__name__}_torch_graphs"] = c.graphs
        torch._dynamo.reset()
    # funcol is differentiable (its backward all-reduces the gradient): as eager
    grads = []
    for run in (lambda f: f, lambda f: pydynamo.optimize("aot_eager")(f)):
        w = (torch.arange(6.) + rank).requires_grad_()
        run(c_funcol_grad)(w).backward()
        grads.append(w.grad.clone())
    res["coll_funcol_grad"] = grads
    pydynamo.reset()


def _detach(v):
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, tuple):
        return tuple(_detach(x) for x in v)
    return v


def main():
    rank, world, store, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    res = {}
    try:
        for part in sys.argv[5].split(","):
            {"ddp": ddp_scenarios, "fsdp": fsdp_scenarios, "coll": collective_scenarios}[part](rank, res)
    except Exception:
        res["error"] = traceback.format_exc()
    finally:
        with open(out, "wb") as f:
            pickle.dump(res, f)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
