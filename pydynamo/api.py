"""What user code calls to steer capture, under torch._dynamo's / torch.compiler's names:
``graph_break()``, ``allow_in_graph(fn)``, ``disallow_in_graph(fn)``.

Marks are kept by identity (``mark_of``); the trace reads them where it meets a call
(variables/marked.py). The same functions of torch (``torch._dynamo.graph_break``, and the
callables registered with ``torch.compiler.allow_in_graph`` / ``torch._dynamo.disallow_in_graph``)
are recognised through ``sys.modules`` when torch._dynamo is loaded; pydynamo never imports it.

A mark decides what is captured, never a result: an allowed function must compute the same
from the same inputs, as torch's contract says, and a break runs the call as Python would. So
compiled entries need no guard on marks made later.
"""
import contextlib
import sys
import threading
import weakref

import torch

_marks = {}  # id(fn) -> (kind, ref): kind "allow" / "disallow"; ref() is fn while it lives


def graph_break(msg=""):
    """A graph break here: the graph so far is compiled, capture resumes after this call.
    Does nothing when not compiling (``torch._dynamo.graph_break``)."""


def allow_in_graph(fn):
    """Calls of ``fn`` become one opaque node of the graph: ``fn`` is not traced by pydynamo
    (its outputs' metadata come from running it on fake tensors; backends such as AOTAutograd
    trace through it). Its inputs and outputs must be tensors, numbers or tuples/lists of them,
    it must read no tensor other than its arguments, and have no side effects (torch's rules).
    A list or tuple of functions marks each and returns a list."""
    return _set_mark(fn, "allow", allow_in_graph)


def disallow_in_graph(fn):
    """Calls of ``fn`` break the graph: the call runs in Python (a torch op is not put in the
    graph; a Python function's own frame is then compiled on its own)."""
    return _set_mark(fn, "disallow", disallow_in_graph)


_substitutes = {}  # id(original) -> (original, replacement, can_constant_fold_through)


def substitute_in_graph(original_fn, *, can_constant_fold_through=False, skip_signature_check=False):
    """A decorator: the trace calls the decorated Python function where the program calls
    ``original_fn`` (a C function, usually), as ``torch.compiler.substitute_in_graph``. Eager
    calls still call ``original_fn``; the replacement must compute the same (the user's
    promise). With ``can_constant_fold_through``, a call whose arguments are all constants
    calls ``original_fn`` itself while tracing and keeps the result."""
    if not callable(original_fn):
        raise TypeError(f"substitute_in_graph expects a callable, not {type(original_fn).__name__}")

    def register(fn):
        if not callable(fn):
            raise TypeError(f"substitute_in_graph: the replacement must be callable, not {type(fn).__name__}")
        if not skip_signature_check:
            import inspect
            try:
                a, b = inspect.signature(original_fn), inspect.signature(fn)
            except (TypeError, ValueError):
                a = b = None
            if a is not None and [p.kind for p in a.parameters.values()] != [p.kind for p in b.parameters.values()]:
                raise TypeError(f"substitute_in_graph: the signature of {getattr(fn, '__qualname__', fn)} {b} "
                                f"does not match {getattr(original_fn, '__qualname__', original_fn)} {a} "
                                "(pass skip_signature_check=True to register it anyway)")
        _substitutes[id(original_fn)] = (original_fn, fn, bool(can_constant_fold_through))
        return fn
    return register


def substitute_of(value):
    """(replacement, can_constant_fold_through) registered for ``value``, or None."""
    entry = _substitutes.get(id(value))
    if entry is not None and entry[0] is value:
        return entry[1:]
    return None


def _set_mark(fn, kind, api):
    if isinstance(fn, (list, tuple)):
        return [api(f) for f in fn]
    if not callable(fn):
        raise TypeError(f"{api.__name__} expects a callable, not {type(fn).__name__}")
    key = id(fn)
    try:
        ref = weakref.ref(fn, lambda _, key=key: _forget(key))
    except TypeError:  # not weakly referenceable: held for good
        ref = lambda: fn  # noqa: E731
    _marks[key] = (kind, ref)
    return fn


def _forget(key):
    entry = _marks.get(key)
    if entry is not None and entry[1]() is None:
        del _marks[key]


def mark_of(value):
    """"graph_break", "allow", "disallow" or None for a callable met by the trace."""
    entry = _marks.get(id(value))
    if entry is not None and entry[1]() is value:
        return entry[0]
    if value is graph_break:
        return "graph_break"
    return _torch_mark(value)


def _torch_mark(value):
    """torch's marks: its graph_break, and ids registered by its allow_in_graph / disallow_in_graph
    (read, never initialised or called: an id set that was never filled is None)."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return None
    if value is getattr(dynamo, "graph_break", None):
        return "graph_break"
    rules = sys.modules.get("torch._dynamo.trace_rules")
    for kind, table in (("allow", "_allowed_callable_ids"), ("disallow", "_disallowed_callable_ids")):
        ids = getattr(getattr(rules, table, None), "function_ids", None)
        if ids and id(value) in ids:
            return kind
    return None


@contextlib.contextmanager
def compiling():
    """While pydynamo compiles (traces, runs a backend), ``torch.compiler.is_compiling()``
    reads True in code that runs for real, as during torch.compile's own compiles: functions
    marked allow_in_graph run on fake tensors, AOTAutograd traces through them."""
    compiler = torch.compiler
    has_flag = hasattr(compiler, "_is_compiling_flag")
    old = compiler._is_compiling_flag if has_flag else None
    if has_flag:
        compiler._is_compiling_flag = True
    _this_thread.depth = getattr(_this_thread, "depth", 0) + 1
    try:
        yield
    finally:
        _this_thread.depth -= 1
        if has_flag:
            compiler._is_compiling_flag = old


_this_thread = threading.local()


def compiling_in_this_thread():
    """Whether this thread is inside a pydynamo compile (tracing, or a backend running)."""
    return getattr(_this_thread, "depth", 0) > 0
