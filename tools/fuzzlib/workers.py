"""The worker subprocesses, run as `tools/fuzz.py --worker programs|soak|threads`: each sends its
messages as JSON lines on EMIT_FD (a copy of stdout that main() makes; stray prints go to stderr).
programs: generate, check, minimize and report programs until the deadline. threads: 4 threads call
one compiled function on inputs that recompile it while one calls it with pydynamo off (THREAD_SRC),
each result compared with eager. soak: compile / reset cycles with cache hits, RSS and live-object
growth after a warm-up, and whether a deleted compiled model is freed.
"""
import json
import os
import random
import threading
import time

from .check import Checker, attempt, compare, make_wrap, minimize, report, run_side, signature
from .generate import gen_program, program_seed
from .program import MK_SRC

EMIT_FD = 1  # set by main() in a worker


def emit(obj):
    os.write(EMIT_FD, (json.dumps(obj) + "\n").encode())


def worker_programs(a):
    import logging
    import warnings
    warnings.simplefilter("ignore")
    internal = []
    handler = logging.Handler()
    handler.emit = lambda rec: internal.append(rec)
    logging.getLogger("pydynamo.errors").addHandler(handler)
    logging.getLogger("pydynamo.errors").propagate = False
    check = Checker(a.tmp, make_wrap(a.backend, a.self_check), a.backend == "eager")
    i = a.start
    while time.time() < a.deadline and (a.only is None or i == a.only):
        emit({"start": i})
        prog = gen_program(program_seed(a.seed, i))
        internal.clear()
        calls0 = check.calls
        found = check(prog)
        msg = {"done": i, "calls": check.calls - calls0, "internal": len(internal)}
        if internal:
            exc = internal[0].exc_info[1] if internal[0].exc_info else None
            msg["internal_msg"] = f"{type(exc).__name__}: {exc}"[:200] if exc else internal[0].getMessage()
        if found:
            mprog, mfound = minimize(prog, found, check, a.minimize_s)
            msg.update(cat=found[0], sig=signature(found[0], mprog), source=mprog.source(),
                       report=report(found[0], i, a.seed, mprog, mfound))
        emit(msg)
        i += 1


THREAD_SRC = '''import torch
''' + MK_SRC + '''


def helper(t, k):
    return t * k if k > 1 else t + 1


def fn(x, n):
    out = []
    if x.dtype == torch.float64:
        x = x * 2
    elif x.is_floating_point():
        x = x + 1
    out.append(tuple(x.shape))
    if x.is_contiguous():
        out.append(x.view(-1)[:3])
    else:
        out.append(x.reshape(-1)[:3] * 2)
    if x.requires_grad:
        out.append(x.sum() * n)
    for i in range(n):
        x = x + i
    out.append(helper(x, n))
    if (x != 0).sum() > 3:
        out.append(x.ndim)
    out.append(x.stride())
    return out


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.scale = 2

    def forward(self, x):
        return self.lin(x) * self.scale
'''


def load_thread_src(tmp):
    path = os.path.join(tmp, "soak_threads.py")
    with open(path, "w") as f:
        f.write(THREAD_SRC)
    ns = {"__name__": "fuzzprog"}
    exec(compile(THREAD_SRC, path, "exec"), ns)
    return ns


def thread_inputs(ns):
    specs = [((2, 3), "float32", "contig", False), ((3, 4), "float32", "t", False),
             ((2, 3), "float64", "contig", True), ((4,), "int64", "contig", False),
             ((2, 3, 4), "float32", "slice", True), ((3, 4), "float16", "contig", False),
             ((1, 4), "bool", "contig", False), ((4, 1), "float32", "contig", False)]
    return [(ns["mk"](sh, dt, k, lay, rg=rg), k % 4) for k, (sh, dt, lay, rg) in enumerate(specs)]


def worker_threads(a):
    import pydynamo
    wrap = make_wrap(a.backend, a.self_check)
    ns = load_thread_src(a.tmp)
    fn, inputs = ns["fn"], thread_inputs(ns)
    refs = [attempt(lambda: fn(*args)) for args in inputs]
    compiled, off = wrap(fn), (fn if a.self_check else pydynamo.disable(fn))
    stats = {"wrong": 0, "calls": 0, "first": None}
    lock = threading.Lock()

    def work(tid, f):  # threads 0-3 call the compiled function, thread 4 the one with pydynamo off
        rng, calls, wrong = random.Random(a.seed * 31 + tid), 0, 0
        while time.time() < a.deadline or calls < 25:
            k = rng.randrange(len(inputs))
            d = compare(attempt(lambda: f(*inputs[k])), refs[k], a.backend == "eager")
            calls, wrong = calls + 1, wrong + bool(d)
            if d and stats["first"] is None:
                stats["first"] = f"thread {tid}, input {k}: {d}"
        with lock:
            stats["calls"] += calls
            stats["wrong"] += wrong

    threads = [threading.Thread(target=work, args=(t, compiled if t < 4 else off)) for t in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pydynamo.reset()
    emit(stats)


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker_soak(a):
    """Compile / reset cycles with cache hits and recompiles; growth measured after a warm-up."""
    import collections
    import gc
    import warnings
    import weakref
    import pydynamo
    warnings.simplefilter("ignore")
    wrap = make_wrap(a.backend, a.self_check)
    ns = load_thread_src(a.tmp)
    inputs, x4 = thread_inputs(ns), ns["mk"]((2, 4), "float32", 7)
    # (not programs calling torch.cond & co. eagerly: torch.compile's own caches grow with each)
    progs = [p for p in (gen_program(program_seed(a.seed, 10**6 + k)) for k in range(50))
             if all(s.family != "torchapis" for s in p.snips)][:2]
    paths = [os.path.join(a.tmp, f"soak_{k}.py") for k in range(len(progs))]
    for p, path in zip(progs, paths):
        with open(path, "w") as f:
            f.write(p.source())

    def census():
        gc.collect()
        return rss_mb(), collections.Counter(type(o).__qualname__ for o in gc.get_objects())

    start, cycles, base = time.time(), 0, None
    warm_until = start + (a.deadline - start) * 0.3
    while not (base and time.time() > a.deadline and cycles - base[2] >= 3):  # at least 3 measured cycles
        f = wrap(ns["fn"])
        for j in range(20):
            f(*inputs[j % 2])  # two entries, then cache hits
        f(*inputs[2 + cycles % 6])  # a recompile (sizes become symbolic)
        wrap(ns["Net"]())(x4)
        if cycles % 4 == 0:
            for p, path in zip(progs, paths):
                run_side(p.source(), path, wrap)
        pydynamo.reset()
        cycles += 1
        if base is None and time.time() > warm_until and cycles >= 3:
            base = census() + (cycles,)
    end = census()
    grew = end[1] - base[1]
    # a model deleted after compiling is freed (without a reset; else say whether a reset frees it)
    net = ns["Net"]()
    ref = weakref.ref(net)
    cnet = wrap(net)
    cnet(x4)
    cnet(x4)
    del net, cnet
    gc.collect()
    model = "freed" if ref() is None else "kept alive"
    if ref() is not None:
        pydynamo.reset()
        gc.collect()
        model += "; freed by pydynamo.reset()" if ref() is None else "; still alive after pydynamo.reset()"
    emit({"cycles": cycles, "measured_cycles": cycles - base[2], "rss0": base[0], "rss1": end[0],
          "objs": sum(end[1].values()) - sum(base[1].values()), "top": grew.most_common(4), "model": model})
