"""Tensors: an FX node plus the fake tensor that gives its metadata.

Metadata is answered at trace time as a constant only where a guard makes the answer hold on
every later call that reuses the entry:

* pinned: TENSOR_MATCH pins, on every tensor input, its type, dtype, device, layout,
  requires_grad, sizes, strides and the inference, conjugate and negative bits; the properties
  in ``_PINNED_ATTRS`` / ``_CONSTANT_METHODS`` follow from these. A value computed in the graph
  gets them from ops on pinned inputs (and the guarded grad mode), as its fake tensor does.
* guarded where read: is_leaf and ``_GUARDED_METHODS`` (storage_offset(), _is_view(),
  is_pinned(), is_shared()) are facts about the input object that TENSOR_MATCH does not pin:
  each read adds its own guard (see ``_guarded_read``).
* refused: anything else whose answer is not a tensor. The graph path (``wrap_fx_value``) folds a
  non-tensor result into a constant only for the names in ``_FOLDABLE_METHODS`` and torch
  functions whose every tensor read is pinned (``_check_fold``).

Everything that computes on the data becomes a graph node; anything that needs the data itself
(``item()``, ``if x.sum():``) raises Unsupported. ``x.data`` and ``p.data = t`` are graph nodes
too (``_data_alias``, ``_set_data``); Python attributes (``y.tag = 5``) live in the trace and are
replayed on the real tensors after the graph (side_effects.py).
"""
import contextlib
import inspect
import operator
import types

import torch
import torch.fx
import torch.utils._pytree as pytree

from ..exc import DataDependentError, Unsupported
from ..source import AttrSource
from .base import GetAttrVariable, VariableTracker
from .constant import ConstantVariable
from .lists import SizeVariable, TupleVariable

# Properties that follow from what TENSOR_MATCH pins (device, layout, dtype, sizes, requires_grad).
_PINNED_ATTRS = frozenset({
    "shape", "dtype", "device", "layout", "ndim", "requires_grad", "is_cuda", "is_cpu", "is_mps",
    "is_xpu", "is_meta", "is_sparse", "is_sparse_csr", "is_mkldnn", "is_quantized", "is_nested",
    "itemsize", "nbytes"})
# Properties that compute a new tensor: graph nodes (getattr).
_ABSENT = object()


def tensorbase_method(name, self, *args, **kwargs):
    """TensorBase's own method ``name`` on ``self`` (``super().unflatten(dim, sizes)`` in
    Tensor's Python methods): a graph node's target, FX names it by this function."""
    return getattr(torch._C.TensorBase, name)(self, *args, **kwargs)
_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# Methods answered from the fake tensor as constants, all of their arguments constants: they
# follow from what TENSOR_MATCH pins (is_contiguous from sizes and strides, get_device from the
# device, is_inference / is_conj / is_neg are pinned bits).
_CONSTANT_METHODS = frozenset({
    "dim", "ndimension", "numel", "nelement", "element_size", "is_floating_point", "is_complex",
    "is_signed", "is_contiguous", "stride", "get_device", "is_inference", "is_conj", "is_neg"})
# Facts about the input object itself, not pinned by TENSOR_MATCH: guarded where read (and the
# attribute is_leaf).
_GUARDED_METHODS = frozenset({"storage_offset", "_is_view", "is_pinned", "is_shared"})
# Methods the graph may compute whose non-tensor result may be folded into a constant.
_FOLDABLE_METHODS = _CONSTANT_METHODS | {"size", "__len__", "is_same_size", "type", "dim_order"}
# torch functions answering from pinned metadata only (called with tensors, give non-tensors).
_FOLDABLE_FUNCTIONS = (torch.is_inference, torch.is_conj, torch.is_neg, torch.is_complex,
                       torch.is_floating_point, torch.numel, torch.is_same_size, torch.result_type)
# Methods that need the data, or leave the graph world.
_DATA_METHODS = frozenset({
    "item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__complex__",
    "data_ptr", "backward", "register_hook", "__array__", "untyped_storage", "storage"})


_COPY_PROTOCOL = ("__deepcopy__", "__copy__", "__reduce_ex__", "__reduce__", "__getstate__",
                  "__setstate__")


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
        if self._is_user_attr(name):
            try:
                self._user_attr(tx, name)
                return True
            except Unsupported as e:
                from .descriptors import is_attribute_error
                if is_attribute_error(e):
                    return False
                raise
        return hasattr(self.example_value, name)

    def _is_user_attr(self, name):
        """``name`` is not an attribute of the tensor's class: it can only be in the instance's
        ``__dict__`` (``x.tag = ...``)."""
        import inspect
        cls = self.python_cls
        if cls.__getattribute__ is not torch.Tensor.__getattribute__ or cls.__setattr__ is not torch.Tensor.__setattr__ \
                or inspect.getattr_static(cls, "__getattr__", None) is not None:
            raise Unsupported(f"attribute {name!r} of a {cls.__name__}, whose class customises attribute access")
        return inspect.getattr_static(cls, name, _ABSENT) is _ABSENT

    def _user_attr(self, tx, name):
        """A Python attribute stored on a graph input (or stored by the trace), guarded present
        (its value's own guards) or absent (NOT_PRESENT). A tensor computed by the graph is a new
        object that has only those the trace stored on it (an op that returns its input,
        ``x.add_(1)``, ``x.contiguous()``, returns the input's own fake tensor, so _input_entry
        finds the input)."""
        from .descriptors import missing
        entry = self._input_entry(tx)
        if entry is None:
            stored = tx.output.side_effects.load_tensor_attr(self, name)
            if stored is not None:
                return stored
            made = self._made_wrapper_attr(tx, name)
            if made is not None:
                return made
            raise missing(tx, self.python_cls, name)
        source, real, var = entry
        stored = tx.output.side_effects.load_attr(tx, var, name)
        if stored is not None:
            return stored
        from .builder import wrap_value
        attr = AttrSource(source, name)
        if name not in real.__dict__:
            tx.output.guards.NOT_PRESENT(attr)
            raise missing(tx, self.python_cls, name)
        return wrap_value(tx, real.__dict__[name], attr)

    def _made_wrapper_attr(self, tx, name):
        """An instance attribute of a wrapper subclass tensor the graph computes, as its fake
        (made by the subclass's own ``__torch_dispatch__`` from the guarded inputs) holds it: an
        inner tensor of its flatten protocol (``nt._values``) is a graph node reading it, a
        number, string or None a constant. None where the fake has no such attribute."""
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass
        fake = self.example_value
        if not is_traceable_wrapper_subclass(fake) or name not in fake.__dict__:
            return None
        value = fake.__dict__[name]
        if type(value) in (int, float, bool, str, type(None)):
            return ConstantVariable(value)
        if isinstance(value, torch.Tensor) and name in type(fake).__tensor_flatten__(fake)[0]:
            out = tx.output  # (an instance attribute: no __torch_function__ runs for it)
            out.torch_function_subclass_disabled += 1
            try:
                return out.call_graph(tx, "call_function", getattr, (self, ConstantVariable(name)), {})
            finally:
                out.torch_function_subclass_disabled -= 1
        raise Unsupported(f"attribute {name!r} of a {type(fake).__name__} the graph computes "
                          f"(a {type(value).__name__})")

    def store_attr(self, tx, name, value):
        """``x.name = value`` for an attribute torch.Tensor does not define: later reads in the
        trace see it; it is replayed after the graph on a graph input, and on a tensor the graph
        computes if the graph returns that tensor (else no one can see it). ``x.data = t``:
        _set_data."""
        if name == "data":
            return self._set_data(tx, value)
        if not self._is_user_attr(name):
            raise Unsupported(f"assignment to Tensor.{name} while tracing")
        entry = self._input_entry(tx)
        if entry is None:
            tx.output.side_effects.store_tensor_attr(self, name, value)
        else:
            tx.output.side_effects.store_attr(entry[2], name, value)

    def _data_alias(self, tx):
        """``x.data``: a new tensor on x's memory that autograd does not see; in the graph
        ``_get_data_attr``, what eager's getter runs. Its fake tensor shares x's version counter,
        which the real one does not: a change made through it counts as a change of x for the
        checks that read version counters (conservative; _set_data needs it)."""
        out = tx.output
        with out.fake_mode:
            fake = self.example_value.detach()
        node = out.graph.call_function(torch._C._autograd._get_data_attr, (self.node,))
        node.meta["example_value"] = fake
        return TensorVariable(node, fake)

    def _set_data(self, tx, value):
        """``p.data = t`` on a graph input: p keeps its identity and autograd metadata
        (requires_grad, grad, hooks, version counter) and takes t's memory, sizes and strides.
        The graph does it as torch.compile does: ``p.set_(t)`` under no_grad (AOTAutograd knows
        set_ on an input), then takes back the version bump that set_ makes and eager's setter
        does not (a tensor saved for backward would fail its check). The trace then sees p
        through a new fake tensor on t's memory, sharing t's version counter (a change through p
        is a change of t); the input's own fake tensor stays as read (the placeholder, guards and
        a backend re-reading the input describe p as passed).

        Refused where a backend would differ from eager: p already used by the graph (an op may
        have saved it for backward: eager's backward reads the new data, AOTAutograd's the old)
        or changed through an alias (AOTAutograd drops that change), another dtype or device
        (set_ refuses it), inference tensors, p read by two paths, p computed in the graph."""
        from .ctx import set_grad_mode
        entry = self._input_entry(tx)
        if entry is None:
            raise Unsupported("assignment to Tensor.data of a tensor computed in the graph")
        if not isinstance(value, TensorVariable) or not issubclass(value.python_type(), torch.Tensor):
            raise Unsupported(f"TypeError: assignment of {value} to Tensor.data (not a tensor)")
        source, real, var = entry
        out = tx.output
        old, new, orig = var.example_value, value.example_value, var.node.meta["example_value"]
        what = f"assignment to Tensor.data of {source.name()}"
        if (new.dtype, new.device, new.layout) != (old.dtype, old.device, old.layout):
            raise Unsupported(f"{what}: a tensor of another dtype, device or layout (not modelled)")
        if torch.is_inference_mode_enabled() or orig.is_inference() or new.is_inference():
            raise Unsupported(f"{what} in inference mode or with an inference tensor (not modelled)")
        if old.requires_grad and [_expr(s) for s in old.size()] != [_expr(s) for s in new.size()]:
            raise Unsupported(f"{what}: a tensor of other sizes, for a tensor that requires grad "
                              "(AOTAutograd fails on its gradient)")
        used = [n for n in var.node.users if not (n.target is torch._C._autograd._get_data_attr or (
            n.target is torch.Tensor.set_ or n.target is _undo_version_bump) and n.args[0] is var.node)]
        if used:
            raise Unsupported(f"{what} after the graph used it ({used[0].name}): an op may have saved "
                              "it for backward, which reads the new data in eager, the old in AOTAutograd")
        first = not out.side_effects.tensor_data_set(var)
        if first and orig._version != 0:
            raise Unsupported(f"{what} after the graph changed it in place (through .data or a "
                              "view): AOTAutograd would drop that change")
        if any(r is real and v is not var for _, r, v in out.inputs.values()):
            raise Unsupported(f"{what}: the frame reads that tensor by another path too")
        grad = torch.is_grad_enabled()
        if grad:
            set_grad_mode(tx, False)
        node = out.graph.call_function(torch.Tensor.set_, (var.node, value.node))
        if grad:
            set_grad_mode(tx, True)
        out.graph.call_function(_undo_version_bump, (var.node,))
        with out.fake_mode:
            fake = new.detach()
        fake.requires_grad_(old.requires_grad)
        node.meta["example_value"] = fake
        if first:  # the input counts as changed (the checks of which inputs alias read it)
            torch._C._autograd._unsafe_set_version_counter((orig,), (orig._version + 1,))
        var.example_value = fake
        out.side_effects.set_tensor_data(var, value)

    def var_getattr(self, tx, name):
        if name == "shape":
            return self.size_variable(tx)
        if name in _PINNED_ATTRS:
            return ConstantVariable(getattr(self.example_value, name))
        if name == "is_leaf":
            return self._guarded_read(tx, name)
        if name in _TENSOR_ATTRS:
            return tx.output.call_graph(tx, "call_function", getattr, (self, ConstantVariable(name)), {})
        if name == "grad" and self._input_entry(tx) is not None:
            from .builder import wrap_value  # a graph input's gradient: an input itself (or None), guarded
            source, real, _ = self._input_entry(tx)
            return wrap_value(tx, real.grad, AttrSource(source, "grad"))
        if name == "data":
            return self._data_alias(tx)
        if name in ("grad", "grad_fn", "_version"):
            raise Unsupported(f"Tensor.{name} while tracing")
        if self.python_cls is not torch.Tensor:
            from .dtensor import dtensor_attr, is_dtensor_class
            found = dtensor_attr(tx, self, name) if is_dtensor_class(self.python_cls) else None
            if found is not None:
                return found
        if callable(getattr(torch.Tensor, name, None)):
            return GetAttrVariable(self, name)
        if self._is_user_attr(name):
            return self._user_attr(tx, name)
        if self.python_cls is not torch.Tensor and inspect.getattr_static(torch.Tensor, name, _ABSENT) is _ABSENT:
            return self._class_attr(tx, name)
        raise Unsupported(f"Tensor attribute {name!r}")

    def _class_attr(self, tx, name):
        """A method or property a tensor subclass defines (``nt.values()``, ``nt.offsets()``):
        the function read where CPython's lookup finds it along the class's MRO (guarded), bound
        to the tensor, or the property's getter called on it. The instance's own ``__dict__``
        would shadow a method: guarded absent there (a graph input) or refused."""
        from ..source import ConstObjectSource, GetItemSource, TypeLookupSource, type_lookup
        from .builder import wrap_value
        from .functions import UserMethodVariable
        cls = self.python_cls
        raw = type_lookup(cls, name, _ABSENT)
        if not isinstance(raw, (types.FunctionType, property)):
            raise Unsupported(f"attribute {name!r} of a {cls.__name__} (a {type(raw).__name__} of the class)")
        fn_source = TypeLookupSource(ConstObjectSource(cls), name)
        if isinstance(raw, property):
            if raw.fget is None:
                raise Unsupported(f"AttributeError: property {name!r} of {cls.__name__} has no getter")
            getter = wrap_value(tx, raw.fget, AttrSource(fn_source, "fget"))
            return getter.call_function(tx, [self], {})
        entry = self._input_entry(tx)
        if entry is None:
            if tx.output.side_effects.load_tensor_attr(self, name) is not None:
                raise Unsupported(f"{cls.__name__}.{name} shadowed by an attribute the trace stored")
        else:
            source, real, var = entry
            if name in real.__dict__ or tx.output.side_effects.load_attr(tx, var, name) is not None:
                raise Unsupported(f"{cls.__name__}.{name} shadowed by the instance's own attribute")
            tx.output.guards.NOT_PRESENT(GetItemSource(AttrSource(source, "__dict__"), name))
        return UserMethodVariable(wrap_value(tx, raw, fn_source).value, self, fn_source)

    def call_method(self, tx, name, args, kwargs):
        if name in ("register_hook", "register_post_accumulate_grad_hook", "retain_grad"):
            from .hooks import tensor_hook_method  # replayed after the graph (hooks.py)
            return tensor_hook_method(tx, self, name, args, kwargs)
        if name in ("item", "tolist") and tx.output.shapes.shape_env.allow_scalar_outputs:
            return self._scalar_outputs(tx, name, args, kwargs)  # config.capture_scalar_outputs
        if name == "numpy":  # an ndarray sharing the tensor's memory (variables/ndarray.py)
            from .ndarray import tensor_numpy
            return tensor_numpy(tx, self, args, kwargs)
        if name in _DATA_METHODS:
            raise DataDependentError(f"Tensor.{name}() needs the tensor's data (data-dependent)",
                                     f"move .{name}() out of the compiled region, or keep the value "
                                     "a tensor")
        if name == "size":
            return self._size_method(tx, args, kwargs)
        if name == "as_subclass" and len(args) == 1 and not kwargs:
            from .subclasses import as_subclass, is_plain_subclass
            cls = args[0].as_python_constant()
            if not (isinstance(cls, type) and is_plain_subclass(cls)):
                raise Unsupported(f"Tensor.as_subclass({getattr(cls, '__name__', cls)}): not a plain subclass")
            return as_subclass(tx, self, cls)
        if name in _COPY_PROTOCOL:  # Python objects in and out (a memo, a reduce tuple)
            raise Unsupported(f"Tensor.{name} (copy.deepcopy / copy.copy / pickling of a tensor) "
                              "is not modelled")
        if name == "__len__":
            if args or kwargs:
                raise Unsupported("Tensor.__len__ with arguments")
            if self.example_value.dim() == 0:
                raise Unsupported("TypeError: len() of a 0-d tensor")
            return self.size_variable(tx).items[0]
        if name in _CONSTANT_METHODS:
            value = self._call_fake(name, args, kwargs)
            if name == "is_inference" and self._input_as_read(tx) is None:
                _guard_inference_mode(tx)
            if name == "stride" and self._input_as_read(tx) is None and \
                    any(s == 1 for s in self.example_value.size() if not _has_symbols(s)):
                # the stride of a size-1 dimension is free: fake tensors do not always pick the
                # one eager's TensorIterator picks, so it is not known before the graph runs
                raise Unsupported("stride() of a computed tensor with a size-1 dimension")
            if _has_symbols(value):  # numel() or stride() of a tensor with symbolic sizes
                return tx.output.call_graph(tx, "call_method", name, (self, *args), kwargs)
            from .builder import wrap_constant
            return wrap_constant(value)
        if name in _GUARDED_METHODS:
            if args or kwargs:
                raise Unsupported(f"Tensor.{name} with arguments")
            return self._guarded_read(tx, name)
        if name == "__getitem__":
            return tx.output.call_graph(tx, "call_function", operator.getitem, (self, args[0]), {})
        if name == "__setitem__":
            return tx.output.call_graph(tx, "call_function", operator.setitem,
                                        (self, args[0], args[1]), {})
        if name == "__contains__":
            raise DataDependentError("'in' on a tensor is data-dependent")
        if not callable(getattr(torch.Tensor, name, None)):
            raise Unsupported(f"Tensor.{name}")
        from .torch import scalar_tensor_rewrite
        rewritten = scalar_tensor_rewrite(tx, name, [self, *args], kwargs, method=True)
        if rewritten is not None:
            return rewritten
        return tx.output.call_graph(tx, "call_method", name, (self, *args), kwargs)

    def _scalar_outputs(self, tx, name, args, kwargs):
        """``x.item()`` as a graph node whose value is an unbacked SymInt / SymFloat / SymBool;
        ``x.tolist()`` of an integer tensor of static sizes as nested lists of those (as
        torch.compile captures them)."""
        if args or kwargs:
            raise Unsupported(f"Tensor.{name} with arguments")
        if name == "item":
            return tx.output.call_graph(tx, "call_method", "item", (self,), {})
        fake = self.example_value
        if fake.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64):
            raise DataDependentError(f"Tensor.tolist() of a {fake.dtype} tensor needs its data "
                                     "(only integer tensors are captured)")
        if _has_symbols(tuple(fake.size())):
            raise DataDependentError("Tensor.tolist() of a tensor with symbolic sizes")

        def tolist(var):
            if var.example_value.dim() == 0:
                return tx.output.call_graph(tx, "call_method", "item", (var,), {})
            from .lists import ListVariable
            return ListVariable([tolist(tx.output.call_graph(tx, "call_function", operator.getitem,
                                                             (var, ConstantVariable(i)), {}))
                                 for i in range(var.example_value.size(0))])
        return tolist(self)

    def _call_fake(self, name, args, kwargs):
        """``fake.name(*args, **kwargs)`` with constant arguments: every form the real method
        takes, and its errors (the real call raises them when the instruction runs natively)."""
        const_args, const_kwargs = _constant_args(name, args, kwargs)
        try:
            return getattr(self.example_value, name)(*const_args, **const_kwargs)
        except Exception as e:
            raise Unsupported(f"Tensor.{name} raised {type(e).__name__}: {e}") from None

    def _size_method(self, tx, args, kwargs):
        """``x.size()`` / ``x.size(d)`` / ``x.size(dim=d)``, with negative ``d``."""
        value = self._call_fake("size", args, kwargs)
        if isinstance(value, torch.Size):
            return self.size_variable(tx)
        const_args, const_kwargs = _constant_args("size", args, kwargs)
        dim = const_args[0] if const_args else const_kwargs["dim"]
        return self._size(tx, operator.index(dim) % self.example_value.dim(), value)

    # ---- facts about the input object, guarded where read -------------------------------------

    def _guarded_read(self, tx, name):
        """``is_leaf``, ``storage_offset()``, ``_is_view()``, ``is_pinned()``, ``is_shared()``.

        Of a graph input (or the input itself, returned by an in-place op): the guard pins the
        input's value at the call, and the answer is what the fake tensor, which started as the
        input and went through the same ops, says (pinned and shared: the real input's; fake
        tensors have no memory). Of a value computed in the graph: is_leaf and _is_view are what
        the graph's ops make them; storage_offset() depends on the offsets of the inputs whose
        storage it shares (guarded); pinned and shared memory are refused. An input whose .data
        the trace assigned keeps its is_leaf and _is_view (autograd metadata), the rest is that
        of a computed value."""
        fake = self.example_value
        if name == "storage_offset" and _has_symbols(fake.storage_offset()):
            # a symbolic input's offset: the graph computes it, the SHAPE_ENV check guards it
            return tx.output.call_graph(tx, "call_method", name, (self,), {})
        entry = self._input_entry(tx)
        if entry is not None and name in ("is_leaf", "_is_view"):
            found, fake = entry[:2], entry[2].node.meta["example_value"]
        else:
            found = self._input_as_read(tx)
        if found is not None:
            source, real = found
            if name in ("is_pinned", "is_shared"):
                value = getattr(real, name)()
            else:
                value = fake.is_leaf if name == "is_leaf" else getattr(fake, name)()
            _guard_input_read(tx, source, real, name)
            return ConstantVariable(value)
        if name in ("is_leaf", "_is_view"):
            return ConstantVariable(fake.is_leaf if name == "is_leaf" else fake._is_view())
        if name == "storage_offset":
            for source, real in self._inputs_sharing_storage(tx):
                _guard_input_read(tx, source, real, name)
            return ConstantVariable(int(fake.storage_offset()))
        raise Unsupported(f"Tensor.{name}() of a tensor computed in the graph")

    def _as_input(self, tx):
        """(source, real tensor) of the graph input this tensor is: by its source, or the same
        fake tensor (``x.add_(1)`` returns ``x``); None for a value computed in the graph."""
        entry = self._input_entry(tx)
        return entry[:2] if entry is not None else None

    def _input_as_read(self, tx):
        """(source, real tensor) as _as_input, while the input's memory and layout are still the
        ones it had at the call (no ``.data =`` since): facts about them are read off the real
        input. None otherwise."""
        entry = self._input_entry(tx)
        if entry is None or entry[2].node.meta["example_value"] is not entry[2].example_value:
            return None
        return entry[:2]

    def _input_entry(self, tx):
        """(source, real tensor, tracker) of the graph input this tensor is, as _as_input."""
        if self.source is not None and self.source.name() in tx.output.inputs:
            return tx.output.inputs[self.source.name()]
        for source, real, var in tx.output.inputs.values():
            if isinstance(var, TensorVariable) and var.example_value is self.example_value:
                return source, real, var
        return None

    def _inputs_sharing_storage(self, tx):
        def storage(fake):
            try:
                return fake.untyped_storage()._cdata
            except Exception:
                raise Unsupported("storage_offset() of a tensor whose storage cannot be "
                                  "compared with the inputs'") from None
        mine = storage(self.example_value)
        return [(source, real) for source, real, var in tx.output.inputs.values()
                if isinstance(var, TensorVariable) and storage(var.example_value) == mine]

    def unpack_var_sequence(self, tx):
        if self.example_value.dim() == 0:
            raise Unsupported("iteration over a 0-d tensor")
        return tx.output.call_graph(tx, "call_method", "unbind", (self,), {}).items

    def _repr_value(self):
        ev = self.example_value
        return f"{self.node.name}: {ev.dtype} {list(ev.shape)}"


def _expr(size):
    """A size as an int or a sympy expression (compared without guarding anything)."""
    return size.node.expr if isinstance(size, torch.SymInt) else size


def _undo_version_bump(t):
    """Graph op after the ``set_`` that models ``t.data = ...`` (TensorVariable._set_data)."""
    torch._C._autograd._unsafe_set_version_counter((t,), (t._version - 1,))


def _constant_args(name, args, kwargs):
    try:
        return ([a.as_python_constant() for a in args],
                {k: v.as_python_constant() for k, v in kwargs.items()})
    except Unsupported:
        raise Unsupported(f"Tensor.{name} with non-constant arguments") from None


class _InputReads:
    """Guard predicate: ``v.name()`` (is_pinned, is_shared, storage_offset, _is_view) still
    returns ``value``. Holds the answer only, never the tensor."""

    def __init__(self, name, value):
        self.name, self.value = name, value

    def __call__(self, v):
        got = getattr(v, self.name)()
        return type(got) is type(self.value) and got == self.value

    def __repr__(self):
        return f".{self.name}() == {self.value!r}"


def _guard_input_read(tx, source, real, name):
    """Pin ``real.name`` (the input as the call passes it) for ``source``."""
    guards = tx.output.guards
    if name == "is_leaf":  # an attribute: one C equality check
        guards.EQUALS_MATCH(AttrSource(source, "is_leaf"), real.is_leaf)
        return
    value = getattr(real, name)()
    guards.PREDICATE(source, _InputReads(name, value), f"{source.name()}.{name}() == {value!r}")


def _guard_inference_mode(tx):
    """A tensor made by the graph is an inference tensor exactly when inference mode is on
    (``x.is_inference()`` of a computed value): the mode the trace ran in follows from the one
    the frame was entered in, guarded here, and the trace's own ``torch.inference_mode``
    blocks (variables/ctx.py)."""
    from .ctx import guard_entry_inference_mode
    guard_entry_inference_mode(tx)


def _has_symbols(value):
    from ..shapes import is_symbolic_value
    if isinstance(value, (tuple, list)):
        return any(_has_symbols(v) for v in value)
    return is_symbolic_value(value)


def _is_graph_value(v):
    return isinstance(v, torch.Tensor) or _has_symbols(v)


def result_class(fake):
    """The class of the real tensor a graph value stands for: torch.Tensor, or a traceable
    wrapper subclass (its fake is an instance of it, with fake inner tensors; subclasses.py)."""
    from torch._subclasses.fake_tensor import FakeTensor
    cls = type(fake)
    return torch.Tensor if cls is FakeTensor or cls is torch.Tensor else cls


def wrap_fx_value(tx, node, value):
    """The tracker for what a graph node returned (``value`` is its fake result)."""
    from .sym import SymNodeVariable
    graph = tx.output.graph
    if isinstance(value, torch.Tensor):
        return TensorVariable(node, value, python_cls=result_class(value))
    if _has_symbols(value) and not isinstance(value, (tuple, list)):
        return SymNodeVariable.create(node, value)
    if isinstance(value, (tuple, list)) and any(_is_graph_value(v) for v in value):
        if any(not _is_graph_value(v) and v is not None for v in value):
            _check_fold(tx, node, value)
        items = []
        for i, v in enumerate(value):
            if _is_graph_value(v):
                item_node = graph.call_function(operator.getitem, (node, i))
                item_node.meta["example_value"] = v
                items.append(TensorVariable(item_node, v, python_cls=result_class(v)) if isinstance(v, torch.Tensor)
                             else SymNodeVariable.create(item_node, v))
            else:
                items.append(_constant_result(v))
        if isinstance(value, list):
            from .lists import ListVariable
            return ListVariable(items)
        if type(value) is torch.Size:  # symbolic sizes (torch.broadcast_shapes)
            return SizeVariable(items)
        return TupleVariable(items, tuple_cls=type(value))
    # A Python value computed from metadata only: fold it, where guards pin that metadata. None
    # is what in-place calls such as setitem return: those nodes stay for their effect.
    if value is not None or isinstance(node.target, types.FunctionType):
        _check_fold(tx, node, value)
    if value is not None and not node.users:
        inputs = node.all_input_nodes
        graph.erase_node(node)
        for arg in inputs:  # the torch.Size nodes made for its arguments
            if arg.target is torch.Size and not arg.users:
                graph.erase_node(arg)
    return _constant_result(value)


def _check_fold(tx, node, value):
    """Raise Unsupported unless ``value``, a non-tensor result of ``node``, follows from what the
    guards pin. A tensor method: its name must be in ``_FOLDABLE_METHODS``. A function: called
    again on the fake arguments while ``_TensorReads`` records each tensor property or method it
    reads and each torch function it calls whose result is not a tensor; all of those must be
    pinned ones. A builtin that reads tensors where the record cannot see is refused."""
    what = getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        if node.target in _FOLDABLE_METHODS:
            return
        raise Unsupported(f"Tensor.{node.target}() gives a {type(value).__name__} result that no "
                          "guard pins (the next call may differ)")
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("example_value"))
    if not any(isinstance(a, torch.Tensor) for a in pytree.tree_leaves((args, kwargs))):
        return  # computed from constants (and symbolic sizes), not from a tensor's properties
    if isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        # aten ops bypass torch function modes: judged by name (aten.sym_size is Tensor.size)
        name = node.target._qualified_op_name.split("::")[-1] if isinstance(
            node.target, torch._ops.OpOverloadPacket) else node.target._opname
        if name.removeprefix("sym_") in _FOLDABLE_METHODS:
            return
        raise Unsupported(f"aten.{name} gives a {type(value).__name__} result that no guard pins")
    reads = _TensorReads()
    out = tx.output
    try:
        with out.fake_mode, (_python_dispatcher() if out.shapes.used else contextlib.nullcontext()), reads:
            node.target(*args, **kwargs)
    except Exception as e:
        raise Unsupported(f"{what} raised {type(e).__name__} while tracing: {e}") from None
    if any(name == "is_inference" for name, _ in reads.seen):
        _guard_inference_mode(tx)  # of an input: pinned; of a computed value: the mode's
    unpinned = sorted({name for name, pinned in reads.seen if not pinned})
    if unpinned:
        raise Unsupported(f"{what} reads {', '.join(unpinned)} of a tensor, which no guard pins "
                          "(the next call may differ)")
    if not reads.seen and not isinstance(node.target, types.FunctionType):
        raise Unsupported(f"{what} gives a {type(value).__name__} result computed from tensors in "
                          "a way the guards cannot follow")


def _python_dispatcher():
    from torch._dispatch.python import enable_python_dispatcher
    return enable_python_dispatcher()


class _TensorReads(torch.overrides.TorchFunctionMode):
    """Records ``(name, pinned)`` for each call that takes tensors (a torch function, a tensor
    method, a property getter) and returns something other than a tensor or a symbolic size."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if out is not None and not any(_is_graph_value(v) for v in pytree.tree_leaves(out)):
            self.seen.append(_pinned_read(func))
        return out


def _pinned_read(func):
    """(name, whether what it answers is pinned) for a function seen by ``_TensorReads``."""
    if any(func is f for f in _FOLDABLE_FUNCTIONS):
        return func.__name__, True
    name = getattr(func, "__name__", repr(func))
    if name == "__get__":  # a property getter: torch.Tensor.<name>.__get__
        name = getattr(func.__self__, "__name__", "?")
        return name, getattr(torch.Tensor, name, None) is func.__self__ and name in _PINNED_ATTRS
    return name, getattr(torch.Tensor, name, None) is func and name in _FOLDABLE_METHODS


def _constant_result(value):
    from .builder import wrap_constant
    try:
        return wrap_constant(value)
    except Unsupported:
        raise Unsupported(f"a torch call returned {type(value).__name__}, which is not "
                          "supported while tracing") from None
