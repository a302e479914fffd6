"""Tensor subclasses as graph inputs.

A *traceable wrapper subclass* (``__torch_dispatch__`` with the ``__tensor_flatten__`` /
``__tensor_unflatten__`` protocol: ``TwoTensor``, DTensor, float8 wrappers) whose
``__torch_function__`` is torch's disabled one is traced as torch.compile traces it: the graph
input's fake value is an instance of the subclass around fake inner tensors (torch's fake mode
converts it through the protocol), so each op the trace records runs the subclass's
``__torch_dispatch__`` on fakes and its results are instances again (``tensor.result_class``).
The backend receives the real subclass instances; AOTAutograd flattens them into their inner
tensors and rebuilds the outputs (its subclass support), and the ``eager`` backend runs the ops on
them as they are.

Guards: the outer tensor's TENSOR_MATCH (exact type, sizes, strides, dtype, device...), the
flatten context (``__tensor_flatten__()[1]``: placements, a scale's dtype...) by equality, each
inner tensor's, recursively, and an opaque inner object (DTensor's device mesh) by identity. Sizes are static (a recompile per new size).

Refused with the subclass's name: a subclass with a Python ``__torch_function__`` (its override
would have to be inlined at every op) and a non-traceable one.
"""
import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..exc import Unsupported
from ..source import AttrSource


def is_wrapper_subclass(value):
    return type(value) not in (torch.Tensor, torch.nn.Parameter) and is_traceable_wrapper_subclass(value)


def check_supported(value):
    cls = type(value)
    if not is_traceable_wrapper_subclass(value):
        raise Unsupported(f"tensor subclass {cls.__name__} (neither torch.Tensor nor a traceable "
                          "wrapper subclass with __tensor_flatten__/__tensor_unflatten__)")
    if cls.__torch_function__ is not torch._C._disabled_torch_function_impl:
        raise Unsupported(f"tensor subclass {cls.__name__} with a Python __torch_function__ "
                          "(only wrapper subclasses whose __torch_function__ is disabled are traced)")


def guard_subclass(guards, source, value):
    """TENSOR_MATCH of ``value`` and, through the flatten protocol, of its inner tensors; the
    flatten context by equality."""
    check_supported(value)
    guards.TENSOR_MATCH(source, value)
    attrs, ctx = value.__tensor_flatten__()
    guards.PREDICATE(source, _FlattensTo(tuple(attrs), ctx),
                     f"{source.name()}.__tensor_flatten__() == ({list(attrs)!r}, {ctx!r})")
    for name in attrs:
        inner = getattr(value, name)
        if not isinstance(inner, torch.Tensor):  # an opaque object (DTensor's device mesh)
            guards.ID_MATCH(AttrSource(source, name), inner)
        elif is_wrapper_subclass(inner):
            guard_subclass(guards, AttrSource(source, name), inner)
        else:
            guards.TENSOR_MATCH(AttrSource(source, name), inner)


class _FlattensTo:
    """The subclass instance flattens to the same inner-tensor names and an equal context (the
    metadata its ops read: DTensor's spec, a float8 tensor's dtype)."""

    def __init__(self, attrs, ctx):
        self.attrs, self.ctx = attrs, ctx

    def __call__(self, v):
        attrs, ctx = v.__tensor_flatten__()
        return tuple(attrs) == self.attrs and type(ctx) is type(self.ctx) and ctx == self.ctx
