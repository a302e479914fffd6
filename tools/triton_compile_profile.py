"""Where the triton backend's first call of a whole model goes: compile phases, per model and mode.

    python tools/triton_compile_profile.py --models resnet,gpt --modes infer,train [--size bench]
    python tools/triton_compile_profile.py --models gpt --modes train --arch 90   # no GPU needed

Each (model, mode) runs in fresh processes sharing one new cache directory (pydynamo's and
Triton's): "cold" compiles everything, "warm" is a second process that finds it all on disk (as a
user's second run does). The first call is the first step: the forward (inference, no_grad) or
forward, backward (training), synchronized. The table gives its wall time and the phases of the
backend (runtime.Timing; sums over the model's graphs): Dynamo's tracing is the rest.

Without a GPU (or with --arch), the kernels are compiled for that architecture by the very path a
GPU takes (compile workers, Triton's disk cache), with Triton's driver answering for an offline
GPU; nothing is launched: each graph returns uninitialized outputs of its traced layouts, after
waiting for its kernels (the "wait" phase), so bench sizes cost no CPU time to run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# (column, summary key): the backend's phases, in the order a first call meets them
PHASES = [("setup", "setup"), ("aot", "aot_autograd"), ("key", "graph_key"), ("lower", "lowering"), ("sched", "scheduling"),
          ("codegen", "codegen"), ("import", "import"), ("make", "make"), ("wait", "wait"), ("load", "load"),
          ("calls", "calls")]
STAGES = ["frontend", "ttir", "ttgir", "llir", "ptx", "cubin"]


class OfflineDriver:
    """Triton's driver for a GPU that is not there: what the JIT asks of it to compile."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target


def _offline(arch):
    """Compile for sm_<arch> with no GPU: see the module's docstring."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    import pydynamo.backends.triton as tb
    from pydynamo.backends.triton import runtime
    driver.set_active(OfflineDriver(GPUTarget("cuda", arch, 32)))
    tb.usable = lambda inputs: True

    class NoLauncher:  # as with torch's static launcher on a GPU: no C launcher is built ahead
        def __init__(self, compiled):
            raise RuntimeError("no GPU to load kernels on")
    runtime.static_launcher = lambda: NoLauncher
    compile_graph = tb.compile_aten_graph

    def compile_offline(gm, example_inputs, timing=None, inference=False):
        call = compile_graph(gm, example_inputs, timing, inference)
        for cell in getattr(call, "__closure__", None) or ():
            if isinstance(cell.cell_contents, runtime.Launch):
                cell.cell_contents._settle()  # waits for its compile (timed as "wait")
        outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        vals = [o.meta.get("val") if isinstance(o, torch.fx.Node) else o for o in outs]

        def run(args):
            return [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype) if isinstance(v, torch.Tensor) else v
                    for v in vals]
        run._boxed_call = True
        return run
    tb.compile_aten_graph = compile_offline


def one(name, mode, size, arch, profile=0):
    """Child process: compile and first-call one model; print a JSON line of what it measured."""
    t_start = time.perf_counter()
    import torch
    sys.path.insert(0, HERE)
    import models

    import pydynamo
    from pydynamo.backends.triton import compile_worker, runtime
    device = "cuda" if arch is None else "cpu"
    if arch is not None:
        _offline(arch)
    runtime.TIMING = arch is None
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    model, inputs = models.make(name, size, device)
    model.train(mode == "train")
    fn = pydynamo.compile(model, backend="triton")
    imported = time.perf_counter() - t_start
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t = time.perf_counter()
    if mode == "infer":
        with torch.no_grad():
            fn(*inputs)
    else:
        out = fn(*inputs)
        (out if isinstance(out, torch.Tensor) else out[0]).float().pow(2).mean().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    first = time.perf_counter() - t
    if profile:
        import pstats
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(profile)
        pstats.Stats(prof).sort_stats("tottime").print_stats(profile)
    s = runtime.compile_times(all=True)
    w = compile_worker._workers[1] if compile_worker._workers else None
    s.update(first_step=first, process_setup=imported, workers=w.count if w else 0,
             workers_ready=max(w.ready_after) if w and w.ready_after else None)
    print("RESULT " + json.dumps(s, default=str), flush=True)


def run_child(name, mode, size, arch, cache, profile=0):
    env = dict(os.environ, PYDYNAMO_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton-cache"))
    env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, mode, "--size", size]
    if arch is not None:
        cmd += ["--arch", str(arch)]
    if profile:
        cmd += ["--profile", str(profile)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if profile:
        print(r.stdout[:r.stdout.find("RESULT ")])
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{name} {mode} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def row(label, s):
    s["calls"] = max(0.0, s["first_call"] - s["wait"] - s["load"])
    phases = [s[k] for _, k in PHASES]
    rest = s["first_step"] - sum(phases)
    stages = " ".join(f"{s['stage_' + st]:.1f}" for st in STAGES)
    ready = "-" if s["workers_ready"] is None else f"{s['workers_ready']:.1f}"
    return (f"| {label} | {s['first_step']:.2f} | {rest:.2f} | " + " | ".join(f"{v:.2f}" for v in phases)
            + f" | {s['graphs']}/{s['generated']} | {s['kernels']}/{s['compiled']}/{s['in_workers']}/{s['cached']}/{s['shared']} | "
            f"{s['compile_cpu']:.1f} | {s['compile_span']:.2f} | {stages} | {s['workers']} ({ready}) |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet,gpt")
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--size", default=None, help="small or bench (default: bench on a GPU, else small)")
    ap.add_argument("--arch", type=int, default=None, help="compile for sm_ARCH without a GPU (default without one: 90)")
    ap.add_argument("--runs", default="cold,warm", help="cold, warm (a second process on the same cache)")
    ap.add_argument("--kernels", type=int, default=0, help="also list the N slowest kernel compiles of each cold run")
    ap.add_argument("--profile", type=int, default=0, help="print the top N functions of each first step's cProfile")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        return one(*a.one, a.size, a.arch, a.profile)
    import torch
    arch = a.arch if a.arch is not None or torch.cuda.is_available() else 90
    size = a.size or ("bench" if arch is None else "small")
    where = torch.cuda.get_device_name() if arch is None else f"no GPU: compiled for sm_{arch} on {os.cpu_count()} CPUs"
    print(f"{where}; size {size}; seconds. first step: the first call's wall time; rest: first step less the "
          "phases (Dynamo's tracing, mostly); calls: the graphs' first calls less their wait and load (GPU only); graphs: compiled/generated; kernels: "
          "launch sites/compiled/in workers/found in the kernel cache/shared with an identical one; compile cpu: compiles' seconds summed; span: first compile queued to last "
          "done; stages: Triton's, summed; workers (all ready after s)\n")
    print("| run | first step | rest | " + " | ".join(c for c, _ in PHASES)
          + " | graphs | kernels | compile cpu | span | " + " ".join(STAGES) + " | workers |")
    print("|---" * (len(PHASES) + 10) + "|")
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            cache = tempfile.mkdtemp(prefix="pydynamo-compile-profile-")
            for run in a.runs.split(","):
                s = run_child(name, mode, size, arch, cache, a.profile)
                print(row(f"{name} {mode} {run}", s), flush=True)
                for k in s["kernel_rows"]:
                    if k[1] == "failed":
                        print(f"|   {k[0]} failed: {k[3].get('error')} |")
                if a.kernels and run == "cold":
                    for k in sorted(s["kernel_rows"], key=lambda k: -k[2])[:a.kernels]:
                        print(f"|   {k[0]} ({k[1]}{', cached' if k[4] else ''}) | {k[2]:.2f} | "
                              + " ".join(f"{k[3].get(st, 0):.2f}" for st in STAGES) + " |")


if __name__ == "__main__":
    main()
