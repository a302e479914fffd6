"""``pydynamo.compiler``: the names of ``torch.compiler`` that apply to pydynamo, with the same
meaning (docs/api.md lists them).

Not mirrored, on purpose: the ``*_unsafe`` guard switches (``skip_guard_on_inbuilt_nn_modules_unsafe``,
``keep_tensor_guards_unsafe``, ``skip_all_guards_unsafe``...), which serve compiled code to inputs
it may be wrong for, and ``set_stance(skip_guard_eval_unsafe=True)`` (refused).
"""
from torch.compiler import is_compiling, is_dynamo_compiling, is_exporting, nested_compile_region

from .api import allow_in_graph, substitute_in_graph
from .backends import list_backends
from .eval_frame import assume_constant_result, disable
from .eval_frame import compile as _compile
from .stance import set_stance


def compile(*args, **kwargs):
    """``pydynamo.compile`` (torch.compile's signature)."""
    return _compile(*args, **kwargs)


def reset():
    """Forget every compiled entry (``torch.compiler.reset``)."""
    import pydynamo
    pydynamo.reset()


__all__ = ["compile", "reset", "allow_in_graph", "substitute_in_graph", "assume_constant_result", "disable",
           "list_backends", "set_stance", "nested_compile_region", "is_compiling", "is_dynamo_compiling",
           "is_exporting"]
