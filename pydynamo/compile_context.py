"""The context a backend compiles and runs in: the hook switch and the garbage collector.

Low in the house: backends, the AOTAutograd compilers they wrap and the frame converter all import
this module, and it imports only the C extension, so no backend imports the converter or the
translator. A compiled graph and everything a backend returns run with this thread's hook off
(``_C.NoHookCall``): a backend's runtime is library code, never to be traced.
"""
import contextlib
import functools
import gc
import threading

from . import _C


def run_without_hook(backend):
    """The backend, with every compiled graph it returns called with the hook off: a backend's
    runtime is library code (launchers, autotuning, generated wrappers), never to be traced.
    (The backend call itself runs inside the hook's callback, where the hook is off already.)"""
    @functools.wraps(backend)
    def compile_graph(gm, example_inputs, **kwargs):
        return _C.NoHookCall(backend(gm, example_inputs, **kwargs))
    return compile_graph


_gc_lock = threading.Lock()
_gc_compiles = 0      # compiles in progress (in any thread) while the collector is held off
_gc_was_on = False    # whether it was on when the first of them began


@contextlib.contextmanager
def collector_off():
    """Python's cyclic garbage collector held off while compiling. A compile allocates objects by
    the hundred thousand (fake tensors, FX nodes), for which the collector would run full
    collections over the whole heap (torch, the model, its library): hf-gpt2's training compile
    made 3, 0.77 s of its 5 s (2-core CPU). What the compile leaves for the collector is found
    at its next collection. Nests, and is shared by threads: the collector is turned back on
    when the last compile in progress ends, and only if it was on when the first began."""
    global _gc_compiles, _gc_was_on
    with _gc_lock:
        if _gc_compiles == 0:
            _gc_was_on = gc.isenabled()
            gc.disable()
        _gc_compiles += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_compiles -= 1
            if _gc_compiles == 0 and _gc_was_on:
                gc.enable()


def compiler_without_hook(compiler):
    """An AOTAutograd forward/backward compiler (``compiler(gm, example_inputs) -> callable``)
    that compiles with this thread's hook off and returns a callable that runs with it off.

    The backward compiler runs lazily, at the first backward, from the autograd engine: outside
    the hook's callback and outside the NoHookCall around the compiled forward. In backward
    the hook declines to compile anyway (``convert_frame.in_backward``); this turns it off outright
    for our own backends, so the compile and every later backward step pay no callbacks.
    AOTAutograd's boxed calling convention (``_boxed_call``: one list argument) is kept."""
    no_hook_compiler = _C.NoHookCall(compiler)

    @functools.wraps(compiler)
    def compile_without_hook(gm, example_inputs, *args, **kwargs):
        with collector_off():  # (the backward's compile is outside the frame's)
            return without_hook(no_hook_compiler(gm, example_inputs, *args, **kwargs))
    return compile_without_hook


def without_hook(compiled):
    """``compiled`` called with this thread's hook off, keeping AOTAutograd's boxed convention."""
    if not getattr(compiled, "_boxed_call", False):
        return _C.NoHookCall(compiled)
    no_hook = _C.NoHookCall(compiled)

    def boxed(args):
        return no_hook(args)
    boxed._boxed_call = True
    return boxed
