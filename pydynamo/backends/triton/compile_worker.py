"""Compile worker processes: Triton's compiler in processes of their own, so that a graph's
kernels compile in parallel without sharing one GIL (in threads, Triton's Python front end and
its cache writes serialize them: 30 kernels of a GPT step took 1.5 s in 16 threads on the H100
machine, 5.0 s in one).

A worker is ``python -m pydynamo.backends.triton.compile_worker``: it reads pickled tasks on
stdin and answers on stdout. A task names a generated module's file and one kernel in it; the
worker imports the module and calls the kernel's ``warmup`` as the parent would, with Triton's
driver told the parent's GPU target, so it never touches the GPU. The compiled kernel lands in
Triton's on-disk cache, where the parent's own ``warmup`` of the same kernel then finds it. What a
worker cannot do, the parent does itself: workers only ever save time.

Opt-in, with PYDYNAMO_TRITON_COMPILE_WORKERS=N. Workers start in the background at the first
compile of a process and take tasks once ready; until then kernels compile in the parent's
threads. They exit when the parent closes their stdin (at its exit). Off by default: each imports
torch (16 took 12 s to be ready on the H100 machine, at some memory each), and a GPT training
step's cold compile measured no faster with them (3.6 s either way), its critical path being
AOTAutograd and the first calls more than the kernels' compile."""
import importlib.util
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading

log = logging.getLogger(__name__)


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
        self.idle = queue.Queue()
        self.ready = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._start_all, name="pydynamo-compile-workers", daemon=True).start()

    def _start_all(self):
        procs = []
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # workers compile for real
        for _ in range(self.count):
            try:
                target = [] if self.target is None else [",".join(map(str, self.target))]
                procs.append(subprocess.Popen([sys.executable, "-m", __name__, *target], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env))
            except OSError as e:
                log.debug("compile worker not started: %s", e)
        for p in procs:
            try:
                if _recv(p.stdout) == "ready":
                    with self.lock:
                        self.ready += 1
                    self.idle.put(p)
            except Exception as e:
                log.debug("compile worker failed to start: %s", e)
                p.kill()

    def compile(self, task):
        """Run ``task`` in a worker: True when it compiled there; False when no worker is ready
        yet (or one failed): then the caller compiles."""
        with self.lock:
            if not self.ready:
                return False
        p = self.idle.get()
        try:
            _send(p.stdin, task)
            ok, message = _recv(p.stdout)
        except Exception as e:  # a dead worker: leave it out
            log.debug("compile worker lost: %s", e)
            with self.lock:
                self.ready -= 1
            p.kill()
            return False
        self.idle.put(p)
        if not ok:
            log.debug("compile worker: %s", message)
        return ok


_workers = None


def workers(target):
    """This process's workers (started on first use, for ``target``, a triton GPUTarget): as many
    as PYDYNAMO_TRITON_COMPILE_WORKERS says; None when it is 0 or unset (the default, see the
    module's docstring)."""
    global _workers
    if _workers is None:
        count = int(os.environ.get("PYDYNAMO_TRITON_COMPILE_WORKERS", "0"))
        _workers = Workers(count, (target.backend, target.arch, target.warp_size)) if count > 0 else False
    return _workers or None


def task(launch, target):
    """What a worker needs to compile ``launch``'s kernel: its module's file and name, the
    kernel's name, warmup's arguments, the GPU target, and Triton's settings from the environment
    (the cache directory above all)."""
    fn = launch.kernel
    module = sys.modules[fn.fn.__module__]
    env = {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}
    return (module.__file__, module.__name__, fn.__name__, launch.dtypes, launch.grid, launch.num_warps,
            launch.constexprs, launch.options, (target.backend, target.arch, target.warp_size), env)


class OfflineDriver:
    """What Triton's JIT asks its driver before compiling (warmup never launches): the parent's
    GPU target, and device 0. Nothing here touches a GPU (nor needs one)."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target


def _run(args, modules, targets):
    path, name, kernel, dtypes, grid, num_warps, constexprs, options, target, env = args
    for k in [k for k in os.environ if k.startswith("TRITON_") and k not in env]:
        del os.environ[k]
    os.environ.update(env)
    if targets.get("current") != target:  # (a kernel's first compile in this worker keeps its target)
        from triton.backends.compiler import GPUTarget
        from triton.runtime.driver import driver
        driver.set_active(OfflineDriver(GPUTarget(*target)))
        targets["current"] = target
    if path not in modules:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        modules[path] = mod
    fn = getattr(modules[path], kernel)
    fn.warmup(*dtypes, grid=(grid,), num_warps=num_warps, **constexprs, **options)


# compiled once by each worker before it says it is ready, so that its first task does not pay
# for what a first compile loads (LLVM, libdevice, ptxas's version): 0.5 s or more
PRIMER = """
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def primer(x_ptr, y_ptr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    r = tl.arange(0, RBLOCK)[None, :]
    v = tl.load(x_ptr + (r + RBLOCK * x), r < 7, other=0.0)
    s = tl.sum(libdevice.erf(v) * tl.exp(v), 1)[:, None]
    tl.device_assert(s == s)
    tl.store(y_ptr + x, tl.where(s > 0, s, 0.0))
"""


def _prime(target, modules, targets):
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "pydynamo_compile_primer.py")
        with open(path, "w") as f:
            f.write(PRIMER)
        import torch
        _run((path, "pydynamo_compile_primer", "primer", (torch.float32, torch.float32), 1, 4,
              {"XBLOCK": 2, "RBLOCK": 8}, {}, target, {"TRITON_CACHE_DIR": d}), modules, targets)
        del modules[path]


def main():
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the answers
    inp = sys.stdin.buffer
    try:
        os.nice(10)  # starting up (importing torch), workers yield the CPU to their parent's compile
    except (AttributeError, OSError):
        pass
    import torch  # noqa: F401  (the generated modules import it)
    import triton.compiler  # noqa: F401

    import pydynamo.backends.triton.runtime  # noqa: F401  (and this)
    modules, targets = {}, {}
    if len(sys.argv) > 1:
        backend, arch, warp_size = sys.argv[1].split(",")
        try:
            _prime((backend, int(arch), int(warp_size)), modules, targets)
        except Exception:
            pass  # its first task will load what it needs
    _send(out, "ready")
    while True:
        try:
            args = _recv(inp)
        except EOFError:
            return
        try:
            _run(args, modules, targets)
            _send(out, (True, ""))
        except Exception as e:
            _send(out, (False, f"{type(e).__name__}: {e}"))


if __name__ == "__main__":
    main()
