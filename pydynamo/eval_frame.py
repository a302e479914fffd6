"""Decorators and context managers that switch the hook: optimize, disable; OptimizedModule.

A decorated function switches this thread's hook to its ConvertFrame for the duration of each
call (and back afterwards), so frames it starts are compiled on a miss and served from the cache
on a hit. The wrappers' own code lives in this file, which the hook never compiles.
"""
import functools
import inspect

import torch

from . import _C, stance
from .api import compiling_in_this_thread
from .backends import lookup_backend
from .convert_frame import ConvertFrame, request_compile


class OptimizeContext:
    """What ``optimize(...)`` returns: a decorator for functions, methods and modules, and a
    context manager that compiles the frames started inside its block."""

    def __init__(self, setting):
        self.setting = setting  # a ConvertFrame, False (run-only) or None (disabled)
        self._prev = []

    def __enter__(self):
        self._prev.append(_C.set_eval_frame(stance.setting_for(self.setting)))
        return self

    def __exit__(self, *exc):
        _C.set_eval_frame(self._prev.pop())
        return False

    def __call__(self, fn):
        if isinstance(fn, torch.nn.Module):
            target = _compiled_module(fn)
            opt = OptimizedModule(fn, self)
            if target is fn or not isinstance(target, OptimizedModule):  # DDP(compiled): compiled already
                request_compile(type(target).forward, owner=opt)
            return opt
        if not callable(fn):
            raise TypeError(f"pydynamo.optimize(...) takes a function, method or nn.Module, not {type(fn).__name__}")
        if inspect.isclass(fn):
            raise TypeError(f"pydynamo.optimize(...) cannot wrap the class {fn.__qualname__}; wrap an instance "
                            "or a function")
        inner = innermost_fn(fn)
        wrapped = self.wrap(fn)
        request_compile(getattr(inner, "__func__", inner), owner=wrapped)
        return wrapped

    def wrap(self, fn):
        """``fn`` run with this context's setting switched on for each call."""
        setting = self.setting

        @functools.wraps(fn)
        def _fn(*args, **kwargs):
            _refuse_foreign_tracing(fn)
            prev = _C.set_eval_frame(stance.setting_for(setting) if stance.current.active else setting)
            try:
                return fn(*args, **kwargs)
            finally:
                _C.set_eval_frame(prev)

        _fn._pydynamo_orig_fn = fn
        _fn._pydynamo_setting = setting
        return _fn


def _refuse_foreign_tracing(fn):
    """A pydynamo-optimized function called while another tracer records the program, or from
    inside a pydynamo compile (a backend), is an error that says so, as under torch.compile:
    what pydynamo would compile there is the tracer's proxies, not the user's tensors."""
    what = None
    if torch.fx._symbolic_trace.is_fx_symbolic_tracing():
        what = "torch.fx.symbolic_trace is tracing"
    elif torch._C._get_tracing_state() is not None:
        what = "torch.jit.trace is tracing"
    elif compiling_in_this_thread():
        what = "pydynamo is compiling (a backend or traced code called it)"
    if what is not None:
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        raise RuntimeError(f"pydynamo: {name} is pydynamo-optimized and was called while {what}; "
                           "trace or call the original function instead (pydynamo.disable, or the "
                           "module before pydynamo.compile)")


def _compiled_module(mod):
    """The module whose forward ``optimize(mod)`` compiles: ``mod``, or for DistributedDataParallel
    the module it wraps. DDP's own forward (its reducer, join and buffer-sync calls) runs natively,
    as under torch.compile, and calls its module, whose forward is compiled (split at DDP's
    buckets, backends/distributed.py)."""
    from torch.nn.parallel import DistributedDataParallel
    while isinstance(mod, DistributedDataParallel):
        mod = mod.module
    return mod


class OptimizedModule(torch.nn.Module):
    """An nn.Module whose calls run through pydynamo. Like torch.compile's OptimizedModule it
    keeps the original as ``_orig_mod`` (so parameters and state_dict keys carry the
    ``_orig_mod.`` prefix), forwards other attributes to it, and calls it through its own
    ``__call__``, so the original's forward hooks run as in eager mode."""

    def __init__(self, mod, ctx):
        super().__init__()
        self._orig_mod = mod
        self._pydynamo_ctx = ctx
        self._compiled_call = ctx.wrap(mod.__call__)

    def forward(self, *args, **kwargs):
        return self._compiled_call(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"


def optimize(backend="inductor", *, nopython=False, fullgraph=False, dynamic=None):
    """Compile the frames run under the returned decorator / context manager with ``backend``
    (a name from ``list_backends()`` or a callable ``backend(gm, example_inputs)``).
    ``fullgraph=True`` (or its old name ``nopython=True``) makes anything that cannot be captured
    an error raised to the caller instead of a fall-back to eager execution."""
    return OptimizeContext(ConvertFrame(lookup_backend(backend), fullgraph=fullgraph or nopython, dynamic=dynamic))


def compile(model=None, *, backend="inductor", fullgraph=False, dynamic=None, mode=None, options=None):
    """Mirror of ``torch.compile``: returns the compiled function or OptimizedModule; with no
    model, a decorator. ``mode`` and ``options`` go to the inductor backend; the triton backend
    takes ``mode`` (``"reduce-overhead"``: CUDA graphs)."""
    if model is None:
        return lambda m: compile(m, backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode,
                                 options=options)
    if mode is not None and options is not None:
        raise RuntimeError("pydynamo.compile: pass either mode or options, not both (as torch.compile)")
    if options is not None and backend != "inductor":
        raise RuntimeError(f"pydynamo.compile: options are for the inductor backend, not {backend!r}")
    if mode is not None and backend not in ("inductor", "triton"):
        raise RuntimeError(f"pydynamo.compile: mode is for the inductor and triton backends, not {backend!r}")
    if backend == "triton" and mode is not None:
        from .backends.triton import MODES
        if mode not in MODES:
            raise RuntimeError(f"pydynamo.compile: the triton backend's modes are "
                               f"{', '.join(map(repr, MODES[1:]))}, not {mode!r}")
        backend = functools.partial(lookup_backend("triton"), mode=mode)
    elif mode is not None or options is not None:
        backend = functools.partial(lookup_backend("inductor"), mode=mode, options=options)
    return optimize(backend, fullgraph=fullgraph, dynamic=dynamic)(model)


def run(fn=None):
    """Serve calls from the cache, compile nothing (misses run eagerly), as
    ``torch._dynamo.run``: with a function, that function so wrapped; without, a decorator and
    context manager."""
    if fn is None:
        return OptimizeContext(False)
    return OptimizeContext(False)(innermost_fn(fn))


def run_only():
    """``run()``, under its older name."""
    return run()


def disable(fn=None, recursive=True):
    """``fn`` and everything it calls run without pydynamo. As a decorator, or called with a
    function; with no function, a context manager."""
    if fn is None:
        return OptimizeContext(None)
    if isinstance(fn, torch.nn.Module):
        mod = fn
        mod.forward = disable(mod.forward)
        return mod

    @functools.wraps(fn)
    def _fn(*args, **kwargs):
        prev = _C.set_eval_frame(None)
        try:
            return fn(*args, **kwargs)
        finally:
            _C.set_eval_frame(prev)

    _fn._pydynamo_disabled = True
    _fn._pydynamo_orig_fn = fn
    return _fn


def assume_constant_result(fn):
    """Mark ``fn`` as returning the same constant whenever it is called with the same constant
    arguments (as ``torch._dynamo.assume_constant_result`` does, and libraries such as
    transformers mark their feature probes): the trace calls it once, for real, and puts its
    result in the compiled code, without guarding what it read. The promise is the user's."""
    fn._dynamo_marked_constant = True  # the attribute torch.compile and libraries use
    return fn


def innermost_fn(fn):
    """The user's function under any number of pydynamo wrappers."""
    while hasattr(fn, "_pydynamo_orig_fn"):
        fn = fn._pydynamo_orig_fn
    return fn
