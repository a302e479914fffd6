"""Tensors: an FX node plus the fake tensor that gives its metadata.

Metadata (shape, dtype, device, ...) is static: it is guarded by TENSOR_MATCH on the inputs and
follows from them, so it is answered at trace time as constants. Everything that computes on the
data becomes a graph node; anything that needs the data itself (``item()``, ``if x.sum():``)
raises Unsupported.
"""
import operator

import torch

from ..exc import DataDependentError, Unsupported
from .base import GetAttrVariable, VariableTracker
from .constant import ConstantVariable
from .lists import SizeVariable, TupleVariable

# Properties answered from the fake tensor as constants.
_CONSTANT_ATTRS = frozenset({
    "dtype", "device", "layout", "ndim", "requires_grad", "is_cuda", "is_sparse", "is_quantized",
    "is_meta", "is_leaf", "is_nested", "is_mps", "is_cpu", "itemsize", "nbytes"})
# Properties that compute a new tensor: graph nodes (getattr).
_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# Methods answered as constants.
_CONSTANT_METHODS = frozenset({
    "dim", "ndimension", "numel", "nelement", "element_size", "is_floating_point", "is_complex",
    "is_contiguous", "stride", "storage_offset", "get_device", "is_signed", "has_names"})
# Methods that need the data, or leave the graph world.
_DATA_METHODS = frozenset({
    "item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__complex__",
    "data_ptr", "backward", "register_hook", "__array__", "untyped_storage", "storage"})


class TensorVariable(VariableTracker):
    def __init__(self, node, example_value, source=None, python_cls=torch.Tensor):
        super().__init__(source)
        self.node = node
        self.example_value = example_value
        self.python_cls = python_cls

    def python_type(self):
        return self.python_cls

    def truth(self, tx):
        raise DataDependentError("data-dependent control flow: branching on the value of a tensor",
                                 "use torch.where(cond, a, b) to select values instead of branching")

    def size_variable(self, tx=None):
        """x.shape: constants, and graph values (``x.size(i)`` nodes) for symbolic sizes."""
        return SizeVariable([self._size(tx, i, s) for i, s in enumerate(self.example_value.size())])

    def _size(self, tx, dim, size):
        if not isinstance(size, torch.SymInt) or not size.node.expr.free_symbols:
            return ConstantVariable(int(size))
        return tx.output.call_graph(tx, "call_method", "size", (self, ConstantVariable(dim)), {})

    def has_attr(self, tx, name):
        return hasattr(self.example_value, name)

    def var_getattr(self, tx, name):
        if name == "shape":
            return self.size_variable(tx)
        if name in _CONSTANT_ATTRS:
            return ConstantVariable(getattr(self.example_value, name))
        if name in _TENSOR_ATTRS:
            return tx.output.call_graph(tx, "call_function", getattr, (self, ConstantVariable(name)), {})
        if name in ("grad", "data", "grad_fn", "_version"):
            raise Unsupported(f"Tensor.{name} while tracing")
        if callable(getattr(torch.Tensor, name, None)):
            return GetAttrVariable(self, name)
        raise Unsupported(f"Tensor attribute {name!r}")

    def call_method(self, tx, name, args, kwargs):
        if name in _DATA_METHODS:
            raise DataDependentError(f"Tensor.{name}() needs the tensor's data (data-dependent)",
                                     f"move .{name}() out of the compiled region, or keep the value "
                                     "a tensor")
        if name == "size":
            size = self.size_variable(tx)
            return size if not args else size.getitem(tx, args[0])
        if name == "__len__":
            if self.example_value.dim() == 0:
                raise Unsupported("TypeError: len() of a 0-d tensor")
            return self.size_variable(tx).items[0]
        if name in _CONSTANT_METHODS:
            try:
                const_args = [a.as_python_constant() for a in args]
                const_kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
            except Unsupported:
                raise Unsupported(f"Tensor.{name} with non-constant arguments") from None
            from .builder import wrap_constant
            value = getattr(self.example_value, name)(*const_args, **const_kwargs)
            if _has_symbols(value):  # numel() or stride() of a tensor with symbolic sizes
                return tx.output.call_graph(tx, "call_method", name, (self, *args), kwargs)
            return wrap_constant(value)
        if name == "__getitem__":
            return tx.output.call_graph(tx, "call_function", operator.getitem, (self, args[0]), {})
        if name == "__setitem__":
            return tx.output.call_graph(tx, "call_function", operator.setitem,
                                        (self, args[0], args[1]), {})
        if name == "__contains__":
            raise DataDependentError("'in' on a tensor is data-dependent")
        if not callable(getattr(torch.Tensor, name, None)):
            raise Unsupported(f"Tensor.{name}")
        return tx.output.call_graph(tx, "call_method", name, (self, *args), kwargs)

    def unpack_var_sequence(self, tx):
        if self.example_value.dim() == 0:
            raise Unsupported("iteration over a 0-d tensor")
        return tx.output.call_graph(tx, "call_method", "unbind", (self,), {}).items

    def _repr_value(self):
        ev = self.example_value
        return f"{self.node.name}: {ev.dtype} {list(ev.shape)}"


def _has_symbols(value):
    from ..shapes import is_symbolic_value
    if isinstance(value, (tuple, list)):
        return any(_has_symbols(v) for v in value)
    return is_symbolic_value(value)


def _is_graph_value(v):
    return isinstance(v, torch.Tensor) or _has_symbols(v)


def wrap_fx_value(tx, node, value):
    """The tracker for what a graph node returned (``value`` is its fake result)."""
    from .sym import SymNodeVariable
    graph = tx.output.graph
    if isinstance(value, torch.Tensor):
        return TensorVariable(node, value)
    if _has_symbols(value) and not isinstance(value, (tuple, list)):
        return SymNodeVariable.create(node, value)
    if isinstance(value, (tuple, list)) and any(_is_graph_value(v) for v in value):
        items = []
        for i, v in enumerate(value):
            if _is_graph_value(v):
                item_node = graph.call_function(operator.getitem, (node, i))
                item_node.meta["example_value"] = v
                items.append(TensorVariable(item_node, v) if isinstance(v, torch.Tensor)
                             else SymNodeVariable.create(item_node, v))
            else:
                items.append(_constant_result(v))
        if isinstance(value, list):
            from .lists import ListVariable
            return ListVariable(items)
        return TupleVariable(items, tuple_cls=type(value))
    # A Python value computed from metadata only (shapes are static): fold it. None is what
    # in-place calls such as setitem return: those nodes stay for their effect.
    if value is not None and not node.users:
        graph.erase_node(node)
    return _constant_result(value)


def _constant_result(value):
    from .builder import wrap_constant
    try:
        return wrap_constant(value)
    except Unsupported:
        raise Unsupported(f"a torch call returned {type(value).__name__}, which is not "
                          "supported while tracing") from None
