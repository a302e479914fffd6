"""Functions the user marked (pydynamo/api.py): ``graph_break`` (a break where it is called),
``allow_in_graph`` (one opaque graph node, not traced), ``disallow_in_graph`` (a break; a torch
op is not put in the graph). TorchScript functions are allowed in the graph unmarked. Pinned by identity like any function read from the inputs.
"""
import types

import torch

from ..exc import Unsupported
from .constant import ConstantVariable
from .base import ObjectVariable


def marked_kind(value):
    """The mark the trace honours on ``value``, or None. ``allow`` on a torch callable changes
    nothing: pydynamo puts those in the graph already (and models some of them itself)."""
    from ..api import mark_of
    kind = mark_of(value)
    if kind is None and isinstance(value, torch.jit.ScriptFunction):
        kind = "allow"  # torch.jit.script / torch.jit.trace functions: one opaque call, as torch.compile
    if kind == "allow":
        from .torch import is_torch_callable
        if isinstance(value, type) or is_torch_callable(value):
            return None
    return kind


def is_marked(value):
    return callable(value) and marked_kind(value) is not None


def _in_torch_optimizer(tx):
    """torch.compile's ``graph_break()`` called by torch.optim's ``_use_grad`` around a step: it
    is there so that torch.compile's AOTAutograd sees the step as an inference graph; it changes
    no value, and pydynamo captures the step whole (the grad-mode switches are graph nodes)."""
    import os
    return os.sep + os.path.join("torch", "optim") + os.sep in tx.code.co_filename and \
        tx.f_globals.get("__name__", "").startswith("torch.optim")


class MarkedFunctionVariable(ObjectVariable):
    def __init__(self, value, source=None):
        super().__init__(value, source)
        self.kind = marked_kind(value)

    def call_function(self, tx, args, kwargs):
        if self.kind == "allow":
            result = tx.output.call_graph(tx, "call_function", _graph_target(self.value), tuple(args), kwargs)
            if not _is_none(result) and not _holds_graph_value(result):
                # folding its result into the compiled code would assume it never changes
                raise Unsupported(f"{self._repr_value()}, marked allow_in_graph, returned no tensor")
            return result
        if self.kind == "graph_break":
            if _in_torch_optimizer(tx):
                return ConstantVariable(None)
            msg = [a.as_python_constant() for a in [*args, *kwargs.values()] if a.is_python_constant()]
            raise Unsupported("call to graph_break()" + (f": {msg[0]}" if msg and msg[0] else ""),
                              "remove the graph_break() call to capture across it")
        name = getattr(self.value, "__qualname__", repr(self.value))
        raise Unsupported(f"call to {name}, which is marked disallow_in_graph",
                          "remove the disallow_in_graph mark to capture it")

    def var_getattr(self, tx, name):
        if isinstance(self.value, types.FunctionType):  # __name__, __wrapped__...: as unmarked
            from .functions import UserFunctionVariable
            return UserFunctionVariable(self.value, self.source).var_getattr(tx, name)
        raise Unsupported(f"attribute {name!r} of {self._repr_value()}, marked {self.kind}")

    def _repr_value(self):
        return getattr(self.value, "__qualname__", None) or repr(self.value)


def _graph_target(fn):
    """``fn`` as an FX call target: a TorchScript function has no ``__name__`` for the graph's
    code, so it is called through a plain function named after it."""
    if not isinstance(fn, torch.jit.ScriptFunction):
        return fn

    def call(*args, **kwargs):
        return fn(*args, **kwargs)
    call.__name__ = call.__qualname__ = f"script_{fn.name}"
    return call


def _is_none(var):
    from .constant import ConstantVariable
    return isinstance(var, ConstantVariable) and var.value is None


def _holds_graph_value(var):
    from ..output_graph import walk_values
    from .sym import SymNodeVariable
    from .tensor import TensorVariable
    return any(isinstance(v, (TensorVariable, SymNodeVariable)) for v in walk_values([var]))


class SubstitutedVariable(ObjectVariable):
    """A function with a replacement registered by ``substitute_in_graph``: its calls trace the
    replacement (or, with ``can_constant_fold_through`` and constant arguments, call it)."""

    def call_function(self, tx, args, kwargs):
        from ..api import substitute_of
        from .builder import wrap_constant
        from .functions import UserFunctionVariable
        replacement, fold = substitute_of(self.value)
        if fold and all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            return wrap_constant(self.value(*(a.as_python_constant() for a in args),
                                            **{k: v.as_python_constant() for k, v in kwargs.items()}))
        if not isinstance(replacement, types.FunctionType):
            raise Unsupported(f"the replacement of {self.value!r} is not a Python function")
        return UserFunctionVariable(replacement).call_function(tx, list(args), dict(kwargs))
