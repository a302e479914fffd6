"""What generated modules need at run time, and the on-disk cache of generated source.

A graph's source is stored as ``<cache>/triton/g_<hash of source>.py`` and imported from there
(Triton reads kernel source from real files).  A second index, ``graph_<hash of ATen graph>``,
names the source made for a graph, so a later process skips lowering entirely; Triton's own
cache then skips the GPU compile.
"""
import hashlib
import importlib.util
import logging
import os
import sys

import torch

log = logging.getLogger("pydynamo.output_code")
_modules = {}


def cache_dir():
    root = os.environ.get("PYDYNAMO_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "pydynamo")
    path = os.path.join(root, "triton")
    os.makedirs(path, exist_ok=True)
    return path


def _write(path, text):
    """Atomic write: concurrent processes may race to fill the same entry."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
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
    """An ATen fallback's result with the strides our kernels were generated for."""
    if t.stride() == stride:
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    return out.copy_(t)


def precompile(launches):
    """Compile a graph's kernels in parallel threads when its wrapper is made (Triton's compiler
    releases the GIL for most of its work, and ptxas runs as a subprocess), rather than one by one
    as the first call reaches them; and, beside them, build the C launchers Triton would otherwise
    build (with gcc, one after another) at each kernel's first launch. Kernels that fail here are
    compiled by that call as usual."""
    if not launches or os.environ.get("TRITON_INTERPRET", "0") == "1":
        return
    try:
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime.driver import driver
        driver.active.get_current_device()  # initialize the driver once, in this thread
        shapes = sorted({(len(launch.dtypes), len(launch.constexprs)) for launch in launches})
        with ThreadPoolExecutor(min(len(launches) + len(shapes), os.cpu_count() or 1, 16)) as pool:
            builds = [pool.submit(build_launcher, n, k) for n, k in shapes]
            compiles = [pool.submit(launch.warmup) for launch in launches]
            errors = [f.exception() for f in compiles]
            built = [f.result() for f in builds]
        failed = [e for e in errors if e is not None]
        if failed:
            log.debug("precompile: %d of %d kernels left to their first call (%s)", len(failed), len(launches),
                      failed[0])
        if not all(built):
            log.debug("precompile: %d launchers left to the first call", built.count(False))
    except Exception as e:  # the first call compiles them
        log.debug("precompile skipped: %s", e)


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


class Launch:
    """One kernel launch site of a generated wrapper: ``launch(launch_stream(), *tensors)``.

    The first call goes through Triton's JIT, which compiles the kernel, specialized on which
    pointer arguments are 16-byte aligned. Later calls with the same alignments, on the same
    device, with no launch hooks installed, launch that compiled kernel directly: Triton's
    per-call argument binding and cache lookup (most of a launch's host time) are skipped.
    Anything else takes the JIT path again, so a launch is never specialized wrongly."""

    __slots__ = ("kernel", "grid", "num_warps", "dtypes", "constexprs", "compiled", "device", "aligned", "tail")

    def __init__(self, kernel, grid, num_warps, dtypes, **constexprs):
        self.kernel, self.grid, self.num_warps, self.constexprs = kernel, grid, num_warps, constexprs
        self.dtypes = dtypes  # of the pointer arguments, for warmup()
        self.compiled = None

    def warmup(self):
        """Compile for 16-byte aligned arguments of these dtypes (what a first call will
        normally need), so that the first call finds the kernel in Triton's cache."""
        self.kernel.warmup(*self.dtypes, grid=(self.grid,), num_warps=self.num_warps, **self.constexprs)

    def __call__(self, stream, *args):
        """Launch on ``args``; ``stream`` is launch_stream()'s answer for this wrapper call."""
        c = self.compiled
        if c is not None and stream is not None and stream[0] == self.device \
                and tuple(a.data_ptr() % 16 == 0 for a in args) == self.aligned:
            c.run(self.grid, 1, 1, stream[1], c.function, c.packed_metadata, None, None, None, *args, *self.tail)
            return
        c = self.kernel.run(*args, grid=(self.grid,), warmup=False, num_warps=self.num_warps, **self.constexprs)
        if self.compiled is None:
            self._remember(c, args)

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
