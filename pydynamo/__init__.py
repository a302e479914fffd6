"""pydynamo: a just-in-time graph capturer for PyTorch programs (see README.md).

    @pydynamo.optimize("inductor")
    def fn(x): ...

    model = pydynamo.compile(model, backend="eager", fullgraph=True)
"""
import functools as _functools

from torch.compiler import is_compiling  # pydynamo's trace reads it True, as torch.compile's

from . import _C, config, debug, logs
from . import compiler  # noqa: E402 - torch.compiler's names (set_stance, nested_compile_region...)
from .api import allow_in_graph, disallow_in_graph, graph_break
from .backends import list_backends, lookup_backend, register_backend
from .dropin import install, installed, uninstall
from .eval_frame import OptimizedModule, assume_constant_result, disable, optimize, run, run_only
from .explain import ExplainOutput, explain
from .export import ExportResult, export, exported_program
from .shapes import mark_dynamic, mark_static, mark_static_address, maybe_mark_dynamic

_C.set_error_handler(logs.report_callback_error)
logs.configure(config.logs)
debug.start_from_env()  # PYDYNAMO_TRACE_DIR


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
        backend = _functools.partial(lookup_backend("triton"), mode=mode)
    elif mode is not None or options is not None:
        backend = _functools.partial(lookup_backend("inductor"), mode=mode, options=options)
    return optimize(backend, fullgraph=fullgraph, dynamic=dynamic)(model)


def reset():
    """Forget every compiled entry, skip mark and compiled graph."""
    from . import convert_frame, output_graph, resume
    _C.reset()
    convert_frame.reset()
    output_graph.reset()  # the compiled graphs and resume functions put in user globals
    resume.reset()
    _clear_shape_env_caches()


def _clear_shape_env_caches():
    """torch's ShapeEnv memoises some methods in class-level caches keyed by the instance, and
    FakeTensorMode caches kernel results keyed by symbolic sizes: both would keep every ShapeEnv
    (and what its facts reach) alive across resets."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    for name in dir(ShapeEnv):
        clear = getattr(getattr(ShapeEnv, name, None), "cache_clear", None)
        if callable(clear):
            clear()
    cache = getattr(FakeTensorMode, "cache", None)  # fake-kernel results, keyed by symbolic inputs
    if isinstance(cache, dict):
        cache.clear()


from . import dropin as _dropin  # noqa: E402
_dropin.install_from_env()  # PYDYNAMO_TORCH_COMPILE=1: torch.compile goes to pydynamo


__all__ = ["install", "uninstall", "installed", "optimize", "compile", "disable", "assume_constant_result", "reset", "explain", "ExplainOutput", "run", "run_only",
           "list_backends", "lookup_backend", "register_backend", "OptimizedModule", "config", "mark_dynamic", "mark_static",
           "maybe_mark_dynamic", "mark_static_address", "graph_break", "allow_in_graph", "disallow_in_graph",
           "is_compiling", "export", "exported_program", "ExportResult", "compiler"]
