"""Tools for looking at what pydynamo did in a run.

Structured trace: ``PYDYNAMO_TRACE_DIR=dir`` (read when pydynamo is imported) or
``with pydynamo.debug.trace(dir):`` writes each compile as one JSON line to a new
``dir/pydynamo-trace-<pid>-<n>.jsonl``; ``python -m pydynamo.report dir`` renders it as a page.
The events:

* ``start``     the process (pid, argv, versions) and the trace's start time
* ``frame``     once per code object compiled: file, first line, function, its source
* ``compile``   once per compile (every cache miss, except repeated misses past the cache-size
                limit): result, graphs with the user lines of their ops, graph breaks with their
                user stacks, guards, the recompile reason (the guard that failed, its value then
                and now), seconds per phase, the code's cache entries, hits and misses so far
* ``counters``  when the trace ends: hits and misses per code and in all

Tracing costs nothing on the hit path: the C hook calls ConvertFrame (where the hooks below
are) only on a miss, and counts the hits of each cache entry in C whether tracing is on or not.
"""
import atexit
import contextlib
import functools
import inspect
import itertools
import json
import logging
import os
import sys
import threading
import time
import weakref

import torch

from . import _C
from .dump_src import dump_src  # noqa: F401  (pydynamo.debug.dump_src: dump_src.py)

# The active Tracer, or None. convert_frame and translator test it on misses only.
tracer = None


@contextlib.contextmanager
def trace(directory):
    """Record every compile inside the block to a new JSON-lines file in ``directory``; yields
    the Tracer (its ``path`` is the file). Traces nest: the inner one gets the events meanwhile."""
    t = start(directory)
    try:
        yield t
    finally:
        stop(t)


def start(directory, keep_empty=True):
    """Start a trace into ``directory`` (stop() ends it); with ``keep_empty`` False, a trace
    that records no compile writes no file."""
    global tracer
    t = Tracer(directory, previous=tracer, keep_empty=keep_empty)
    tracer = t
    return t


def stop(t=None):
    """End trace ``t`` (the active one by default), writing its counters; the trace it
    interrupted, if any, is active again."""
    global tracer
    t = t or tracer
    if t is None or t.closed:
        return
    t.close()
    while tracer is not None and tracer.closed:  # traces may end out of order
        tracer = tracer.previous


def start_from_env():
    """PYDYNAMO_TRACE_DIR: trace the whole process, ending at exit. A process that compiles
    nothing (``python -m pydynamo.report`` run with the variable still set) leaves no file."""
    directory = os.environ.get("PYDYNAMO_TRACE_DIR")
    if directory and tracer is None:
        atexit.register(stop, start(directory, keep_empty=False))


class Tracer:
    """Writes the events of one trace. One compile's event is filled in by the hooks called
    while it runs (per thread: two threads may compile at once) and written when it ends."""

    def __init__(self, directory, previous=None, keep_empty=True):
        self.directory, self.previous, self.closed = directory, previous, False
        self.path = self._file = None  # the file is made at the first event, or now
        self._lock, self._local = threading.Lock(), threading.local()
        self._t0 = time.perf_counter()
        self._frames = {}  # id(code) -> _FrameInfo
        self._seq = itertools.count()
        self._counters = _C.debug_counters()  # the process's so far: the trace's are the difference
        self._start = {"event": "start", "time": time.time(), "pid": os.getpid(), "argv": sys.argv,
                       "python": sys.version.split()[0], "torch": torch.__version__}
        if keep_empty:
            with self._lock:
                self._open()
        from . import convert_frame
        convert_frame.observers.append(self)

    def _open(self):
        os.makedirs(self.directory, exist_ok=True)
        for n in itertools.count():
            path = os.path.join(self.directory, f"pydynamo-trace-{os.getpid()}-{n}.jsonl")
            try:
                self._file = open(path, "x", encoding="utf-8")
                break
            except FileExistsError:
                continue
        self.path = path
        self._file.write(json.dumps(self._start, default=str) + "\n")

    def close(self):
        from . import convert_frame
        if self in convert_frame.observers:
            convert_frame.observers.remove(self)
        if self._file is None and not self._frames:
            self.closed = True
            return
        now = _C.debug_counters()
        frames = [dict(frame_id=f.id, function=f.function, misses=f.misses, **_cache_counts(f.code()))
                  for f in self._frames.values()]
        self._write({"event": "counters", "frames": frames, "seconds": time.perf_counter() - self._t0,
                     **{k: now[k] - self._counters[k] for k in ("hits", "misses")}})
        with self._lock:
            self.closed = True
            self._file.close()

    def _write(self, event):
        line = json.dumps(event, default=str)
        with self._lock:
            if not self.closed:
                if self._file is None:
                    self._open()
                self._file.write(line + "\n")
                self._file.flush()  # a crash keeps what was recorded up to it

    def _frame(self, code):
        info = self._frames.get(id(code))
        if info is None or info.code() is not code:
            info = self._frames[id(code)] = _FrameInfo(code, len(self._frames))
            self._write(info.event())
        return info

    # ---- one compile ----------------------------------------------------------------------------

    def record(self, convert, frame, cache_size):
        """ConvertFrame.on_miss(frame, cache_size), recorded."""
        from . import config
        from .exc import Unsupported
        code = frame.f_code
        info = self._frame(code)
        info.misses += 1
        at_limit = cache_size >= config.cache_size_limit
        if at_limit and info.limit_seen:  # each further miss runs eagerly: counted, not listed
            return convert.on_miss(frame, cache_size)
        ev = {"event": "compile", "seq": next(self._seq), "compile_id": f"{info.id}/{info.attempts}",
              "frame_id": info.id, "file": code.co_filename, "line": code.co_firstlineno,
              "function": code.co_qualname, "start": time.perf_counter() - self._t0,
              "result": None, "graphs": [], "breaks": [], "guards": [], "recompile": None,
              "phases": {"tracing": 0.0, "guards": 0.0}}
        info.attempts += 1
        info.limit_seen |= at_limit
        if cache_size:
            ev["recompile"] = info.failures(frame)
        stack = self._events()
        stack.append((ev, info))
        errors = _ErrorCatcher()
        t0 = time.perf_counter()
        try:
            result = convert.on_miss(frame, cache_size)
            ev["result"] = ("compiled" if isinstance(result, _C.CacheEntry) else
                            "cache_limit" if at_limit else
                            "skipped" if ev["breaks"] and result is _C.SKIP else
                            "error" if result is _C.SKIP else "eager")
            return result
        except BaseException as e:
            ev["result"] = "skipped" if isinstance(e, Unsupported) else "error"
            ev["error"] = f"{type(e).__name__}: {e}"
            raise
        finally:
            stack.pop()
            errors.close()
            ev["seconds"] = time.perf_counter() - t0
            phases = ev["phases"]
            phases["backend"] = sum(g.get("seconds", 0.0) for g in ev["graphs"])
            phases["tracing"] = max(0.0, ev.get("compile_seconds", ev["seconds"]) - phases["guards"]
                                    - phases["backend"])
            if errors.messages and "error" not in ev:
                ev["error"] = "\n".join(errors.messages)
            ev.update(_cache_counts(code), misses=info.misses)
            ev["cache_entries"] += ev["result"] == "compiled"  # the hook adds the entry after
            self._write(ev)

    def _events(self):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _current(self):
        """The event of the compile running in this thread, and its code's _FrameInfo."""
        stack = self._events()
        return stack[-1] if stack else (None, None)

    # hooks: convert_frame's observers protocol, and the calls convert_frame and translator make

    def on_entry(self, code, guards, seconds):
        ev, _ = self._current()
        if ev is not None:
            ev["guards"] = list(guards.texts())
            ev["compile_seconds"] = seconds

    def on_break(self, exc):
        ev, _ = self._current()
        if ev is not None:
            stack = [list(s) for s in exc.user_stack]
            top = stack[-1] if stack and stack[-1][0] == ev["file"] else None
            ev["breaks"].append({"reason": exc.reason, "id": exc.id, "kind": type(exc).__name__, "hint": exc.hint,
                                 "user_stack": stack, "line": top[1] if top else None})

    def on_guards(self, checks, seconds):
        ev, info = self._current()
        if ev is not None:
            ev["phases"]["guards"] = seconds
            info.remember(checks)

    def on_graph(self, gm):
        """The record of a graph given to the backend (before it runs: it may change gm)."""
        ev, _ = self._current()
        graph = _graph_event(gm, ev["file"] if ev else None)
        if ev is not None:
            ev["graphs"].append(graph)
        return graph

    def watch(self, output):
        """Note on each node of ``output``'s graph the user lines being traced when it was made."""
        if output.graph.owning_module is None:
            output.graph.owning_module = _NodeLines(output)


def observe_backend(backend):
    """``backend``, reporting each graph it compiles and the seconds it took to the active
    trace (a check of ``tracer`` per compiled graph when none is)."""
    @functools.wraps(backend)
    def compile_graph(gm, example_inputs, **kwargs):
        if tracer is None:
            return backend(gm, example_inputs, **kwargs)
        graph, t0 = tracer.on_graph(gm), time.perf_counter()
        try:
            return backend(gm, example_inputs, **kwargs)
        finally:
            graph["seconds"] = time.perf_counter() - t0
    return compile_graph


class _NodeLines:
    """Stands in for the graph's owning module while it is traced, for its ``_create_node_hooks``
    (FX calls them for each new node; GraphModule's own mechanism). Building the GraphModule
    replaces it, so nothing of the trace outlives it."""

    def __init__(self, output):
        self._output = weakref.ref(output)
        self._create_node_hooks = [self._note]

    def _note(self, node):
        output = self._output()
        tx, stack = output and output.current_tx, []
        while tx is not None:  # innermost first, as Unsupported.user_stack
            if tx.current is not None:
                stack.append((tx.code.co_filename, tx.current.lineno, tx.code.co_name))
            tx = getattr(tx, "parent", None)
        node.meta["pydynamo_user_stack"] = stack


def _graph_event(gm, filename):
    nodes = [n for n in gm.graph.nodes if n.op.startswith("call_")]
    where = {}
    for n in nodes:
        stack = n.meta.get("pydynamo_user_stack")
        if stack:
            where[n.name] = {"line": stack[-1][1] if stack[-1][0] == filename else None,
                             "at": f"{stack[0][0]}:{stack[0][1]}"}
    return {"code": gm.code.strip("\n"), "ops": len(nodes), "nodes": where,
            "lines": sorted({w["line"] for w in where.values() if w["line"] is not None})}


def _cache_counts(code):
    entries = _C.get_cache_entries(code) if code is not None else []
    return {"cache_entries": len(entries), "hits": sum(getattr(e, "hits", 0) for e in entries)}


class _ErrorCatcher:
    """Collects what pydynamo.errors logs meanwhile: why a frame that failed to compile runs
    eagerly (a backend's or pydynamo's own error)."""

    def __init__(self):
        from . import logs
        self.messages, self._logger = [], logs.get("errors")
        self._handler = logging.Handler(logging.WARNING)
        self._handler.emit = lambda r: self.messages.append(
            r.getMessage() + (f": {type(r.exc_info[1]).__name__}: {r.exc_info[1]}" if r.exc_info else ""))
        self._logger.addHandler(self._handler)

    def close(self):
        self._logger.removeHandler(self._handler)


# What recompile reasons show of the guards of codes compiled while a trace was on, kept across
# traces: id(code) -> ({guard text: (kind, steps or None, value then)}, weak reference to the
# code, whose death drops the item).
_remembered = {}


class _FrameInfo:
    """What the trace knows of one code object: held weakly, as the C cache holds it."""

    def __init__(self, code, frame_id):
        from .resume import is_resume_code
        self.code, self.id = weakref.ref(code), frame_id
        self.function, self.resume = code.co_qualname, is_resume_code(code)
        self.attempts = self.misses = 0
        self.limit_seen = False

    def event(self):
        code = self.code()
        try:
            lines, first = inspect.getsourcelines(code)
        except (OSError, TypeError):
            lines, first = [], code.co_firstlineno
        return {"event": "frame", "frame_id": self.id, "file": code.co_filename, "line": code.co_firstlineno,
                "function": self.function, "resume": self.resume, "source_line": first or 1,
                "source": [s.rstrip("\n") for s in lines]}

    def remember(self, checks):
        """Keep what a recompile reason shows of these checks, not the checks: their values
        may be user objects, which guards hold only weakly."""
        code = self.code()
        known = _remembered.get(id(code))
        if known is None:
            key = id(code)
            known = _remembered[key] = ({}, weakref.ref(code, lambda _: _remembered.pop(key, None)))
        for steps, kind, value, text in checks:
            plain = all(isinstance(arg, (str, int)) for _, arg in steps)
            known[0][text] = (kind, steps if plain else None, _value_text(kind, value))

    def failures(self, frame):
        """Why no cache entry took this frame: per entry, the first guard that failed, with the
        value it was compiled for and the value now (where a trace saw that entry made)."""
        out = []
        known = _remembered.get(id(frame.f_code), ({},))[0]
        for entry in _C.get_cache_entries(frame.f_code):
            failure = frame.check_guards(entry.guards) if isinstance(entry.guards, _C.GuardSet) else None
            if failure is None:
                continue
            text = next((t for t in known if failure == t or failure.startswith(t + " (")), None)
            kind, steps, old = known.get(text, (None, None, None))
            out.append({"guard": text or failure, "failure": failure, "old": old,
                        "new": _read_text(kind, steps, frame) if steps else None})
        return out


# ---- values as recompile reasons show them ---------------------------------------------------------

def _tensor_text(cls, dtype, device, sizes, strides, requires_grad):
    shown = lambda ints: "[" + ", ".join("*" if i is None else str(i) for i in ints) + "]"  # noqa: E731
    return (f"{cls.__name__}({dtype}, {device}, size={shown(sizes)}, stride={shown(strides)}, "
            f"requires_grad={requires_grad})")


def _short(v, limit=200):
    from .guards import _describe
    if isinstance(v, torch.Tensor):
        return _tensor_text(type(v), v.dtype, v.device, tuple(v.size()), tuple(v.stride()), v.requires_grad)
    text = repr(v) if isinstance(v, (type(None), bool, int, float, str, tuple, list)) else _describe(v)
    return text if len(text) <= limit else text[:limit] + "..."


def _value_text(kind, value):
    from .guards import _describe
    if kind == "TENSOR_MATCH":
        return _tensor_text(value[0], value[1], value[2], value[5], value[6], value[4])
    if kind == "TYPE_MATCH":
        return f"type {value.__qualname__}"
    if kind == "ID_MATCH":
        return _describe(value)
    if kind == "LEN":
        return f"len {value}"
    if kind == "DICT_KEYS":
        return f"keys {list(value)!r}"
    if kind == "NOT_PRESENT":
        return "absent"
    return _short(value) if kind == "EQUALS_MATCH" else None


def _read_text(kind, steps, frame):
    """The value the check's steps read on ``frame`` now, shown as _value_text shows the
    compiled one."""
    try:
        v = _read(steps, frame)
    except Exception as e:  # noqa: BLE001 - a read may fail in any way; the guard failed then too
        return "absent" if isinstance(e, (KeyError, AttributeError, IndexError)) else f"unreadable ({type(e).__name__})"
    if kind == "TYPE_MATCH":
        return f"type {type(v).__qualname__}"
    if kind == "LEN":
        return f"len {len(v)}"
    if kind == "DICT_KEYS":
        return f"keys {list(v)!r}"
    if kind == "NOT_PRESENT":
        return f"present: {_short(v)}"
    return _short(v)


def _raw_entry(d, key):
    if not isinstance(d, dict) or not dict.__contains__(d, key):
        raise KeyError(key)
    return dict.get(d, key)


def _read(steps, frame):
    """The value at ``steps`` (GuardSet's paths, see _C.pyi) in ``frame``."""
    root, arg = steps[0]
    if root == "L":
        v = frame.f_locals[frame.f_code.co_varnames[arg]]
    elif root == "C":
        v = frame.closure[arg].cell_contents
    else:
        v = (frame.f_globals if root == "G" else frame.f_builtins)[arg]
    for op, arg in steps[1:]:
        if op == "a":
            v = getattr(v, arg)
        elif op == "i":
            v = v[arg]
        elif op == "g":
            v = object.__getattribute__(v, arg)
        elif op == "w":
            v = v()
        elif op == "d":
            v = _raw_entry(v, arg)
        elif op == "D":  # the entry for a key held by a weak reference
            key = arg()
            if key is None:
                raise KeyError("dead key")
            v = _raw_entry(v, key)
        else:  # "t": as the class's MRO stores it
            v = next(c.__dict__[arg] for c in v.__mro__ if arg in c.__dict__)
    return v
