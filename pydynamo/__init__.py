"""pydynamo: a just-in-time graph capturer for PyTorch programs (see README.md).

    @pydynamo.optimize("inductor")
    def fn(x): ...

    model = pydynamo.compile(model, backend="eager", fullgraph=True)
"""
from torch.compiler import is_compiling  # pydynamo's trace reads it True, as torch.compile's

from . import _C, config, debug, logs
from . import compiler  # noqa: E402 - torch.compiler's names (set_stance, nested_compile_region...)
from .api import allow_in_graph, disallow_in_graph, graph_break
from .backends import list_backends, lookup_backend, register_backend
from .dropin import install, installed, uninstall
from .eval_frame import OptimizedModule, assume_constant_result, compile, disable, optimize, run, run_only
from .explain import ExplainOutput, explain
from .export import ExportResult, export, exported_program
from .shapes import mark_dynamic, mark_static, mark_static_address, maybe_mark_dynamic

_C.set_error_handler(logs.report_callback_error)
logs.configure(config.logs)
debug.start_from_env()  # PYDYNAMO_TRACE_DIR


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
