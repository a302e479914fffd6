"""Compile worker processes (pydynamo/backends/triton/compile_worker.py): without torch and without
a GPU, they compile the kernels of a generated module for a GPU target into Triton's disk cache,
under the very keys the parent's JIT then looks up; a task they cannot do answers False (the
parent then compiles) without losing the worker."""
import contextlib
import glob
import os
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

from pydynamo.backends.triton import compile_worker, runtime  # noqa: E402
from pydynamo.backends.triton.compile_worker import Workers, task  # noqa: E402

TARGET = ("cuda", 90, 32)

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def erf_kernel(x_ptr, y_ptr, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(y_ptr + i, tl.erf(tl.load(x_ptr + i)))
'''


@pytest.fixture
def no_torch(tmp_path, monkeypatch):
    """Workers started inside see a ``torch`` that fails to import: a worker that needed torch
    would fail its tasks."""
    fake = tmp_path / "poisoned" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('a compile worker imported torch')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))


def ready(workers, n, timeout=120):
    start = time.time()
    while workers.ready < n and time.time() - start < timeout:
        time.sleep(0.05)
    return workers.ready >= n


def erf_task(path, cache):
    aligned = [["tt.divisibility", 16]]
    return (str(path), "kernels_mod_for_test", "erf_kernel",
            {"x_ptr": "*fp32", "y_ptr": "*fp32", "XBLOCK": "constexpr"}, {(2,): 128},
            {(0,): aligned, (1,): aligned}, {"num_warps": 4}, TARGET, {"TRITON_CACHE_DIR": str(cache)})


def test_a_worker_compiles_into_the_cache_and_survives_a_bad_task(tmp_path, no_torch):
    mod = tmp_path / "kernels_mod.py"
    mod.write_text(KERNELS)
    cache = tmp_path / "triton-cache"
    good = erf_task(mod, cache)
    w = Workers(1, TARGET)
    assert w.compile(good) is False or w.ready  # not ready yet: the caller compiles
    assert ready(w, 1)
    assert w.compile(good[:2] + ("no_such_kernel",) + good[3:]) is False
    assert w.compile(good) is True
    cubins = glob.glob(str(cache / "*" / "erf_kernel.cubin"))
    assert len(cubins) == 1 and open(cubins[0], "rb").read(4) == b"\x7fELF"
    assert w.ready == 1  # the bad task did not cost the worker


def test_a_dead_worker_is_left_out(tmp_path):
    w = Workers(1)
    assert ready(w, 1)
    proc = w.idle.get()
    proc.kill()
    proc.wait()
    w.idle.put(proc)
    task = erf_task(tmp_path / "x.py", tmp_path)
    assert w.compile(task) is False
    assert w.ready == 0 and w.compile(task) is False  # nothing left to wait for


def OfflineDriver(target):
    """A GPU target for Triton's JIT with no GPU: the profile tool's driver."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    from triton_compile_profile import OfflineDriver as driver
    return driver(target)


def generated_module(f, inputs, gpu_forms=False):
    """The generated module's source for f's forward graph (``gpu_forms``: what it would be on a
    GPU, where some ops are libdevice calls that the interpreter lacks)."""
    from torch._functorch.aot_autograd import aot_module_simplified

    from pydynamo.backends.triton import generate_source
    from pydynamo.backends.triton.decomps import decomposition_table
    sources = []

    def grab(gm, example_inputs):
        interpret = os.environ["TRITON_INTERPRET"]
        os.environ["TRITON_INTERPRET"] = "0" if gpu_forms else interpret
        try:
            sources.append(generate_source(gm))
        finally:
            os.environ["TRITON_INTERPRET"] = interpret
        return gm
    aot_module_simplified(torch.fx.symbolic_trace(f), inputs, fw_compiler=grab, decompositions=decomposition_table())
    return sources[0]


@contextlib.contextmanager
def offline_launches(tmp_path, monkeypatch, src, name="worker_test"):
    """The launch sites of the generated module ``src``, its kernels as Triton JITFunctions, with
    Triton's driver answering for an sm_90 GPU: (launches, target)."""
    import importlib.util

    import triton.experimental.gluon  # noqa: F401  (Triton's JIT imports it; under the interpreter
    from triton import knobs          # it must be imported while interpret is on)
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    path = tmp_path / f"g_{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"pydynamo_triton_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)
    monkeypatch.setattr(knobs.runtime, "interpret", False)  # JITFunctions, not the interpreter
    monkeypatch.setattr(runtime, "precompile", lambda launches: None)  # the tests compile them
    spec.loader.exec_module(mod)
    call = mod.make([], None)
    sites = [c.cell_contents for c in call.__closure__ if isinstance(c.cell_contents, runtime.Launch)]
    # a site with choices (kernels under other configurations, runtime.tuning()) stands for them
    launches = [c for site in sites for c in (site.choices[0] if site.choices else [site])]
    assert len(launches) == src.count("\ndef triton_")
    target = GPUTarget(*TARGET)
    before = driver._active  # (this machine may have no GPU driver to reset to)
    driver.set_active(OfflineDriver(target))
    try:
        yield launches, target
    finally:
        driver.set_active(before)


def test_workers_compile_the_kernels_the_parents_jit_then_finds(tmp_path, monkeypatch, no_torch):
    """For each kernel of a generated module: a worker compiles it (from the module's kernel part
    alone, without torch), then the parent's warmup, Triton's own JIT path, finds it in the disk
    cache and compiles nothing. So the worker's cache key is the JIT's, for every kind of kernel:
    pointwise, row (softmax), reduction, gather (compiled with debug=True for its index checks),
    int64 and bool."""
    import triton.compiler.compiler as tc

    def f(x, w, idx):
        e = F.embedding(idx, w)
        s = torch.softmax(x * 2.0, dim=-1)
        return (s + e.sum(0), (x > 0).any(-1), idx * 3 + 1, F.gelu(x).amax(0))
    src = generated_module(f, [torch.randn(8, 32), torch.randn(10, 32), torch.randint(0, 10, (8,))])
    assert "debug=True" in src and "tl.device_assert" in src and src.count("\ndef triton_") >= 2
    head = src[:src.index(compile_worker.WRAPPER_MARK)]
    assert not [line for line in head.splitlines() if "torch" in line and not line.startswith("#")]
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    with offline_launches(tmp_path, monkeypatch, src) as (launches, target):
        w = Workers(2, TARGET)
        assert ready(w, 2)
        for i, launch in enumerate(launches):
            stages = {}
            assert w.compile(task(launch, target, str(tmp_path / f"entry{i}")), stages) is True, launch.kernel.__name__
            assert stages["hit"] is False and stages["cubin"] > 0 and set(runtime.STAGES) <= set(stages)
        compiled_here = []
        orig = tc.ASTSource.make_ir

        def recording(self, *args, **kwargs):
            compiled_here.append(self.fn.__name__)
            return orig(self, *args, **kwargs)
        monkeypatch.setattr(tc.ASTSource, "make_ir", recording)
        for i, launch in enumerate(launches):
            launch.warmup()
            assert launch.warm.asm["cubin"][:4] == b"\x7fELF"
            # the worker also stored the kernel as an entry of the parent's kernel cache
            assert (tmp_path / f"entry{i}.cubin").read_bytes() == launch.warm.asm["cubin"]
            assert (tmp_path / f"entry{i}.json").exists()
        assert not compiled_here, compiled_here


def test_the_workers_small_libdevice_compiles_the_same_cubins(tmp_path, monkeypatch, no_torch):
    """Workers link a small libdevice (compile_worker.Libdevice); kernels that call libdevice
    (erf, log, tanh, pow, sin, float64 exp and log1p) compile in them to the very cubins that
    Triton makes here with the whole libdevice.10.bc."""
    import triton
    from triton.backends.nvidia import compiler as nvc
    from triton.compiler import ASTSource

    def f(x, d, y):
        return (F.gelu(x) + torch.log_softmax(x, -1) + torch.tanh(x) * torch.sin(x) + x.abs().pow(1.7),
                (d.exp() + d.log1p()).sum(0), torch.erf(y) * torch.cos(y))
    src = generated_module(f, [torch.randn(8, 32), torch.rand(8, 32, dtype=torch.float64), torch.randn(50)],
                           gpu_forms=True)
    assert "libdevice.tanh" in src and "libdevice.pow" in src
    workers_cache = tmp_path / "workers-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(workers_cache))
    with offline_launches(tmp_path, monkeypatch, src) as (launches, target):
        w = Workers(2, TARGET)
        assert ready(w, 2)
        assert w.note.startswith("small libdevice"), w.note
        said = []
        for launch in launches:
            assert w.compile(task(launch, target)) is True, launch.kernel.__name__
            said.append(w.said)
        assert said.count("libdevice linked small") >= 2 and "libdevice linked whole" not in said, said
        linked = []
        full = nvc.llvm.link_extern_libs
        monkeypatch.setattr(nvc.llvm, "link_extern_libs", lambda m, paths: (linked.append(paths), full(m, paths)))
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "here"))
        for launch in launches:
            signature, constexprs, attrs, options = compile_worker.spec(launch)
            here = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs), target=target,
                                  options=options)
            name = launch.kernel.__name__
            theirs = glob.glob(str(workers_cache / "*" / f"{name}.cubin"))
            assert len(theirs) == 1, name
            assert open(theirs[0], "rb").read() == here.asm["cubin"], name
        assert len(linked) >= 2 and all(p[0].endswith("libdevice.10.bc") for p in linked), linked


def test_worker_count(monkeypatch):
    monkeypatch.setenv("PYDYNAMO_TRITON_COMPILE_WORKERS", "3")
    assert compile_worker.default_count() == 3
    monkeypatch.delenv("PYDYNAMO_TRITON_COMPILE_WORKERS")
    assert 1 <= compile_worker.default_count() <= 16


def test_a_forked_child_does_not_use_its_parents_workers(monkeypatch):
    from triton.backends.compiler import GPUTarget
    monkeypatch.setenv("PYDYNAMO_TRITON_COMPILE_WORKERS", "0")
    monkeypatch.setattr(compile_worker, "_workers", (os.getpid() + 1, "the parent's workers"))
    assert compile_worker.workers(GPUTarget(*TARGET)) is None


def test_the_float32_rsqrt_helper_is_tl_rsqrts_instruction_without_libdevice(tmp_path, monkeypatch):
    """The generated modules' rsqrt_ftz(x) compiles (for sm_90, offline) to the instruction that
    tl.rsqrt's libdevice call becomes, so results are the same bits, and needs no libdevice link."""
    import importlib.util
    import re

    import triton
    import triton.experimental.gluon  # noqa: F401  (see above)
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia import compiler as nvc
    from triton.compiler import ASTSource

    from pydynamo.backends.triton.wrapper import HEADER
    path = tmp_path / "rsqrt_mod.py"
    path.write_text(HEADER.format(summary="") + '''

@triton.jit
def ours(x_ptr, y_ptr, XBLOCK: tl.constexpr):
    i = tl.arange(0, XBLOCK)
    tl.store(y_ptr + i, rsqrt_ftz(tl.load(x_ptr + i) + 1e-5))


@triton.jit
def theirs(x_ptr, y_ptr, XBLOCK: tl.constexpr):
    i = tl.arange(0, XBLOCK)
    tl.store(y_ptr + i, tl.rsqrt(tl.load(x_ptr + i) + 1e-5))
''')
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(knobs.runtime, "interpret", False)
    spec = importlib.util.spec_from_file_location("rsqrt_mod_for_test", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)
    spec.loader.exec_module(mod)
    linked = []
    orig = nvc.llvm.link_extern_libs
    monkeypatch.setattr(nvc.llvm, "link_extern_libs", lambda m, paths: (linked.append(1), orig(m, paths)))
    for dtype, expected in (("*fp32", "rsqrt.approx.ftz.f32"), ("*fp64", "rsqrt.approx.f64")):
        found = {}
        for name in ("ours", "theirs"):
            del linked[:]
            k = triton.compile(ASTSource(getattr(mod, name), {"x_ptr": dtype, "y_ptr": dtype, "XBLOCK": "constexpr"},
                                         {(2,): 128}, {}), target=GPUTarget(*TARGET), options={"num_warps": 4})
            found[name] = (sorted(set(re.findall(r"\brsqrt\.[\w.]+", k.asm["ptx"]))), bool(linked))
        assert found["theirs"] == ([expected], True), found
        assert found["ours"] == ([expected], dtype == "*fp64"), found  # float64 still goes through libdevice


# ---- the kernel cache (runtime.cached_compile) ----

def _renamed(src, suffix):
    """``src`` with its kernels named otherwise (as another graph's identical kernels are)."""
    import re
    for name in set(re.findall(r"def (triton_\w+)\(", src)):
        src = src.replace(name, name + suffix)
    return src


def test_the_kernel_cache_key_holds_what_changes_the_binary(tmp_path, monkeypatch):
    """A kernel's key changes with its spec (num_warps here), the target's arch, Triton's version
    and the environment variables Triton's cache key takes; not with the kernel's name."""
    import triton
    src = generated_module(lambda x: (torch.relu(x) * 2,), [torch.randn(64)])
    with offline_launches(tmp_path, monkeypatch, src) as ([a], target), \
            offline_launches(tmp_path, monkeypatch, _renamed(src, "_b"), "other") as ([b], _):
        assert a.kernel.__name__ != b.kernel.__name__
        spec = compile_worker.spec(a)
        key = runtime.kernel_key(a.kernel, spec, TARGET)
        assert runtime.kernel_key(b.kernel, compile_worker.spec(b), TARGET) == key
        assert runtime.kernel_key(a.kernel, spec[:3] + (dict(spec[3], num_warps=8),), TARGET) != key
        assert runtime.kernel_key(a.kernel, spec, ("cuda", 80, 32)) != key
        monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
        assert runtime.kernel_key(a.kernel, spec, TARGET) != key
        monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION")
        monkeypatch.setattr(triton, "__version__", "0.0.0")
        assert runtime.kernel_key(a.kernel, spec, TARGET) != key


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.fc = torch.nn.LayerNorm(32), torch.nn.Linear(32, 32)

    def forward(self, x):
        return x + F.gelu(self.fc(self.ln(x)))


class _Layers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(*[_Block() for _ in range(6)]).requires_grad_(False)

    def forward(self, x):
        return (self.blocks(x),)


SECOND_PROCESS = """
import os, sys, pathlib
sys.path.insert(0, {tests!r})
import pytest
import triton.compiler.compiler as tc
import test_triton_compile_worker as t
from pydynamo.backends.triton import runtime
made = []
orig = tc.ASTSource.make_ir
tc.ASTSource.make_ir = lambda self, *a, **k: (made.append(self.fn.__name__), orig(self, *a, **k))[1]
with pytest.MonkeyPatch.context() as mp:
    with t.offline_launches(pathlib.Path({tmp!r}), mp, open({src!r}).read(), "again") as (launches, target):
        print([runtime.cached_compile(l, None, target, dict()) for l in launches], made)
"""


def test_kernels_compile_once_per_process_and_a_second_process_compiles_none(tmp_path, monkeypatch):
    """Six identical layers make one graph's kernels once (the wrapper launches them again);
    the same kernels in another graph, under other names, are compiled for the first and shared
    (Triton compiles each distinct kernel once in all); a second process, with an empty Triton
    cache, finds all of them in the kernel cache and compiles nothing."""
    import subprocess

    import triton.compiler.compiler as tc
    monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path / "pydynamo-cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.setattr(runtime, "_inflight", {})
    src = generated_module(_Layers(), [torch.randn(8, 32)])
    kernels = src.count("\ndef triton_")
    assert 0 < kernels < src.count("(stream, ")  # fewer kernels than launches
    made = []
    orig = tc.ASTSource.make_ir
    monkeypatch.setattr(tc.ASTSource, "make_ir", lambda self, *a, **k: (made.append(self.fn.__name__),
                                                                        orig(self, *a, **k))[1])
    with offline_launches(tmp_path, monkeypatch, src) as (first, target), \
            offline_launches(tmp_path, monkeypatch, _renamed(src, "_bw"), "other") as (second, _):
        got = [runtime.cached_compile(launch, None, target, {}) for launch in first + second]
        assert got == ["here"] * len(first) + ["shared"] * len(second)
        assert sorted(made) == sorted(launch.kernel.__name__ for launch in first)
        for a, b in zip(first, second):
            assert b.warm.name == a.kernel.__name__  # the cubin names the kernel compiled first
            assert b.warm.asm["cubin"] == a.warm.asm["cubin"] and a.warm.asm["cubin"][:4] == b"\x7fELF"
    (tmp_path / "src.py").write_text(src)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "empty-triton-cache"))
    code = SECOND_PROCESS.format(tests=os.path.dirname(__file__), tmp=str(tmp_path), src=str(tmp_path / "src.py"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == f"{['cached'] * len(first)} []", out.stderr[-3000:]


def test_the_compile_profile_tool_measures_offline_and_a_warm_process(tmp_path):
    """tools/triton_compile_profile.py without a GPU: the small GPT's inference compiles every
    kernel for sm_90 in a first process; a second process on the same caches generates nothing
    and finds every kernel in the kernel cache."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    import triton_compile_profile as tool
    cold = tool.run_child("gpt", "infer", "small", 90, str(tmp_path))
    warm = tool.run_child("gpt", "infer", "small", 90, str(tmp_path))
    assert cold["graphs"] == cold["generated"] == 1 and cold["kernels"] >= 3
    assert cold["compiled"] + cold["shared"] == cold["kernels"] and cold["compile_cpu"] > 0
    assert cold["stage_cubin"] > 0 and cold["first_step"] > cold["aot_autograd"] > 0
    assert warm["generated"] == warm["compiled"] == 0 and warm["cached"] == cold["kernels"] - cold["shared"]
    assert "| gpt infer cold | " in tool.row("gpt infer cold", cold)


def test_restride_keeps_a_result_that_differs_only_in_size_one_strides():
    """A size-1 dimension's stride addresses nothing: a fallback's result whose strides differ
    from the trace's only there is used as it is; any other difference is copied into the traced
    layout."""
    import torch
    from pydynamo.backends.triton.runtime import restride
    t = torch.randn(2, 16, 1, 1).as_strided((2, 16, 1, 1), (16, 1, 16, 16))
    assert restride(t, (2, 16, 1, 1), (16, 1, 1, 1)) is t
    u = torch.randn(2, 3, 4).transpose(1, 2).contiguous().transpose(1, 2)  # strides (12, 1, 3)
    r = restride(u, (2, 3, 4), (12, 4, 1))
    assert r is not u and r.stride() == (12, 4, 1) and torch.equal(r, u)
