"""Benchmark pydynamo's "triton" backend against eager and Inductor (issue 6, item 5).

    python tools/bench_triton.py            # on a CUDA machine: the full table
    python tools/bench_triton.py --quick    # smaller shapes
    TRITON_INTERPRET=1 python tools/bench_triton.py --smoke   # tiny shapes on the CPU, no Inductor
    python tools/bench_triton.py --count    # any machine: kernels and ATen calls per graph
    python tools/bench_triton.py --profile --only e   # per-kernel GPU time, ours and Inductor's

Both compilers get the same FX graph (torch.fx.symbolic_trace of the workload) and the same
example inputs: ``triton_backend(gm, inputs)`` and Inductor's ``compile_fx(gm, inputs)``.
Reported per workload: time per call (ms, CUDA events via triton.testing.do_bench; the median of
--rounds rounds that alternate the backends, and t/ind the median of the rounds' ratios), achieved
GB/s for the memory-bound ones against a device-to-device copy's GB/s, cold compile time (fresh
pydynamo, Inductor and Triton caches, modules already imported by an untimed tiny compile with
each backend; each starts once the CPUs are quiet; graph -> first result; the median of --cold
compiles that alternate the backends, the first of each row by turns, as one compile's time moves
by 2x from run to run, Inductor's most), and our/Inductor ratios.
Targets: (a) >= 90% of copy bandwidth; (b)-(e) time ratio <= 1.0; compile ratio <= 0.5.
"""
import argparse
import contextlib
import copy
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ---- workloads: (name, fn or module, inputs, bytes moved or None, training) ----

def pointwise(a, b, c):
    return F.gelu(a * b + c) * torch.sigmoid(b)


def softmax(x):
    return torch.softmax(x, dim=-1)


class LNRelu(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return F.relu(self.ln(x)) + x


class MLPBlock(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.lin2(F.gelu(self.lin1(x))) + x


class GPT(nn.Module):
    """A small GPT: token + position embedding, pre-LN blocks, causal attention with the
    matmuls written out (so the backend sees softmax and masking), tied-free LM head."""

    def __init__(self, vocab, d, heads, layers, T):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads, T) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets, pos):
        x = self.tok(idx) + self.pos(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class GPTBlock(nn.Module):
    def __init__(self, d, heads, T):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.ones(T, T).tril() == 0)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        hd = C // self.heads
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = torch.softmax(att.masked_fill(self.mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def workloads(device, scale):
    n = 64 * 2**20 // scale
    R, C = 8192 // scale, 4096 // max(1, scale // 64)
    f32, bf16 = torch.float32, torch.bfloat16
    rnd = lambda *s, dtype=f32: torch.randn(*s, device=device, dtype=dtype)  # noqa: E731
    out = [("a: gelu(a*b+c)*sigmoid(b) f32", pointwise, [rnd(n), rnd(n), rnd(n)], 4 * n * 4, False)]
    for dt, name in ((f32, "f32"), (bf16, "bf16")):
        x = rnd(R, C, dtype=dt)
        out.append((f"b: softmax {R}x{C} {name}", softmax, [x], 2 * x.numel() * x.element_size(), False))
    for dt, name in ((f32, "f32"), (bf16, "bf16")):
        x = rnd(R, C, dtype=dt)
        out.append((f"c: relu(layer_norm(x))+x {R}x{C} {name}", LNRelu(C).to(device, dt), [x],
                    2 * x.numel() * x.element_size(), False))
    d = 4096 // scale if scale > 1 else 4096
    out.append((f"d: mlp bf16 {d}x{d}", MLPBlock(d, 4 * d).to(device, bf16), [rnd(d, d, dtype=bf16)], None, False))
    T, B = (256, 8) if scale == 1 else (16, 2)
    vocab, dm = (8192, 512) if scale == 1 else (64, 32)
    gpt = GPT(vocab, dm, 8 if scale == 1 else 2, 4 if scale == 1 else 1, T).to(device)
    idx = torch.randint(0, vocab, (B, T), device=device)
    tgt = torch.randint(0, vocab, (B, T), device=device)
    pos = torch.arange(T, device=device)
    out.append((f"e: gpt train step B{B} T{T} d{dm}", gpt, [idx, tgt, pos], None, True))
    return out


# ---- measuring ----

@contextlib.contextmanager
def fresh_caches():
    """Cold compile: empty pydynamo, Inductor and Triton caches, and no in-memory modules."""
    saved = {k: os.environ.get(k) for k in ("PYDYNAMO_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    with tempfile.TemporaryDirectory() as d:
        for k in saved:
            os.environ[k] = os.path.join(d, k.lower())
        from pydynamo.backends.triton import runtime
        runtime._modules.clear()
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def compile_with(backend, fn, inputs):
    gm = torch.fx.symbolic_trace(fn)
    if backend == "eager":
        return fn
    if backend == "triton":
        from pydynamo.backends.triton import triton_backend
        compiled = triton_backend(gm, inputs)
    else:
        import torch._inductor.config as cfg
        from torch._inductor.compile_fx import compile_fx
        cfg.fx_graph_cache = False
        cfg.autotune_local_cache = False
        compiled = compile_fx(gm, inputs)
    return compiled


def each_graph(fn, inputs, training, compiler):
    """Run ``fn`` (and its backward when training) through AOTAutograd as the triton backend
    does, calling ``compiler(aten_graph, example_inputs)`` on its forward and backward graphs
    (the tools' way to see the graphs without compiling them)."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from pydynamo.backends.triton import _tuple_output
    from pydynamo.backends.triton.decomps import decomposition_table

    def seen(gm, example_inputs):
        compiler(gm, example_inputs)
        return gm
    gm, _ = _tuple_output(torch.fx.symbolic_trace(copy.deepcopy(fn) if isinstance(fn, nn.Module) else fn))
    compiled = aot_module_simplified(gm, inputs, fw_compiler=seen, bw_compiler=seen,
                                     decompositions=decomposition_table(),
                                     partition_fn=min_cut_rematerialization_partition)
    if training:
        compiled(*inputs)[0].backward()


def step(fn, inputs, training):
    """One call (plus backward when training); returns the outputs for checking."""
    out = fn(*inputs)
    out = out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out
    if training:
        out.backward()
    return out


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, iters=20):
    if device.type == "cuda":
        from triton.testing import do_bench
        return do_bench(fn, warmup=25, rep=100, return_mode="median")
    fn()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t) / iters * 1e3


def copy_gbps(device, nbytes):
    src = torch.empty(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), device)
    return 2 * nbytes / ms / 1e6


def _cpu_ticks():
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]  # all, idle + iowait


def quiet(busy_cores=1.0, most_s=10.0):
    """Wait until the machine's CPUs are quiet (under ``busy_cores`` cores busy over 0.2 s; at
    most ``most_s`` seconds), so that one compile does not run beside the background work of the
    one before (Inductor's compile pool, our compile workers, a lazy import)."""
    import gc
    gc.collect()
    ncpu = os.cpu_count() or 1
    end = time.perf_counter() + most_s
    try:
        while time.perf_counter() < end:
            all0, idle0 = _cpu_ticks()
            time.sleep(0.2)
            all1, idle1 = _cpu_ticks()
            if all1 > all0 and (1 - (idle1 - idle0) / (all1 - all0)) * ncpu < busy_cores:
                return
    except OSError:  # no /proc/stat
        time.sleep(1.0)


def compile_one(backend, fn, inputs, training, device):
    """Cold compile and the first step: (step function, compile seconds, output, grads)."""
    module = isinstance(fn, nn.Module)
    fn = copy.deepcopy(fn) if module else fn
    quiet()
    with fresh_caches():
        t0 = time.perf_counter()
        compiled = compile_with(backend, fn, inputs)
        out = step(compiled, inputs, training)
        sync(device)
        compile_s = time.perf_counter() - t0
    out = out.detach().clone()
    grads = [None if p.grad is None else p.grad.clone() for p in fn.parameters()] if training else None
    return (lambda: step(compiled, inputs, training)), compile_s, out, grads


def time_rounds(steps, device, rounds):
    """ms per call of each backend, timed in alternating rounds (so that clock and thermal drift
    hits all of them alike): {backend: [ms per round]}."""
    times = {b: [] for b in steps}
    for _ in range(rounds):
        for b, f in steps.items():
            times[b].append(timed(f, device))
    return times


def profile(device, only, top=25):
    """Per-kernel GPU time of each workload under triton and inductor (torch.profiler, 5 steps
    after warmup): launches per step, kernel time per step, the heaviest kernels."""
    import collections

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    for wname, fn, inputs, _, training in workloads(device, 1):
        if only and wname[0] not in only:
            continue
        for backend in ("triton", "inductor"):
            sources = _capture_output_code()
            run, *_ = compile_one(backend, fn, inputs, training, device)
            moved = _kernel_traffic(sources)
            for _ in range(3):
                run()
            sync(device)
            with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    run()
                sync(device)
            per = collections.defaultdict(lambda: [0, 0.0])
            for ev in prof.events():
                if ev.device_type == torch.autograd.DeviceType.CUDA:
                    per[ev.name][0] += 1
                    per[ev.name][1] += ev.device_time
            total = sum(t for _, t in per.values()) / 5
            print(f"\n{wname}, {backend}: {sum(n for n, _ in per.values()) / 5:.0f} kernels and "
                  f"{total:.0f} us of kernel time per step")
            for name, (n, t) in sorted(per.items(), key=lambda kv: -kv[1][1])[:top]:
                gbps = f"{moved[name] * n / t / 1e3:6.0f} GB/s" if name in moved else " " * 11
                print(f"  {t / 5:8.1f} us {n / 5:5.1f}x {gbps}  {name[:100]}")


def _capture_output_code():
    """A list that fills with the generated modules logged from now on."""
    import logging
    out = []

    class Keep(logging.Handler):
        def emit(self, record):
            out.append(record.args[1])
    logger = logging.getLogger("pydynamo.output_code")
    logger.setLevel(logging.INFO)
    logger.addHandler(Keep())
    return out


def _kernel_traffic(sources):
    """kernel name -> bytes it moves per launch, from the notes in the generated code."""
    import re
    out = {}
    for src in sources:
        for m in re.finditer(r"\(reads ([\d.e+-]+) MB, writes ([\d.e+-]+) MB\)\n(?:# .*\n)*@triton.jit\ndef (\w+)\(",
                             src):
            out[m.group(3)] = (float(m.group(1)) + float(m.group(2))) * 2**20
    return out


def count(scale):
    """Kernels and ATen calls in the generated wrapper of each workload's forward (and backward)
    graph: what fusion leaves to launch. Generated on the CPU; nothing is compiled or launched."""
    import re

    from pydynamo.backends.triton import generate_source
    print("| workload | graph | launches | distinct kernels | ATen calls | views | kernel MB moved |")
    print("|---|---|---|---|---|---|---|")
    for wname, fn, inputs, _, training in workloads(torch.device("cpu"), scale):
        rows = []

        def compiler(gm, example_inputs):
            src = generate_source(gm)
            body = src[src.index("    def call(args):"):]
            moved = sum(float(a) + float(b) for a, b in re.findall(r"^# (?:computes|and again) .*\(reads ([\d.e+-]+) MB, "
                                                                   r"writes ([\d.e+-]+) MB\)$", src, re.M))
            rows.append((len(re.findall(r"^        \(?launch_\d+\b.*\(stream", body, re.M)), src.count("\ndef triton_"),
                         moved, len(re.findall(r"^        \w+ = torch\.", body, re.M)),
                         len(re.findall(r"^        view\d+ = ", body, re.M))))
        each_graph(fn, inputs, training, compiler)
        for graph, (k, d, mb, a, v) in zip(("forward", "backward"), rows):
            print(f"| {wname} | {graph} | {k} | {d} | {a} | {v} | {mb:.0f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shapes 16x smaller")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, CPU with TRITON_INTERPRET=1, no Inductor")
    ap.add_argument("--only", default="", help="run workloads whose name starts with these letters, e.g. 'ab'")
    ap.add_argument("--count", action="store_true", help="kernels and ATen calls per graph (no GPU needed)")
    ap.add_argument("--profile", action="store_true", help="per-kernel GPU time, triton and inductor")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds (median reported)")
    ap.add_argument("--cold", type=int, default=5, help="cold compiles per backend, alternating (median reported)")
    args = ap.parse_args()
    if args.count:
        return count(16 if args.quick else 1)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("needs CUDA (or --smoke with TRITON_INTERPRET=1)")
    if args.profile:
        return profile(device, args.only)
    scale = 4096 if args.smoke else (16 if args.quick else 1)
    backends = ["eager", "triton"] + ([] if args.smoke else ["inductor"])
    torch.manual_seed(0)
    copy_bw = copy_gbps(device, 256 * 2**20 // scale)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (interpreter)"
    print(f"device: {name}; device-to-device copy: {copy_bw:.0f} GB/s")
    # Untimed: one tiny training step through each compiler, so that cold compile times below
    # count compiling, not importing modules or starting CUDA, whichever backend runs first.
    tiny = workloads(device, 4096)[-1]
    for b in backends[1:]:
        compile_one(b, tiny[1], tiny[2], True, device)
    cols = ("workload", "eager ms", "inductor ms", "triton ms", "t/ind", "GB/s", "%copy",
            "ind cold s", "tri cold s", "t/ind cold", "max err")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for wname, fn, inputs, nbytes, training in workloads(device, scale):
        if args.only and wname[0] not in args.only:
            continue
        runs = {b: [] for b in backends}  # backend -> compile_one's answers
        for rep in range(max(1, args.cold)):  # cold compiles alternate between the backends,
            # and which compiler goes first alternates too: the first compile of a row pays for
            # what the row's new shapes and dtypes leave warm in torch's shared code
            compilers = [b for b in runs if b != "eager"]
            order = (["eager"] if rep == 0 and "eager" in runs else []) + \
                (compilers if rep % 2 == 0 else compilers[::-1])
            for b in [b for b in order if b in runs]:
                try:
                    runs[b].append(compile_one(b, fn, inputs, training, device))
                except Exception as e:  # keep the table going; show what failed
                    print(f"  {wname}: {b} failed: {type(e).__name__}: {e}")
                    del runs[b]
        steps = {b: r[-1][0] for b, r in runs.items()}
        res = {b: (_median([cold for _, cold, _, _ in r]), *r[-1][2:]) for b, r in runs.items()}
        times = time_rounds(steps, device, args.rounds)
        row = _row(wname, res, times, nbytes, copy_bw)
        del res, steps
        print("| " + " | ".join(row) + " |", flush=True)


def _median(xs):
    return sorted(xs)[len(xs) // 2] if xs else None


def _row(wname, res, times, nbytes, copy_bw):
    """Table cells; res[b] = (compile s, output, grads), times[b] = ms per round. Times are
    medians over rounds, t/ind the median of each round's ratio."""
    f = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    ms = {b: _median(t) for b, t in times.items()}
    get = lambda b, i: res[b][i] if b in res else None  # noqa: E731
    tri, ind = ms.get("triton"), ms.get("inductor")
    ratio = _median([a / b for a, b in zip(times["triton"], times["inductor"])]) if tri and ind else None
    gbps = nbytes / tri / 1e6 if nbytes and tri else None
    err = None
    if "triton" in res and "eager" in res:
        a, e = res["triton"][1], res["eager"][1]
        err = (a.float() - e.float()).abs().max().item()
        if res["triton"][2]:
            err = max([err] + [(x - y).abs().max().item() for x, y in zip(res["triton"][2], res["eager"][2])
                               if x is not None and y is not None])
    return [wname, f(ms.get("eager")), f(ind), f(tri), f(ratio, 2),
            f(gbps, 0), f(100 * gbps / copy_bw if gbps else None, 0), f(get("inductor", 0), 2),
            f(get("triton", 0), 2), f(get("triton", 0) / get("inductor", 0) if ind else None, 2), f(err, 4)]


if __name__ == "__main__":
    main()
