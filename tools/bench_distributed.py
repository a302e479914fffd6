"""Distributed training under pydynamo beside torch.compile: DDP and FSDP2 step times and
communication overlap (issue 22).

    torchrun --nproc-per-node=2 tools/bench_distributed.py                 # GPUs, NCCL
    torchrun --nproc-per-node=2 tools/bench_distributed.py --device cpu --tiny   # CPUs, Gloo

Models (transformers, random weights from a config, nothing downloaded): ``gpt2`` (GPT-2 small,
124M) and ``llama1b`` (a LLaMA-3.2-1B-shaped model: 16 layers, hidden 2048, MLP 8192, 32 heads,
8 KV heads, vocabulary 32000: 1.1B parameters). ``--tiny`` shrinks both to 4 layers of width
256 (a few MB of parameters: several 1 MB DDP buckets; what the CPU run is for). Training is bf16 (parameters and gradients in bfloat16; ``--dtype
float32`` for fp32), AdamW, the loss computed by the model from labels.

Modes:
  ddp     DistributedDataParallel(model); compiled as ``compile(ddp_model)`` (both compilers
          split the graph at DDP's gradient buckets)
  fsdp2   ``fully_shard`` per transformer block, then on the whole model; each block compiled
          before it is sharded (torchtitan's way; FSDP's hooks run eagerly around each block)
  tp      tensor parallelism (llama1b): each block's projections parallelized with
          ``parallelize_module`` (ColwiseParallel / RowwiseParallel: DTensor parameters), the whole
          model compiled (issue 41); on one rank it measures DTensor's cost under each compiler

For each (model, mode): a pydynamo+inductor copy and a torch.compile(inductor) copy of the same
model (same initial weights, same batches), compiled by warm-up steps, then ``--rounds`` rounds
that alternate between them, ``--steps`` timed steps each. Printed (rank 0), per compiler: the
median step time (each step's time is the slowest rank's), the ratio pydynamo / torch.compile
(issue 22's target: at most 1.02), the first-step loss of each, the number of graphs compiled,
and the overlap: over ``--profile-steps`` profiled steps of every rank, the share of the
reducing collectives' time (DDP's all-reduce, FSDP's reduce-scatter) during which compute ran
(on GPUs: NCCL kernels against the other kernels, annotated ranges left out; on CPUs: Gloo's
work against the training thread's ATen ops, rough).
``--markdown`` prints the table for docs/performance.md.
"""
import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pydynamo  # noqa: E402


# ---- models ------------------------------------------------------------------------------------

def make_config(name, tiny):
    import transformers as tr
    if name == "gpt2":
        if tiny:
            return tr.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=1000, n_positions=128)
        return tr.GPT2Config()  # GPT-2 small: 12 layers, 768 wide, 124M parameters
    if name == "llama1b":
        if tiny:
            return tr.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        return tr.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                              num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=2048,
                              tie_word_embeddings=False)
    raise SystemExit(f"unknown model {name!r} (gpt2, llama1b)")


def make_model(name, tiny, device, dtype):
    import transformers as tr
    config = make_config(name, tiny)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    cls = tr.GPT2LMHeadModel if name == "gpt2" else tr.LlamaForCausalLM
    model = cls(config).to(device=device, dtype=dtype)
    model.config.use_cache = False
    return model


def blocks(model):
    """The transformer blocks' container (FSDP2 shards each block)."""
    return model.transformer.h if hasattr(model, "transformer") else model.model.layers


# ---- one training setup per compiler -----------------------------------------------------------

class Counter:
    def __init__(self, backend):
        self.backend, self.graphs = backend, 0

    def __call__(self, gm, example_inputs, **kwargs):
        self.graphs += 1
        return self.backend(gm, example_inputs, **kwargs)


def build(args, compiler, device):
    """(model, counter) for compiler 'pydynamo' or 'torch', set up for args.mode."""
    dtype = torch.bfloat16 if args.dtype == "bfloat16" else torch.float32
    model = make_model(args.model, args.tiny, device, dtype)
    counter = None
    if compiler == "pydynamo":
        counter = Counter(pydynamo.lookup_backend("inductor"))

        def compile_fn(m):
            return pydynamo.compile(m, backend=counter)
    else:
        def compile_fn(m):
            return torch.compile(m)  # backend "inductor": its graphs counted by torch's counters
    if args.mode == "tp":  # tensor parallelism: DTensor parameters, the whole model compiled
        from torch.distributed.tensor import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        plan = _tp_plan(args.model)
        for layer in blocks(model):
            parallelize_module(layer, mesh, plan(ColwiseParallel, RowwiseParallel))
        model = compile_fn(model)
    elif args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        ids = [device.index] if device.type == "cuda" else None
        model = compile_fn(DDP(model, device_ids=ids, bucket_cap_mb=args.bucket_cap_mb))
    else:
        from torch.distributed.fsdp import fully_shard
        layers = blocks(model)
        for i in range(len(layers)):
            layers[i] = compile_fn(layers[i])
            fully_shard(layers[i])
        fully_shard(model)
    # (tp: DTensor and plain parameters together, which foreach kernels refuse to mix)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=args.mode != "tp")
    return model, opt, counter


def _tp_plan(name):
    """Megatron-style: the first projections of attention and MLP column-wise, the last
    row-wise (each block's output replicated)."""
    if name != "llama1b":
        raise SystemExit("--modes tp runs on llama1b (GPT-2's fused Conv1D attention has no plan here)")
    return lambda col, row: {"self_attn.q_proj": col(), "self_attn.k_proj": col(), "self_attn.v_proj": col(),
                             "self_attn.o_proj": row(), "mlp.gate_proj": col(), "mlp.up_proj": col(),
                             "mlp.down_proj": row()}


def batch(args, vocab, step, device):
    g = torch.Generator().manual_seed(1000 * dist.get_rank() + step)
    ids = torch.randint(0, vocab, (args.batch, args.seq), generator=g)
    return ids.to(device)


def train_step(model, opt, ids):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(model, opt, args, vocab, device, n, first_step):
    """Seconds of each of ``n`` steps: the slowest rank's."""
    times = []
    for i in range(n):
        ids = batch(args, vocab, first_step + i, device)
        sync(device)
        dist.barrier()
        t0 = time.perf_counter()
        train_step(model, opt, ids)
        sync(device)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(t.item())
    return times


# ---- overlap from the profiler -----------------------------------------------------------------

_REDUCE = ("allreduce", "all_reduce", "reducescatter", "reduce_scatter")


def _is_reduce_collective(name):
    n = name.lower().replace("-", "_")
    return any(k in n for k in _REDUCE) and ("nccl" in n or "gloo" in n)


def _union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _covered(interval, union):
    s, e = interval
    return sum(max(0, min(e, ue) - max(s, us)) for us, ue in union)


def _gpu_kernel(ev):
    """A kernel (or memory op) run on the GPU, not a range annotated around GPU work
    (``DistributedDataParallel.forward``, ``nccl:all_reduce``: those span many kernels)."""
    return ev.device_type == torch.autograd.DeviceType.CUDA and not getattr(ev, "is_user_annotation", False)


def overlap_share(prof, device):
    """(hidden, total): time of the reducing collectives during which compute ran, and their
    whole time; (0, 0) if none seen."""
    comm, compute = [], []
    main_thread = None
    for ev in prof.events():
        iv = (ev.time_range.start, ev.time_range.end)
        if device.type == "cuda":
            if not _gpu_kernel(ev):
                continue
            name = ev.name.lower()
            if "nccl" in name:
                if _is_reduce_collective(name):
                    comm.append(iv)
            elif "memcpy" not in name and "memset" not in name:
                compute.append(iv)
        else:
            if _is_reduce_collective(ev.name):
                comm.append(iv)
            elif ev.name.startswith("aten::") and ev.cpu_parent is None:
                if main_thread is None:
                    main_thread = ev.thread
                if ev.thread == main_thread:
                    compute.append(iv)
    union = _union(compute)
    return sum(_covered(iv, union) for iv in comm), sum(e - s for s, e in comm)


def print_kernels(prof, top, compiler, steps):
    """Rank 0's GPU kernels of the profiled steps, per step: total time, count, the collectives' time and
    the part of it no other kernel overlapped, and the ``top`` kernels by time."""
    totals, comm, compute = {}, [], []
    for ev in prof.events():
        if not _gpu_kernel(ev):
            continue
        iv = (ev.time_range.start, ev.time_range.end)
        t, n = totals.get(ev.name, (0.0, 0))
        totals[ev.name] = (t + iv[1] - iv[0], n + 1)
        (comm if "nccl" in ev.name.lower() else compute).append(iv)
    ms = 1e3 * steps  # profiler times are in µs
    busy = sum(e - s for s, e in _union(compute))
    comm_t = sum(e - s for s, e in comm)
    exposed = comm_t - sum(_covered(iv, _union(compute)) for iv in comm)
    n = sum(c for _, c in totals.values())
    print(f"[{compiler}] per step: GPU kernels {n // steps}, compute busy {busy / ms:.2f} ms, collectives "
          f"{comm_t / ms:.2f} ms ({exposed / ms:.2f} ms not overlapped)")
    for name, (t, c) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"[{compiler}]   {t / ms:8.3f} ms {c / steps:7.1f}x  {name[:110]}")


def profiled_overlap(model, opt, args, vocab, device, step, compiler_name=""):
    """Share of the reducing collectives' time hidden behind compute, over ``--profile-steps``
    profiled steps, on all ranks together (a collective's kernel also spans the wait for the
    slower rank, so one step of one rank says little)."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    dist.barrier()
    with profile(activities=acts) as prof:
        for i in range(args.profile_steps):
            train_step(model, opt, batch(args, vocab, step + i, device))
        sync(device)
    hidden, total = overlap_share(prof, device)
    if args.kernels and dist.get_rank() == 0 and device.type == "cuda":
        print_kernels(prof, args.kernels, compiler_name, args.profile_steps)
    t = torch.tensor([hidden, total], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return None if not t[1].item() else t[0].item() / t[1].item()


# ---- main --------------------------------------------------------------------------------------

def run_one(args, device):
    """Results of one (model, mode) on every rank; rank 0 gets the numbers."""
    vocab = make_config(args.model, args.tiny).vocab_size
    torch._dynamo.reset()
    pydynamo.reset()
    setups = {}
    first_loss = {}
    for compiler in ("pydynamo", "torch"):
        aot_before = _torch_graphs()
        model, opt, counter = build(args, compiler, device)
        first_loss[compiler] = train_step(model, opt, batch(args, vocab, 0, device)).item()
        for i in range(1, args.warmup):
            train_step(model, opt, batch(args, vocab, i, device))
        if compiler == "torch":
            torch_graphs = _torch_graphs() - aot_before
        setups[compiler] = (model, opt, counter)
    times = {c: [] for c in setups}
    step = args.warmup
    for _ in range(args.rounds):
        for compiler, (model, opt, _) in setups.items():
            times[compiler] += timed_steps(model, opt, args, vocab, device, args.steps, step)
        step += args.steps
    overlap = {c: profiled_overlap(m, o, args, vocab, device, step, c) for c, (m, o, _) in setups.items()}
    med = {c: statistics.median(t) for c, t in times.items()}
    return dict(model=args.model, mode=args.mode, pyd_ms=med["pydynamo"] * 1e3, torch_ms=med["torch"] * 1e3,
                ratio=med["pydynamo"] / med["torch"], pyd_overlap=overlap["pydynamo"],
                torch_overlap=overlap["torch"], pyd_loss=first_loss["pydynamo"], torch_loss=first_loss["torch"],
                pyd_graphs=setups["pydynamo"][2].graphs, torch_graphs=torch_graphs)


def _torch_graphs():
    """Graphs torch.compile has handed to AOTAutograd so far (each DDP piece counts)."""
    from torch._dynamo.utils import counters
    return counters["aot_autograd"]["total"]


def _pct(v):
    return "n/a" if v is None else f"{100 * v:.0f}%"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="gpt2,llama1b")
    p.add_argument("--modes", default="ddp,fsdp2")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="few narrow layers (the CPU smoke run)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--batch", type=int, default=None, help="per rank (default: 8 for gpt2, 4 for llama1b, 2 tiny)")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default: 1024, 32 tiny)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per compiler (the first compiles)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per compiler per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bucket-cap-mb", type=float, default=None,
                   help="DDP's bucket_cap_mb (default 25, 1 with --tiny; torch.compile wants at least 1)")
    p.add_argument("--profile-steps", type=int, default=5, help="steps profiled for the overlap")
    p.add_argument("--kernels", type=int, default=0,
                   help="print rank 0's GPU time of the profiled step and its N longest kernels")
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = p.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rows = []
    try:
        for model in args.models.split(","):
            for mode in args.modes.split(","):
                a = argparse.Namespace(**vars(args), model=model, mode=mode)
                a.batch = a.batch or (2 if a.tiny else 8 if model == "gpt2" else 4)
                a.seq = a.seq or (32 if a.tiny else 1024)
                a.bucket_cap_mb = a.bucket_cap_mb or (1.0 if a.tiny else 25.0)
                rows.append(run_one(a, device))
                if dist.get_rank() == 0:
                    r = rows[-1]
                    print(f"{model} {mode}: pydynamo {r['pyd_ms']:.2f} ms, torch.compile {r['torch_ms']:.2f} ms, "
                          f"ratio {r['ratio']:.3f}; overlap {_pct(r['pyd_overlap'])} / {_pct(r['torch_overlap'])}; "
                          f"first loss {r['pyd_loss']:.4f} / {r['torch_loss']:.4f}; graphs {r['pyd_graphs']} / "
                          f"{r['torch_graphs']}", flush=True)
    finally:
        if dist.get_rank() == 0 and rows:
            print_table(rows, args, device)
        dist.destroy_process_group()


def print_table(rows, args, device):
    what = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"\n{dist.get_world_size()} x {what}, {args.dtype}, {'tiny models, ' if args.tiny else ''}"
          f"median of {args.rounds} x {args.steps} steps")
    head = ("model", "mode", "pydynamo ms", "torch.compile ms", "ratio", "overlap pydynamo",
            "overlap torch.compile", "graphs pydynamo / torch.compile")
    lines = [head] + [(r["model"], r["mode"], f"{r['pyd_ms']:.2f}", f"{r['torch_ms']:.2f}", f"{r['ratio']:.3f}",
                       _pct(r["pyd_overlap"]), _pct(r["torch_overlap"]), f"{r['pyd_graphs']} / {r['torch_graphs']}")
                      for r in rows]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for line in lines[1:]:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
        for line in lines:
            print("  ".join(c.ljust(w) for c, w in zip(line, widths)))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
