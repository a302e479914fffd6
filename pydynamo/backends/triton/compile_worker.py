"""Compile worker processes: Triton's compiler in processes of their own, so that a graph's
kernels compile in parallel without sharing the parent's GIL. (In threads, Triton's Python front
end serializes them: on the H100 machine each of a GPT step's 14 forward kernels took 0.7-1.0 s
of wall time in 16 threads, against 0.1-0.36 s alone.)

A worker runs this file by its path (``python -c BOOT <this file> <target>``), so it never imports
torch nor pydynamo: it starts in a fraction of a second. A task names a generated module's file
and one kernel in it, with what Triton's JIT would compile it for at the kernel's first launch
(signature, constexprs, alignment attributes, options: computed in the parent by the JIT's own
argument binder, see spec()). The worker executes the module's kernel part (everything above
WRAPPER_MARK, which imports only triton) under the module's own file name and module name, so
the kernel's cache key is the parent's, and compiles it with ``triton.compile`` for the parent's
GPU target, never touching a GPU. The result lands in Triton's on-disk cache, where the parent's
own ``warmup`` of the same kernel then finds it. A worker links kernels that call libdevice
against a small copy of it (Libdevice): the same cubin, sooner. What a worker cannot do, the
parent does itself: workers only ever save time.

Workers start when the triton backend is first entered with CUDA inputs (so they are ready by the
time AOTAutograd hands over a graph), take tasks once ready (until then kernels compile in the
parent's threads), and exit when the parent closes their stdin (at its exit). There are as many
as the parent may use CPUs, at most 16; PYDYNAMO_TRITON_COMPILE_WORKERS=N sets the count, 0 turns
them off."""
import logging
import os
import pickle
import queue
import re
import struct
import subprocess
import sys
import threading
import time

log = logging.getLogger(__name__)

# The line of a generated module that ends its kernel part: above it, only triton is imported
WRAPPER_MARK = "# ---- The wrapper"

# A worker's command line: load this file as a module, without its package (whose __init__
# imports torch), and run main()
BOOT = ("import importlib.util as u, sys; s = u.spec_from_file_location('pydynamo_compile_worker', sys.argv[1]); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); m.main(sys.argv[2:])")


def _send(f, obj):
    data = pickle.dumps(obj)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _recv(f):
    head = f.read(8)
    if len(head) < 8:
        raise EOFError("compile worker closed")
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(f.read(n))


class Workers:
    """A set of compile worker processes; ``compile(task)`` runs a task on an idle one."""

    def __init__(self, count, target=None):
        self.count, self.target = count, target
        self.note = ""  # what the last worker to start said of its priming
        self.said = ""  # and what the last task's worker said of it
        self.idle = queue.Queue()
        self.ready = 0
        self.started, self.ready_after = time.perf_counter(), []  # seconds from start to each one's ready
        self.lock = threading.Lock()
        threading.Thread(target=self._start_all, name="pydynamo-compile-workers", daemon=True).start()

    def _start_all(self):
        procs = []
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # workers compile for real
        target = [] if self.target is None else [",".join(map(str, self.target))]
        for _ in range(self.count):
            try:
                procs.append(subprocess.Popen([sys.executable, "-c", BOOT, os.path.abspath(__file__), *target],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.DEVNULL, env=env))
            except OSError as e:
                log.debug("compile worker not started: %s", e)
        for p in procs:
            try:
                answer, self.note = _recv(p.stdout)
                if answer == "ready":
                    with self.lock:
                        self.ready += 1
                        self.ready_after.append(time.perf_counter() - self.started)
                    self.idle.put(p)
            except Exception as e:
                log.debug("compile worker failed to start: %s", e)
                p.kill()

    def compile(self, task, stages=None):
        """Run ``task`` in a worker: True when it compiled there; False when no worker is ready
        yet (or one failed): then the caller compiles. ``stages``, a dict, gets the seconds of
        Triton's compile stages in the worker (and "hit": whether its cache had the kernel)."""
        with self.lock:
            if not self.ready:
                return False
        p = self.idle.get()
        try:
            _send(p.stdin, task)
            ok, message, times = _recv(p.stdout)
        except Exception as e:  # a dead worker: leave it out
            log.debug("compile worker lost: %s", e)
            with self.lock:
                self.ready -= 1
            p.kill()
            return False
        self.idle.put(p)
        self.said = message
        if stages is not None:
            stages.update(times)
        if not ok:
            log.debug("compile worker: %s", message)
        return ok


_workers = None


def usable_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_count():
    """PYDYNAMO_TRITON_COMPILE_WORKERS, else the CPUs this process may use, at most 16."""
    env = os.environ.get("PYDYNAMO_TRITON_COMPILE_WORKERS")
    if env is not None:
        return int(env)
    return min(usable_cpus(), 16)


def workers(target):
    """This process's workers, started on first use for ``target`` (a triton GPUTarget); None
    when there are to be none."""
    global _workers
    if _workers is None or _workers[0] != os.getpid():  # (a forked child must not share its parent's pipes)
        count = default_count()
        _workers = os.getpid(), Workers(count, (target.backend, target.arch, target.warp_size)) if count > 0 else None
    return _workers[1]


def spec(launch):
    """What Triton's JIT compiles ``launch``'s kernel for at a first launch with 16-byte aligned
    pointers: (signature, constexprs, attrs, options as a dict). Computed as the JIT's own run()
    does (its argument binder on the pointer dtypes, then its packing), so the worker's compile
    has the very cache key that the parent's warmup() looks up."""
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import MockTensor
    fn = launch.kernel
    kwargs = dict(num_warps=launch.num_warps, **launch.constexprs, **launch.options)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    _, _, _, backend, binder = fn.device_caches[driver.active.get_current_device()]
    bound, specialization, options = binder(*map(MockTensor.wrap_dtype, launch.dtypes), **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return signature, constexprs, attrs, dict(options.__dict__)


def task(launch, target, store=None):
    """What a worker needs to compile ``launch``'s kernel: its module's file and name, the kernel's
    name, spec(), the GPU target, Triton's settings from the environment (the cache directory
    above all), and where to store the result in the parent's kernel cache (store_compiled)."""
    fn = launch.kernel
    module = sys.modules[fn.fn.__module__]
    env = {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}
    return (module.__file__, module.__name__, fn.__name__, *spec(launch),
            (target.backend, target.arch, target.warp_size), env, store)


def store_compiled(metadata_group, base):
    """Copy a compiled kernel's metadata and cubin (from Triton's cache) to ``base``.json and
    ``base``.cubin: an entry of the parent's kernel cache (runtime.cached_compile). The cubin
    first, and each file whole (renamed into place): an entry with its .json is complete."""
    for ext in ("cubin", "json"):
        src = next(p for name, p in metadata_group.items() if name.endswith("." + ext))
        with open(src, "rb") as f:
            data = f.read()
        tmp = f"{base}.{ext}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, f"{base}.{ext}")


# ---- in the worker ----

def kernels(path, name):
    """The kernel part of the generated module at ``path`` (above WRAPPER_MARK), executed as
    module ``name`` from that file (the kernels' source lines, hence their cache keys, are the
    parent's)."""
    with open(path) as f:
        text = f.read()
    cut = text.find("\n" + WRAPPER_MARK)
    namespace = {"__name__": name, "__file__": path}
    exec(compile(text if cut < 0 else text[:cut + 1], path, "exec"), namespace)
    return namespace


def _run(args, modules):
    path, name, kernel, signature, constexprs, attrs, options, target, env, *store = args
    for k in [k for k in os.environ if k.startswith("TRITON_") and k not in env]:
        del os.environ[k]
    os.environ.update(env)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    if path not in modules:
        modules[path] = kernels(path, name)
    fn = modules[path][kernel]
    from triton import knobs
    stages = {}

    def listen(src, metadata, metadata_group, times, cache_hit):
        stages["frontend"] = times.ir_initialization / 1e6
        stages.update((stage, us / 1e6) for stage, us in times.lowering_stages)
        stages["hit"] = cache_hit
    knobs.compilation.listener = listen
    try:
        compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget(*target),
                                  options=options)
    finally:
        knobs.compilation.listener = None
    if store and store[0]:
        store_compiled(compiled.metadata_group, store[0])
    return stages


# Compiled once by each worker before it says it is ready, so that its first task does not pay
# for what a first compile loads (LLVM, ptxas's version): 0.5 s or more. It calls the libdevice
# functions our kernels use, and its module, as linked with libdevice, becomes the worker's small
# libdevice (see Libdevice).
PRIMER = """
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def primer(x_ptr, y_ptr, z_ptr, XBLOCK: tl.constexpr):
    i = tl.arange(0, XBLOCK)
    x = tl.load(x_ptr + i)
    z = tl.load(z_ptr + i)
    y = (tl.erf(x) + tl.log(x) + libdevice.tanh(x) + libdevice.log1p(x) + libdevice.expm1(x)
         + libdevice.pow(x, x) + libdevice.trunc(x) + libdevice.nearbyint(x) + tl.sin(x) + tl.cos(x)
         + tl.log2(x) + tl.exp(x) + tl.exp2(x))
    w = (tl.erf(z) + tl.log(z) + libdevice.tanh(z) + libdevice.log1p(z) + libdevice.expm1(z)
         + libdevice.pow(z, z) + tl.rsqrt(z) + tl.sqrt(z) + tl.exp(z) + tl.sin(z) + tl.cos(z))
    tl.device_assert(y == y)
    tl.store(y_ptr + i, y + w.to(tl.float32))
"""


class Libdevice:
    """A small libdevice: the functions the primer calls (with the helpers and constants they
    use), cut from its module as Triton linked it with the full libdevice.10.bc, as LLVM text.

    Linking the full library parses all of its bitcode: 35-50 ms of each kernel compile that needs
    one of its functions (erf for GELU, log for log_softmax). While installed (in a worker only:
    never in a user's process), a kernel whose libdevice functions are all in the small one links
    that instead. LLVM links only the functions a module needs, and these are the same functions,
    so the kernel compiles to the same PTX and cubin, byte for byte (tests check this for every
    kernel of the benchmark's workloads), under the same cache key. Any other kernel, and any
    failure, links the full library as before."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "libdevice_subset.ll")
        self.functions = set()
        self.captured = None
        self.linked = ""  # how the last compile linked libdevice: "", "small" or "whole"

    def capture(self, link):
        """A link_extern_libs that links as ``link`` does and keeps the linked module's text."""
        def capturing(module, paths):
            link(module, paths)
            self.captured = str(module)
        return capturing

    def write(self):
        """Cut the captured module down to libdevice's part and write it: every function but the
        kernel (libdevice's entry points made external again), the globals, types, declarations and
        attribute groups, and the metadata those functions reference."""
        out, keep = [], False
        for line in self.captured.splitlines():
            if line.startswith("define "):
                keep = "ptx_kernel" not in line
                if keep and "@__nv_" in line:
                    line = line.replace("define internal ", "define ", 1)
                    self.functions.add(re.search(r"@(__nv_\w+)", line).group(1))
            if keep:
                out.append(line)
                keep = line != "}"
            elif line.startswith(("target ", "declare ", "attributes ", "%", "$")) or \
                    (line.startswith("@") and not line.startswith("@global_smem")):
                out.append(line)
        nodes = {line.split(" = ", 1)[0]: line for line in self.captured.splitlines()
                 if line.startswith("!") and " = " in line}
        wanted, todo = set(), set(re.findall(r"!\d+", "\n".join(out)))
        while todo:
            node = todo.pop()
            if node not in wanted:
                wanted.add(node)
                todo |= set(re.findall(r"!\d+", nodes[node].split(" = ", 1)[1]))
        out += [nodes[n] for n in sorted(wanted, key=lambda n: int(n[1:]))]
        with open(self.path, "w") as f:
            f.write("\n".join(out) + "\n")

    def install(self):
        """Route Triton's libdevice links in this process through the small library."""
        from triton.backends.nvidia import compiler
        full = compiler.llvm.link_extern_libs

        def link(module, paths):
            try:
                if len(paths) == 1 and os.path.basename(paths[0]).startswith("libdevice"):
                    needed = {f.name for f in module.get_functions()
                              if f.is_declaration() and f.name.startswith("__nv_")}
                    if needed <= self.functions:
                        full(module, [self.path])
                        self.linked = "small"
                        return
            except Exception:  # (a failed parse links nothing)
                pass
            full(module, paths)
            self.linked = "whole"
        compiler.llvm.link_extern_libs = link


def _prime(target, directory):
    """Compile the primer for ``target`` (so later compiles find LLVM and ptxas loaded); from its
    libdevice link, make this worker's small libdevice and install it."""
    from triton.backends.nvidia import compiler
    lib = Libdevice(directory)
    path = os.path.join(directory, "pydynamo_compile_primer.py")
    with open(path, "w") as f:
        f.write(PRIMER)
    full = compiler.llvm.link_extern_libs
    compiler.llvm.link_extern_libs = lib.capture(full)
    try:
        aligned = [["tt.divisibility", 16]]
        _run((path, "pydynamo_compile_primer", "primer",
              {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp64", "XBLOCK": "constexpr"},
              {(3,): 128}, {(0,): aligned, (1,): aligned, (2,): aligned}, {"num_warps": 4}, target,
              {"TRITON_CACHE_DIR": os.path.join(directory, "cache")}), {})
    finally:
        compiler.llvm.link_extern_libs = full
    if lib.captured is not None:
        lib.write()
        lib.install()
    return lib


def main(argv=()):
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the answers
    inp = sys.stdin.buffer
    try:
        os.nice(10)  # workers yield the CPU to their parent (its first calls, its codegen)
    except (AttributeError, OSError):
        pass
    import tempfile

    import triton.compiler  # noqa: F401
    modules = {}
    own = tempfile.TemporaryDirectory(prefix="pydynamo-compile-worker-")
    note, lib = "", Libdevice(own.name)
    if argv:
        backend, arch, warp_size = argv[0].split(",")
        try:
            lib = _prime((backend, int(arch), int(warp_size)), own.name)
            note = f"small libdevice: {len(lib.functions)} functions"
        except Exception as e:  # its first task will load what it needs; libdevice is linked whole
            note = f"not primed: {type(e).__name__}: {e}"
    _send(out, ("ready", note))
    while True:
        try:
            args = _recv(inp)
        except EOFError:
            return
        lib.linked = ""
        try:
            times = _run(args, modules)
            _send(out, (True, f"libdevice linked {lib.linked}" if lib.linked else "", times))
        except Exception as e:
            _send(out, (False, f"{type(e).__name__}: {e}", {}))
