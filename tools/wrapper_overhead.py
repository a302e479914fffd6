"""Host time of the triton backend's generated wrappers (the Python that allocates, makes views,
launches and calls ATen), on any machine.

    python tools/wrapper_overhead.py            # bench_triton's workload e (the GPT step)
    python tools/wrapper_overhead.py --only d --profile

Each graph of the workload is generated as for a GPU, then its ``call`` runs on meta tensors:
allocations, views and stride checks are real calls; a kernel launch does what a static launch
does on the host short of the C launch (the alignment check and the argument tuple); mm, addmm
and bmm return an empty meta tensor of the result's shape. So the time printed is the wrapper's
own, the part of a step's host time this backend can change. Compare before and after a change
to wrapper.py on the same machine (minimum of several runs: the host is noisy).
"""
import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TRITON_INTERPRET", "1")  # lowering needs no GPU; nothing is compiled
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import bench_triton as bt  # noqa: E402
from pydynamo.backends.triton import generate_source, runtime  # noqa: E402


def _host_launch(self, stream, *args):
    for a in args:
        if a.data_ptr() & 15:
            break
    return args + (None, None)


def _host_owned(self, stream, *args):
    return args + (None, None)


class _Torch:
    """``torch`` for the generated module, with the matmuls stubbed."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def mm(a, b):
        return torch.empty((a.shape[0], b.shape[1]), device="meta", dtype=a.dtype)

    @staticmethod
    def addmm(c, a, b):
        return torch.empty((a.shape[0], b.shape[1]), device="meta", dtype=a.dtype)

    @staticmethod
    def bmm(a, b):
        return torch.empty((a.shape[0], a.shape[1], b.shape[2]), device="meta", dtype=a.dtype)


def graphs_of(fn, inputs, training):
    """(source, constants, input layouts) of each ATen graph AOTAutograd makes for ``fn``."""
    out = []

    def compiler(gm, example_inputs):
        src = generate_source(gm).replace("DEVICE = torch.device('cpu')", "DEVICE = torch.device('meta')")
        consts = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
        out.append((src, consts, [(tuple(t.shape), tuple(t.stride()), t.dtype) for t in example_inputs]))
    bt.each_graph(fn, inputs, training, compiler)
    return out


def wrapper_call(src, consts, folder, i):
    path = os.path.join(folder, f"wrapper_{i}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"wrapper_overhead_{i}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.torch = _Torch()
    mod.index_put_accumulate = lambda base, indices, values, in_place: base
    return mod.make([c.to("meta") for c in consts], lambda args: None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="e", help="the workload whose name starts with this letter")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--profile", action="store_true", help="also print the top of a cProfile")
    args = ap.parse_args()
    runtime.Launch.__call__, runtime.Launch.owned = _host_launch, _host_owned
    runtime.launch_stream = lambda: (0, 0)
    name, fn, inputs, _, training = [w for w in bt.workloads(torch.device("cpu"), 1) if w[0].startswith(args.only)][0]
    print(name)
    with tempfile.TemporaryDirectory() as folder:
        for i, (src, consts, layouts) in enumerate(graphs_of(fn, inputs, training)):
            call = wrapper_call(src, consts, folder, i)
            metas = [torch.empty_strided(size, stride, dtype=dtype, device="meta") for size, stride, dtype in layouts]
            for _ in range(20):
                call(list(metas))
            times = []
            for _ in range(args.calls):
                t = time.perf_counter()
                call(list(metas))
                times.append(time.perf_counter() - t)
            kind = ("forward", "backward")[i] if training and i < 2 else f"graph {i}"
            print(f"{kind}: {src.count('Launch(')} distinct kernels; wrapper "
                  f"{statistics.median(times) * 1e6:.0f} µs median, {min(times) * 1e6:.0f} µs min per call")
            if args.profile:
                import cProfile
                import pstats
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(50):
                    call(list(metas))
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
