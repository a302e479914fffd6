"""What generated modules need at run time, and the on-disk cache of generated source.

A graph's source is stored as ``<cache>/triton/g_<hash of source>.py`` and imported from there
(Triton reads kernel source from real files).  A second index, ``graph_<hash of ATen graph>``,
names the source made for a graph, so a later process skips lowering entirely; Triton's own
cache then skips the GPU compile.
"""
import contextlib
import hashlib
import importlib.util
import logging
import os
import re
import sys
import threading
import time

import torch

log = logging.getLogger("pydynamo.output_code")
_modules = {}


# ---- Where a compile's time goes (PYDYNAMO_TRITON_TIMING=1; tools/triton_compile_profile.py) ----

timing_log = logging.getLogger("pydynamo.triton.timing")
# Also time each graph's first call (one more Python call per call while on): set by the
# variable, or by tools before compiling
TIMING = os.environ.get("PYDYNAMO_TRITON_TIMING", "0") == "1"
if TIMING and not timing_log.handlers:
    timing_log.addHandler(logging.StreamHandler())
    timing_log.setLevel(logging.INFO)

# Triton's compile stages, as its compilation listener names them ("frontend": Python AST to TTIR)
STAGES = ("frontend", "ttir", "ttgir", "llir", "ptx", "cubin")


class Timing:
    """Where one triton_backend call's time went, in seconds per phase, its graphs (forward and
    the backward compiled at the first backward) summed: setup (workers started, AOTAutograd
    imported: once per process), aot_autograd (tracing and partitioning,
    its calls of our compiler left out), graph_key, lowering, scheduling, codegen, import (write
    and import the module), make (launch sites made, compiles queued), wait (first calls blocked
    on compiles), load (compiled kernels loaded for launching), first_call (each graph's first
    call, wait and load included; timed only while TIMING is on). ``kernels``: one row per launch
    site's kernel (its name; where it came from: "worker" or "here" (compiled), "cached" (the
    kernel cache had it), "shared" (compiled for an identical kernel); wall seconds; Triton's stage
    seconds; whether Triton's cache had it); ``first``/``last``: when the first compile was queued
    and the last one done."""

    def __init__(self):
        self.phases = dict.fromkeys(("setup", "aot_autograd", "graph_key", "lowering", "scheduling", "codegen", "import",
                                     "make", "wait", "load", "first_call"), 0.0)
        self.kernels = []
        self.graphs = self.generated = 0
        self.first = self.last = None
        self.lock = threading.Lock()

    def add(self, phase, seconds):
        with self.lock:
            self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    @contextlib.contextmanager
    def phase(self, name):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t)

    def kernel(self, name, where, start, stages, hit):
        end = time.perf_counter()
        with self.lock:
            self.kernels.append((name, where, end - start, stages, hit))
            self.first = start if self.first is None else min(self.first, start)
            self.last = end if self.last is None else max(self.last, end)

    def summary(self):
        """A flat dict: the phases, then kernel counts and sums of the compiles' stages (CPU
        seconds over all workers and threads), the compile span, and their rows."""
        with self.lock:
            out = dict(self.phases, graphs=self.graphs, generated=self.generated)
            compiled = [k for k in self.kernels if k[1] in ("worker", "here") and not k[4]]
            out.update(kernels=len(self.kernels), compiled=len(compiled),
                       cached=sum(k[1] == "cached" or k[4] for k in self.kernels),
                       shared=sum(k[1] == "shared" for k in self.kernels),
                       in_workers=sum(k[1] == "worker" for k in compiled),
                       compile_cpu=sum(k[2] for k in compiled),
                       compile_span=(self.last - self.first) if self.kernels else 0.0)
            for stage in STAGES:
                out[f"stage_{stage}"] = sum(k[3].get(stage, 0.0) for k in compiled)
            out["kernel_rows"] = list(self.kernels)
            return out

    def report(self, label=""):
        s = self.summary()
        text = ", ".join(f"{k} {v:.3f}s" for k, v in s.items() if isinstance(v, float) and v)
        timing_log.info("pydynamo triton compile%s: %d graphs (%d generated), %d kernels (%d compiled, %d in "
                        "workers): %s", label, s["graphs"], s["generated"], s["kernels"], s["compiled"],
                        s["in_workers"], text)


_timings = []  # one per triton_backend call, since the last reset_timings()
_current = threading.local()


def begin_timing():
    _timings.append(Timing())
    return _timings[-1]


def compile_times(all=False):
    """The phase dict (Timing.summary) of the last triton_backend call, with its backward once
    compiled; ``all=True``: summed over every call since reset_timings()."""
    if not _timings:
        return {}
    if not all:
        return _timings[-1].summary()
    total = Timing()
    for t in _timings:
        for k, v in t.phases.items():
            total.add(k, v)
        total.kernels += t.kernels
        total.graphs += t.graphs
        total.generated += t.generated
        for v in (t.first, t.last):
            if v is not None:
                total.first = v if total.first is None else min(total.first, v)
                total.last = v if total.last is None else max(total.last, v)
    return total.summary()


def reset_timings():
    _timings.clear()


@contextlib.contextmanager
def timing_scope(timing):
    """precompile() inside books its kernels' compiles to ``timing``."""
    outer, _current.timing = getattr(_current, "timing", None), timing
    try:
        yield
    finally:
        _current.timing = outer


def timed_first_call(call, timing, label):
    """``call`` (a boxed graph callable) with its first call timed into ``timing``."""
    state = [True]

    def first(args):
        if not state[0]:
            return call(args)
        state[0] = False
        t = time.perf_counter()
        try:
            return call(args)
        finally:
            timing.add("first_call", time.perf_counter() - t)
            if os.environ.get("PYDYNAMO_TRITON_TIMING", "0") == "1":
                timing.report(f" ({label}, after its first call)")
    first._boxed_call = True
    return first


def _stage_times(times):
    """Triton's CompileTimes (microseconds) -> {stage: seconds}."""
    out = {"frontend": times.ir_initialization / 1e6}
    out.update((stage, us / 1e6) for stage, us in times.lowering_stages)
    return out


def _listen(src, metadata, metadata_group, times, cache_hit):
    """Triton's compilation listener: the stages of a compile in this thread, for its Timing."""
    sink = getattr(_current, "stages", None)
    if sink is not None:
        sink.update(_stage_times(times), hit=cache_hit)


def listen_to_triton():
    from triton import knobs
    if knobs.compilation.listener is None:
        knobs.compilation.listener = _listen


def cache_dir():
    root = os.environ.get("PYDYNAMO_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "pydynamo")
    path = os.path.join(root, "triton")
    os.makedirs(path, exist_ok=True)
    return path


def _write(path, data):
    """Atomic write (of text or bytes): concurrent processes may race to fill the same entry."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    os.replace(tmp, path)


def lookup_graph(key):
    """Source previously generated for the graph with this key, or None."""
    index = os.path.join(cache_dir(), f"graph_{key}")
    try:
        with open(index) as f:
            path = os.path.join(cache_dir(), f.read().strip())
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def load_source(src, key=None):
    """Import the module for ``src`` from the cache (writing it first if new)."""
    h = hashlib.sha256(src.encode()).hexdigest()[:20]
    name = f"g_{h}.py"
    path = os.path.join(cache_dir(), name)
    log.info("pydynamo triton output code: %s\n%s", path, src)
    if h in _modules:
        return _modules[h]
    if not os.path.exists(path):
        _write(path, src)
    if key is not None:
        _write(os.path.join(cache_dir(), f"graph_{key}"), name)
    spec = importlib.util.spec_from_file_location(f"pydynamo_triton_{h}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    _modules[h] = mod
    return mod


def restride(t, size, stride):
    """An ATen fallback's result with the strides our kernels were generated for. The stride of
    a size-1 dimension is never used to address memory (its index is always 0), so a result that
    differs only there is taken as it is: cuDNN gives a 1 x 1 map (squeeze-excitation convs) either
    stride, and a copy would cost a launch and an allocation per call."""
    got = t.stride()
    if got == stride or all(a == b or n == 1 for n, a, b in zip(size, got, stride)):
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    return out.copy_(t)


def index_put_accumulate(base, indices, values, in_place):
    """``index_put(base, indices, values, accumulate=True)`` (``index_put_`` when ``in_place``).
    Where it indexes dim 0 with one integer tensor (an embedding's gradient), through
    ``index_add_``: atomic adds, where ATen's index_put sorts the indices (long on the host, and
    on the GPU). Negative indices count from the end, as index_put's do; out-of-range ones still
    fail in ATen."""
    idx = indices[0] if len(indices) == 1 else None
    if idx is None or idx.dtype not in (torch.int64, torch.int32) or base.dim() == 0 \
            or values.dtype != base.dtype or values.shape != idx.shape + base.shape[1:] \
            or idx.device != base.device or values.device != base.device \
            or torch.are_deterministic_algorithms_enabled():
        op = torch.ops.aten.index_put_ if in_place else torch.ops.aten.index_put
        return op(base, indices, values, True)
    flat = idx.reshape(-1)
    flat = torch.where(flat < 0, flat + base.shape[0], flat)
    out = base if in_place else base.clone()
    return out.index_add_(0, flat, values.reshape((flat.numel(),) + base.shape[1:]))


_pool = None


def _compile_pool():
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor

        from .compile_worker import usable_cpus
        _pool = ThreadPoolExecutor(min(usable_cpus(), 16), thread_name_prefix="pydynamo-compile")
    return _pool


_deferred = threading.local()


@contextlib.contextmanager
def deferred_precompile():
    """Inside, precompile() only queues its launches; on leaving, they are all submitted in the
    order they came (a forward's kernels before its backward's). Used where both graphs are
    generated at once: the backward's codegen then does not share the GIL with the forward's
    compiles."""
    outer, _deferred.launches = getattr(_deferred, "launches", None), []
    try:
        yield
    finally:
        launches, _deferred.launches = _deferred.launches, outer
        precompile(launches)  # into the outer queue, if any


def precompile(launches):
    """Start compiling a graph's kernels when its wrapper is made, in compile worker processes
    (compile_worker.py) or, until they are ready, in threads here, and return at once: the
    compiles run beside the rest of the compile (AOTAutograd's backward graph, say) and each
    launch site waits for its own kernel at its first call (Launch._settle), which then loads
    it into torch's prebuilt CUDA launcher (static_launcher()), so no launch needs the C launcher
    Triton builds with gcc. Where torch has none, those launchers are built here too. Kernels that
    fail here are compiled by their first call as usual."""
    timing = getattr(_current, "timing", None)
    # a site with choices (Launch.with_choices) is compiled as each of them, its own config first
    launches = [c for launch in launches for c in (launch.choices[0] if getattr(launch, "choices", None)
                                                   else [launch])]
    for launch in launches if timing is not None else ():
        launch.timing = timing
    queue = getattr(_deferred, "launches", None)
    if queue is not None:
        queue.extend(launches)
        return
    if not launches or os.environ.get("TRITON_INTERPRET", "0") == "1":
        return
    try:
        from triton.runtime.driver import driver
        driver.active.get_current_device()  # initialize the driver once, in this thread
        listen_to_triton()
        from . import compile_worker
        target = driver.active.get_current_target()
        workers = compile_worker.workers(target)
        static = static_launcher()
        pool = _compile_pool()
        builds = {} if static else {shape: pool.submit(build_launcher, *shape) for shape in
                                    sorted({(len(launch.dtypes), len(launch.constexprs)) for launch in launches})}
        for launch in launches:
            launch.pending = (pool.submit(_compile, launch, workers, target, static),
                              builds.get((len(launch.dtypes), len(launch.constexprs))), static)
    except Exception as e:  # the first call compiles them
        log.debug("precompile skipped: %s", e)


def _compile(launch, workers, target, static):
    """Compile ``launch``'s kernel (or find it compiled) and leave it in ``launch.warm``. With
    torch's static launcher, through this backend's kernel cache (cached_compile); without it,
    Triton's JIT will launch it, so into Triton's own cache: in a worker process when one is ready
    (warmup then finds it there), else here."""
    start, stages, where = time.perf_counter(), {}, "failed"
    try:
        if static is not None:
            where = cached_compile(launch, workers, target, stages)
            return
        where = "here"
        if workers is not None:
            from .compile_worker import task
            try:
                work = task(launch, target)
            except Exception as e:  # a Triton whose JIT this does not know: compile here
                log.debug("%s: not compiled in a worker: %s", getattr(launch.kernel, "__name__", launch.kernel), e)
            else:
                if workers.compile(work, stages):
                    where = "worker"
        _current.stages = {} if where == "here" else None
        try:
            launch.warmup()
        finally:
            stages, _current.stages = _current.stages or stages, None
    except Exception as e:
        stages["error"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        if launch.timing is not None:
            launch.timing.kernel(getattr(launch.kernel, "__name__", "?"), where, start, stages,
                                 stages.pop("hit", False))


# ---- The kernel cache: compiled kernels on disk, keyed by what makes their binary ----

_inflight = {}  # kernel cache entry (path) -> Event, set once its compile (in this process) is over
_inflight_lock = threading.Lock()
_headers = {}   # generated module's path -> the helper functions its kernels may call


def kernel_dir():
    path = os.path.join(cache_dir(), "kernels")
    os.makedirs(path, exist_ok=True)
    return path


def _helpers(fn):
    """The part of the module of JITFunction ``fn`` that its kernel may call besides itself: in a
    generated module, the helpers above the first kernel (less the first line, which counts the
    kernels); elsewhere, the whole file."""
    path = sys.modules[fn.fn.__module__].__file__
    if path not in _headers:
        with open(path) as f:
            text = f.read()
        at = text.find("\n# computes ")
        _headers[path] = text if at < 0 else text[text.find("\n") + 1:at]
    return _headers[path]


def kernel_key(fn, spec, target):
    """What the binary of JITFunction ``fn`` compiled for ``spec`` (compile_worker.spec: signature,
    constexprs, alignment attributes, options with num_warps, num_stages, debug...) and ``target``
    (backend, arch, warp size) depends on: its source with its name left out (identical kernels
    of any graph share one entry), the helpers it may call, Triton's version and its backend's
    (ptxas's version), and the environment variables Triton's own cache key takes."""
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    target = tuple(target)
    parts = [re.sub(r"def \w+\(", "def KERNEL(", fn.src, count=1), _helpers(fn), repr(spec), repr(target),
             triton.__version__, make_backend(GPUTarget(*target)).hash(),
             repr(sorted(get_cache_invalidating_env_vars().items()))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def load_cached(key, fn, spec):
    """The kernel cache's entry ``key`` as Triton's CompiledKernel of ``fn``, or None. Its cubin may
    name the kernel otherwise than ``fn`` (an identical kernel compiled first): ``.name`` says."""
    from triton.compiler import ASTSource
    from triton.compiler.compiler import CompiledKernel
    base = os.path.join(kernel_dir(), key)
    if not os.path.exists(base + ".json"):
        return None
    c = CompiledKernel(ASTSource(fn, *spec[:3]), {"kernel.json": base + ".json", "kernel.cubin": base + ".cubin"},
                       key)
    c._cubin_path = base + ".cubin"
    return c


def cached_compile(launch, workers, target, stages):
    """Leave ``launch``'s compiled kernel in ``launch.warm``: from the kernel cache, or compiled
    into it (in a worker process when one is ready, else here) once per process for all the
    launch sites of one key. Returns where it came from: "cached", "shared" (compiled for another
    site), "worker" or "here"."""
    from .compile_worker import spec as spec_of, store_compiled, task
    spec = spec_of(launch)
    key = kernel_key(launch.kernel, spec, (target.backend, target.arch, target.warp_size))
    base = os.path.join(kernel_dir(), key)
    with _inflight_lock:
        done = _inflight.get(base)
        if done is None:
            _inflight[base] = threading.Event()
    if done is not None:
        done.wait()
        where = "shared"
    else:
        try:
            where = "cached" if os.path.exists(base + ".json") else "here"
            if where == "here" and workers is not None and workers.compile(task(launch, target, base), stages):
                where = "worker"
            if where == "here":
                import triton
                from triton.compiler import ASTSource
                _current.stages = stages
                try:
                    c = triton.compile(ASTSource(launch.kernel, *spec[:3]), target=target,
                                       options=spec[3])
                finally:
                    _current.stages = None
                store_compiled(c.metadata_group, base)
        finally:
            _inflight[base].set()
    launch.warm = load_cached(key, launch.kernel, spec)
    if launch.warm is None:
        raise RuntimeError(f"kernel {key} is not in the kernel cache")
    return where


def static_launcher():
    """torch's prebuilt launcher for Triton's CUDA kernels (the one Inductor uses: a C function
    that takes the cubin's handle and the arguments), as its Python class; None where this torch
    has none or PYDYNAMO_TRITON_STATIC_LAUNCH=0."""
    if os.environ.get("PYDYNAMO_TRITON_STATIC_LAUNCH", "1") == "0" or not hasattr(torch._C, "_StaticCudaLauncher"):
        return None
    for name in ("torch._inductor.runtime.static_triton_launcher", "torch._inductor.runtime.static_cuda_launcher"):
        try:
            return importlib.import_module(name).StaticallyLaunchedCudaKernel
        except (ImportError, AttributeError):
            pass
    return None


def launcher_source(pointers, constexprs):
    """The C source of Triton's CUDA launcher for a kernel taking ``pointers`` tensors then
    ``constexprs`` block sizes (what ours take). It depends only on that shape: not on the
    pointers' dtypes nor the block sizes' values."""
    from triton.backends.nvidia import driver as nv
    signature = {i: "*fp32" for i in range(pointers)}
    signature.update({pointers + j: "constexpr" for j in range(constexprs)})
    return nv.make_launcher({}, signature, None)


def build_launcher(pointers, constexprs):
    """Build (or find in Triton's cache) the launcher module that Triton's first launch of such a
    kernel will load. True when built; False when this Triton builds its launchers otherwise."""
    try:
        from triton.backends.nvidia import driver as nv
        from triton.runtime.build import compile_module_from_src
        compile_module_from_src(src=launcher_source(pointers, constexprs), name="__triton_launcher",
                                library_dirs=nv.library_dirs(), include_dirs=nv.include_dirs,
                                libraries=nv.libraries)
        return True
    except Exception as e:
        log.debug("launcher for %d pointers, %d constexprs not built ahead: %s", pointers, constexprs, e)
        return False


def _idle(hook):
    """Whether a Triton launch hook does nothing (None, or an empty HookChain in Triton >= 3.5)."""
    return hook is None or getattr(hook, "calls", None) == []


_direct = None  # (triton driver, triton runtime knobs) once some Launch can launch directly


def launch_stream():
    """What a wrapper call passes to its launches: (device, stream) when compiled kernels may be
    launched directly this call (no launch hooks installed), else None (the JIT path)."""
    if _direct is None:
        return None
    driver, knobs = _direct
    if not (_idle(knobs.launch_enter_hook) and _idle(knobs.launch_exit_hook)):
        return None
    active = driver.active
    device = active.get_current_device()
    return device, active.get_current_stream(device)


# ---- A kernel's configuration chosen by measuring it (Launch.with_choices) ----

_settle_lock = threading.RLock()  # first calls of launch sites (Launch._settle)
MEASURE = None  # tests: measure(launch, args) -> seconds, where the interpreter has no clock worth reading


def tuning():
    """Whether wrappers offer kernels' other configurations to measure (wrapper._choices):
    ``PYDYNAMO_TRITON_TUNE``, on by default, off under the interpreter (nothing to measure) and
    under ``torch.use_deterministic_algorithms`` (configurations sum in different orders, and
    which one wins a measurement varies from run to run)."""
    default = "0" if os.environ.get("TRITON_INTERPRET", "0") == "1" else "1"
    return os.environ.get("PYDYNAMO_TRITON_TUNE", default) == "1" and not torch.are_deterministic_algorithms_enabled()


def _tune_path(key, args):
    """The disk cache's entry for the choices of ``key`` (wrapper._choices: their kernels'
    source and configurations) on this kind of device, for arguments of these dtypes."""
    import triton
    device = torch.cuda.get_device_name(args[0].device) if args[0].is_cuda else str(args[0].device)
    parts = [key, device, triton.__version__, repr([str(a.dtype) for a in args])]
    return os.path.join(cache_dir(), "tune", hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32])


def _tune(choices, key, args):
    """Index of the fastest of ``choices`` (settled Launches of one kernel) on ``args``: from the
    disk cache, else measured now and stored there. Running a choice rewrites the kernel's
    outputs with the same values (wrapper._choices offers only such kernels). 0, the heuristic's
    own, where nothing can be measured: not CUDA, or inside a CUDA graph capture."""
    path = _tune_path(key, args)
    try:
        with open(path) as f:
            best = int(f.read())
        if 0 <= best < len(choices):
            return best
    except (OSError, ValueError):
        pass
    measure = MEASURE
    if measure is None:
        if not all(a.is_cuda for a in args) or torch.cuda.is_current_stream_capturing():
            return 0
        measure = _measure
    try:
        times = [measure(c, args) for c in choices]
    except Exception as e:  # the call goes on with the heuristic's configuration
        log.warning("triton backend: configurations of %s not measured (%s: %s)",
                    getattr(choices[0].kernel, "__name__", "a kernel"), type(e).__name__, e)
        return 0
    best = min(range(len(choices)), key=times.__getitem__)
    log.debug("%s: configuration %d of %s (%s)", getattr(choices[0].kernel, "__name__", "?"), best,
              [(c.constexprs, c.num_warps) for c in choices], ", ".join(f"{t * 1e6:.1f} us" for t in times))
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write(path, str(best))
    except OSError:
        pass
    return best


def _measure(launch, args):
    """Seconds of GPU time per launch of ``launch`` (settled: its calls launch as a wrapper's
    later calls do) on ``args``: about a millisecond of launches back to back, after one to
    load it."""
    stream = launch_stream()
    launch(stream, *args)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    launch(stream, *args)
    end.record()
    end.synchronize()
    reps = max(3, min(100, int(1.0 / max(start.elapsed_time(end), 1e-3))))
    start.record()
    for _ in range(reps):
        launch(stream, *args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps / 1e3


class Launch:
    """One kernel launch site of a generated wrapper: ``launch(launch_stream(), *tensors)``.

    precompile() compiles the kernel for 16-byte aligned pointers and loads it into torch's static
    launcher: calls with aligned pointers, on that device, with no launch hooks installed, launch
    it with one C call. Otherwise a call goes through Triton's JIT, which compiles the kernel,
    specialized on which pointer arguments are 16-byte aligned; later calls with the same
    alignments launch that compiled kernel directly: Triton's per-call argument binding and cache
    lookup (most of a launch's host time) are skipped. Anything else takes the JIT path again, so
    a launch is never specialized wrongly."""

    __slots__ = ("kernel", "grid", "num_warps", "dtypes", "constexprs", "compiled", "device", "aligned", "tail",
                 "warm", "static", "options", "pending", "timing", "choices")

    def __init__(self, kernel, grid, num_warps, dtypes, **constexprs):
        self.kernel, self.grid, self.num_warps, self.constexprs = kernel, grid, num_warps, constexprs
        # a kernel that checks its indices is compiled with debug=True, which keeps its asserts;
        # Triton's int32 overflow checks, which debug would also turn on, stay off
        self.options = {"sanitize_overflow": False} if getattr(kernel, "debug", None) else {}
        self.dtypes = dtypes  # of the pointer arguments, for warmup()
        self.compiled = self.warm = self.static = self.pending = self.timing = self.choices = None

    def with_choices(self, choices, key):
        """This site, launching the fastest of ``choices`` (Launches of one kernel under other
        configurations, this one's first; the same parameters): measured on the first call's
        own arguments, or read from the disk cache (entry ``key``) where measured before (_tune)."""
        self.choices = (list(choices), key)
        return self

    def warmup(self):
        """Compile for 16-byte aligned arguments of these dtypes (what a first call will
        normally need), so that the first call finds the kernel in Triton's cache."""
        self.warm = self.kernel.warmup(*self.dtypes, grid=(self.grid,), num_warps=self.num_warps, **self.constexprs,
                                       **self.options)

    def load_static(self, cls):
        """Load warmup()'s cubin into torch's static launcher ``cls``: calls whose pointers are all
        16-byte aligned then launch it with one C call. True when loaded."""
        global _direct
        try:
            from triton import knobs
            from triton.runtime.driver import driver
            c = self.warm
            if getattr(c, "_cubin_path", None) is None:  # (one from Triton's JIT)
                path = os.path.join(cache_dir(), "cubin", f"{c.hash}.cubin")
                if not os.path.exists(path):
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    _write(path, c.asm["cubin"])
                c._cubin_path = path
            k = cls(c)
            k.name = c.name  # the kernel's name in the cubin (one compiled for an identical kernel has its own)
            device = driver.active.get_current_device()
            k.load_kernel(device)
            # scratch pointers this Triton adds to every kernel's parameters (always null for ours)
            extra = tuple(None for flag in ("has_global_scratch", "has_profile_scratch") if getattr(k, flag, False))
            if k.arg_tys != "O" * len(self.dtypes):
                return False  # parameters other than our pointers: leave it to Triton
            self.device = device  # (before static, which a launch in another thread reads first)
            self.static = (torch._C._StaticCudaLauncher._launch_kernel, k.function, k.num_warps, k.shared,
                           k.arg_tys + "O" * len(extra), extra, k)
            _direct = driver, knobs.runtime
            return True
        except Exception as e:
            log.debug("%s: not launched statically: %s", getattr(self.kernel, "__name__", self.kernel), e)
            self.static = None
            return False

    def __call__(self, stream, *args):
        """Launch on ``args``; ``stream`` is launch_stream()'s answer for this wrapper call."""
        s = self.static
        if s is not None and stream is None:  # (a stream the call took before the first kernel was loaded)
            stream = launch_stream()
        if s is not None and stream is not None and stream[0] == self.device:
            for a in args:
                if a.data_ptr() & 15:
                    break
            else:
                if self._static(s, stream, args):
                    return
        c = self.compiled
        if c is not None and stream is not None and stream[0] == self.device \
                and tuple(a.data_ptr() % 16 == 0 for a in args) == self.aligned:
            c.run(self.grid, 1, 1, stream[1], c.function, c.packed_metadata, None, None, None, *args, *self.tail)
            return
        if self.pending is not None or self.choices is not None:  # the first call: precompile's
            self._settle(args)  # work for this site is done first, its configuration chosen
            self(launch_stream(), *args)
            return
        c = self.kernel.run(*args, grid=(self.grid,), warmup=False, num_warps=self.num_warps, **self.constexprs,
                            **self.options)
        if self.compiled is None:
            self._remember(c, args)

    def _settle(self, args=None):
        """Wait for precompile's compile of this kernel (and its C launcher), then load it into
        the static launcher; with choices, settle each and take the fastest's place on ``args``
        (_tune). A compile that failed is left to Triton's JIT. Other threads' first calls wait
        here (the lock): the site's fields change under them only before any launch reads them."""
        with _settle_lock:
            if self.choices is not None:
                choices, key = self.choices
                for c in choices:
                    c._settle()
                if args is None:  # (only waiting for the compiles: the first call chooses)
                    return
                self._adopt(choices[_tune(choices, key, args)])
                self.choices = None  # (last: other threads' calls then find the chosen kernel)
                return
            pending, self.pending = self.pending, None
            if pending is None:  # another thread's first call got here first
                return
            warm, build, static = pending
            t = time.perf_counter()
            if build is not None:
                build.result()
            error = warm.exception()
            t2 = time.perf_counter()
            if error is not None:
                log.debug("%s: compiled at its first launch (ahead: %s)", getattr(self.kernel, "__name__", self.kernel),
                          error)
            elif static is not None:
                self.load_static(static)
            if self.timing is not None:
                self.timing.add("wait", t2 - t)
                self.timing.add("load", time.perf_counter() - t2)

    def _adopt(self, other):
        """Become ``other`` (a settled choice): what it launches, then how (``static`` last, as
        __call__ reads it first)."""
        self.kernel, self.grid, self.num_warps, self.constexprs, self.options = \
            other.kernel, other.grid, other.num_warps, other.constexprs, other.options
        self.warm, self.pending = other.warm, None
        if other.static is not None:
            self.device = other.device
        if other.compiled is not None:
            self.device, self.aligned, self.tail = other.device, other.aligned, other.tail
        self.compiled, self.static = other.compiled, other.static

    def owned(self, stream, *args):
        """A launch whose arguments are all buffers the wrapper allocated (offset 0, so 16-byte
        aligned): no alignment check."""
        s = self.static
        if s is None or stream is None or stream[0] != self.device or not self._static(s, stream, args):
            self(stream, *args)

    def _static(self, s, stream, args):
        """Launch through the static launcher; on its refusal (a limit of this torch's launcher),
        False, and this site uses Triton's JIT path from now on."""
        try:
            s[0](s[1], self.grid, 1, 1, s[2], s[3], s[4], args + s[5], stream[1])
            return True
        except Exception as e:
            log.debug("%s: static launch refused (%s); launching through Triton", self.kernel, e)
            self.static = None
            return False

    def _remember(self, c, args):
        global _direct
        try:
            from triton import knobs
            from triton.runtime.driver import driver
            names = self.kernel.arg_names
            if c is None or not hasattr(c, "packed_metadata") or len(names) != len(args) + len(self.constexprs):
                return  # the interpreter, or a Triton this launcher does not know
            self.tail = tuple(self.constexprs[n] for n in names[len(args):])
            _direct = driver, knobs.runtime
            self.device = driver.active.get_current_device()
            self.aligned = tuple(a.data_ptr() % 16 == 0 for a in args)
            c.run  # loads the binary now
            self.compiled = c
        except Exception:  # keep the JIT path
            self.compiled = None
