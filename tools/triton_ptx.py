"""Compile the kernels of generated triton-backend modules for a GPU architecture, on any machine.

    python tools/triton_ptx.py [--arch 90] [--only e] [--quick]   # bench_triton's workloads
    python tools/triton_ptx.py path/to/g_<hash>.py ...              # modules from the cache

Triton's interpreter (how the CPU tests run kernels) accepts programs that its GPU compiler may
reject, and says nothing of registers. This compiles every kernel the way its first launch would
(pointer arguments 16-byte aligned, the wrapper's block sizes and warps) for the given
architecture with Triton's compiler and its bundled ptxas, no GPU needed, and prints per kernel:
registers per thread, spilled bytes and compile seconds.
"""
import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

# every Launch(...) of the module: a site's, and its choices' (Launch.with_choices)
LAUNCH = re.compile(r"Launch\((\w+), (\d+), (\d+), \(([^)]*)\),?\s*([^()]*)\)")
POINTER = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float64: "*fp64",
           torch.int64: "*i64", torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8",
           torch.uint8: "*u8", torch.bool: "*i1"}


def compiled_kernels(path, arch=90):
    """Yield (kernel name, grid, warps, Triton CompiledKernel, seconds) for the module at path."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    spec = importlib.util.spec_from_file_location(f"ptx_{abs(hash(path))}", path)
    mod = importlib.util.module_from_spec(spec)
    interpret, knobs.runtime.interpret = knobs.runtime.interpret, False  # JITFunctions, even under
    try:                                                                  # TRITON_INTERPRET=1
        spec.loader.exec_module(mod)
    finally:
        knobs.runtime.interpret = interpret
    with open(path) as f:
        src = f.read()
    for name, grid, warps, dtypes, config in dict.fromkeys(LAUNCH.findall(src)):
        fn = getattr(mod, name)
        dts = [getattr(torch, d.strip().split(".")[1]) for d in dtypes.split(",") if d.strip()]
        consts = {k: int(v) for k, v in (kv.split("=") for kv in config.replace(" ", "").split(",") if kv)}
        sig = {a: "constexpr" if a in consts else POINTER[dts[i]] for i, a in enumerate(fn.arg_names)}
        attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a not in consts}
        t = time.perf_counter()
        k = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", arch, 32),
                           options={"num_warps": int(warps), "debug": bool(fn.debug),
                                    "sanitize_overflow": not fn.debug})  # as runtime.Launch
        yield name, int(grid), int(warps), k, time.perf_counter() - t


def compile_module(path, arch=90):
    """[(kernel name, grid, warps, registers, spilled bytes, seconds)] for the module at path."""
    import triton
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    out = []
    for name, grid, warps, k, seconds in compiled_kernels(path, arch):
        with tempfile.TemporaryDirectory() as d:
            ptx = os.path.join(d, "k.ptx")
            with open(ptx, "w") as f:
                f.write(k.asm["ptx"])
            r = subprocess.run([ptxas, f"-arch=sm_{arch}{'a' if arch >= 90 else ''}", "-v", ptx, "-o",
                                os.path.join(d, "k.cubin")], capture_output=True, text=True, check=True)
        regs = re.search(r"Used (\d+) registers", r.stderr)
        spill = re.search(r"(\d+) bytes spill stores", r.stderr)
        out.append((name, grid, warps, int(regs.group(1)) if regs else None,
                    int(spill.group(1)) if spill else 0, seconds))
    return out


def generated_modules(only, scale):
    """Paths of the modules generated for bench_triton's workloads (forward and backward)."""
    import bench_triton
    from pydynamo.backends.triton import generate_source
    paths = []
    tmp = tempfile.mkdtemp(prefix="triton-ptx-")
    for wname, fn, inputs, _, training in bench_triton.workloads(torch.device("cpu"), scale):
        if only and wname[0] not in only:
            continue

        def compiler(gm, example_inputs, wname=wname):
            path = os.path.join(tmp, f"{wname[0]}{len(paths)}.py")
            with open(path, "w") as f:
                f.write(generate_source(gm))
            graph = "backward" if any(p[0].startswith(wname) for p in paths) else "forward"
            paths.append((f"{wname} {graph}", path))
        bench_triton.each_graph(fn, inputs, training, compiler)
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", help="generated modules (default: bench_triton's workloads)")
    ap.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 80, 90")
    ap.add_argument("--only", default="", help="bench_triton workloads starting with these letters")
    ap.add_argument("--quick", action="store_true", help="bench_triton's 16x smaller shapes")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    paths = [(p, p) for p in args.paths] or generated_modules(args.only, 16 if args.quick else 1)
    print(f"| graph | kernel | grid | warps | registers | spilled bytes | compile s (sm_{args.arch}) |")
    print("|---|---|---|---|---|---|---|")
    total = 0.0
    for label, path in paths:
        for name, grid, warps, regs, spill, s in compile_module(path, args.arch):
            total += s
            print(f"| {label} | {name} | {grid} | {warps} | {regs} | {spill} | {s:.2f} |", flush=True)
    print(f"\ncompiled in {total:.1f} s, one kernel after another")


if __name__ == "__main__":
    main()
