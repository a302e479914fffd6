"""NumPy arrays, traced as tensors through torch's NumPy layer (``torch._numpy``).

An ``ndarray`` input becomes a tensor graph input that shares its memory (``torch.from_numpy``
in the code that calls the graph); each NumPy function, ndarray method and operator becomes one
graph node that calls the ``torch._numpy`` equivalent on those tensors; an array the frame
returns or keeps is turned back into an ``ndarray`` after the graph (sharing the output's
memory), or is the input object itself when the trace left it one.

``torch._numpy`` follows NumPy's rules, but is not NumPy: every call is also run at trace time
by NumPy itself on stand-in arrays (zeros of the same dtypes and shapes), and a call whose
result differs in kind, dtype or shape from what the graph computes is refused (a graph break:
NumPy runs it). That check also tells which results NumPy gives as scalars (``a.sum()`` is a
``numpy.float64``, not a 0-d array); those leave the frame as NumPy scalars, as in eager.

Refused (a break): NumPy scalars as arguments (their dtype would be lost in the graph's code),
``numpy.random`` (its own generator), functions with no ``torch._numpy`` equivalent, reading an
array's data in Python (``float(a)``, ``if a.any():``, ``a.tolist()``), mixing arrays with
tensors in one operation, arrays that are not writeable, aligned and in native byte order.
"""
import operator
import warnings

import torch
import torch._numpy as tnp
import torch.utils._pytree as pytree

from ..exc import DataDependentError, Unsupported
from ..source import Source
from .base import ObjectVariable, VariableTracker
from .constant import ConstantVariable

try:
    import numpy as np
except ImportError:  # NumPy is optional (torch runs without it): then no value is NumPy's
    np = None

# Attributes of an array that its (static) metadata answers.
_META_ATTRS = frozenset({"shape", "ndim", "size", "dtype", "itemsize", "nbytes"})
# Attributes that compute a new array: graph nodes.
_ARRAY_ATTRS = frozenset({"T", "real", "imag", "mT"})
# Methods and conversions that need the data itself.
_DATA_METHODS = frozenset({"item", "tolist", "tobytes", "tofile", "dump", "dumps", "__bool__", "__int__",
                           "__float__", "__index__", "__complex__", "__array__", "__iter__", "__reduce__",
                           "__reduce_ex__", "__deepcopy__", "__copy__", "view", "resize", "setflags",
                           "getfield", "setfield", "byteswap", "newbyteorder", "tostring"})
_DTYPES = frozenset() if np is None else frozenset(
    np.dtype(n) for n in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
                          "complex64", "complex128"))


class NumpyTensorSource(Source):
    """The tensor sharing an ndarray input's memory: what generated code passes to the graph.
    Guards read the array itself (``base``)."""

    def __init__(self, base):
        self.base = base

    def name(self):
        return f"torch.from_numpy({self.base.name()})"

    def steps(self):
        raise AssertionError("guards read an ndarray input through its own source (.base)")

    def reconstruct(self, codegen):
        codegen.load_function(torch.from_numpy)
        codegen.source(self.base)
        codegen.append_call(1)


class NdarrayIs:
    """Guard on an ndarray input: the exact type, dtype, shape, strides and the flags that let it
    be a tensor (writeable, aligned; native byte order is part of the dtype)."""

    def __init__(self, value):
        self.dtype, self.shape, self.strides = value.dtype, value.shape, value.strides

    def __call__(self, v):
        return type(v) is np.ndarray and v.dtype == self.dtype and v.shape == self.shape and \
            v.strides == self.strides and v.flags.writeable and v.flags.aligned

    def __repr__(self):
        return f"ndarray({self.dtype}, shape={self.shape}, strides={self.strides}, writeable)"


def is_ndarray(value):
    return np is not None and type(value) is np.ndarray


def wrap_ndarray(tx, value, source):
    """An ndarray input: a tensor graph input (static sizes) read through torch.from_numpy."""
    if source is None:
        raise Unsupported("an ndarray that is not reachable from the frame's inputs")
    if value.dtype not in _DTYPES or not value.dtype.isnative:
        raise Unsupported(f"an ndarray of dtype {value.dtype} (torch's NumPy layer does not take it)")
    if not (value.flags.writeable and value.flags.aligned):
        raise Unsupported("an ndarray that is read-only or not aligned")
    tx.output.guards.PREDICATE(source, NdarrayIs(value), f"{source.name()}: {NdarrayIs(value)!r}")
    try:
        tensor = torch.from_numpy(value)
    except Exception as e:
        raise Unsupported(f"an ndarray torch cannot view ({type(e).__name__}: {e})") from None
    var = tx.output.add_graph_input(NumpyTensorSource(source), tensor, static=True)
    tx.output.input_arrays[var.source.name()] = value
    return NdarrayVariable(var.node, var.example_value, source)


class NdarrayVariable(VariableTracker):
    """An ndarray: a graph value (``node``, its fake tensor ``example_value``). ``scalar``: NumPy
    gives this value as a NumPy scalar (a reduction, an element), not as a 0-d array."""

    def __init__(self, node, example_value, source=None, scalar=False):
        super().__init__(source)
        self.node, self.example_value, self.scalar = node, example_value, scalar
        self.constant = None  # the NumPy scalar this array stands for (_scalar_operand)

    def python_type(self):
        return type(self._stand_in()) if self.scalar else np.ndarray

    def _stand_in(self):
        """Zeros of this array's dtype and shape: what NumPy runs on at trace time."""
        z = np.zeros(tuple(self.example_value.shape), dtype=_np_dtype(self.example_value.dtype))
        return z[()] if self.scalar else z

    def truth(self, tx):
        raise DataDependentError("data-dependent control flow: branching on the value of an ndarray",
                                 "use numpy.where to select values instead of branching")

    def var_getattr(self, tx, name):
        if name in _META_ATTRS:
            return _constant(getattr(self._stand_in(), name))
        if name in _ARRAY_ATTRS:
            return numpy_call(tx, f"ndarray.{name}", _Attr(name), [self], {})
        if name in ("flags", "base", "strides", "data", "ctypes", "flat"):
            raise Unsupported(f"ndarray.{name} while tracing (the memory of a computed array is not known)")
        if callable(getattr(np.ndarray, name, None)):
            from .base import GetAttrVariable
            return GetAttrVariable(self, name)
        raise Unsupported(f"ndarray attribute {name!r}")

    def call_method(self, tx, name, args, kwargs):
        if name in _DATA_METHODS:
            raise DataDependentError(f"ndarray.{name}() needs the array's data (data-dependent)",
                                     f"move .{name}() out of the compiled region")
        if name == "__len__":
            shape = self.example_value.shape
            if not shape:
                raise Unsupported("TypeError: len() of unsized object")
            return ConstantVariable(int(shape[0]))
        if name == "__getitem__":
            return numpy_call(tx, "ndarray.__getitem__", operator.getitem, [self, *args], kwargs)
        if name == "__setitem__":
            return numpy_call(tx, "ndarray.__setitem__", operator.setitem, [self, *args], kwargs)
        if name == "__contains__":
            raise DataDependentError("'in' on an ndarray is data-dependent")
        if not callable(getattr(tnp.ndarray, name, None)) or not callable(getattr(np.ndarray, name, None)):
            raise Unsupported(f"ndarray.{name} has no equivalent in torch's NumPy layer")
        return numpy_call(tx, f"ndarray.{name}", _Method(name), [self, *args], kwargs)

    def unpack_var_sequence(self, tx):
        shape = self.example_value.shape
        if not shape:
            raise Unsupported("TypeError: iteration over a 0-d array")
        return [numpy_call(tx, "ndarray.__getitem__", operator.getitem, [self, ConstantVariable(i)], {})
                for i in range(int(shape[0]))]

    def reconstruct(self, codegen):
        if self.source is not None and self.node.op == "placeholder":
            return self.source.reconstruct(codegen)  # the input object itself
        if self.node not in codegen.graph_outputs:
            raise Unsupported(f"ndarray {self} is neither a graph output nor an input")
        codegen.load_function(_to_numpy_scalar if self.scalar else _to_numpy)
        codegen.load_local("___graph_out")
        codegen.load_const(codegen.graph_outputs[self.node])
        from .. import bytecode_utils as bu
        codegen.append(bu.create_binary_subscr())
        codegen.append_call(1)

    def _repr_value(self):
        ev = self.example_value
        return f"{self.node.name}: ndarray {_np_dtype(ev.dtype)} {list(ev.shape)}"


def _to_numpy(t):
    """A graph output as the ndarray the frame gives (sharing its memory)."""
    return t.numpy(force=True)


def _to_numpy_scalar(t):
    return t.numpy(force=True)[()]


def _np_dtype(torch_dtype):
    return np.dtype(str(torch_dtype).removeprefix("torch."))


def _constant(value):
    from .builder import wrap_constant
    if isinstance(value, np.dtype):
        return ConstantVariable(value)
    return wrap_constant(value)


# ---- graph nodes ---------------------------------------------------------------------------

class _Attr:
    """``a.name`` for an attribute that computes an array (``a.T``)."""

    def __init__(self, name):
        self.name = name
        self.__name__ = name

    def __call__(self, a):
        return getattr(a, self.name)


class _Method:
    def __init__(self, name):
        self.name = name
        self.__name__ = name

    def __call__(self, a, *args, **kwargs):
        return getattr(a, self.name)(*args, **kwargs)


class NumpyCall:
    """A graph node's target: ``fn`` (a ``torch._numpy`` function, an ndarray method or an
    operator) on the node's tensors seen as ``torch._numpy`` arrays; arrays it returns are given
    back as tensors. ``takes_ndarrays`` lets OutputGraph pass ndarray trackers to it."""
    takes_ndarrays = True

    def __init__(self, fn, what):
        self.fn, self.what = fn, what
        self.__name__ = "numpy_" + "".join(c if c.isalnum() else "_" for c in what).strip("_")
        self.__qualname__ = self.__name__

    def __call__(self, *args, **kwargs):
        args, kwargs = pytree.tree_map_only(torch.Tensor, tnp.ndarray, (args, kwargs))
        out = self.fn(*args, **kwargs)
        return pytree.tree_map_only(tnp.ndarray, lambda a: a.tensor, out)

    def __repr__(self):
        return f"<numpy {self.what}>"


def numpy_call(tx, what, fn, args, kwargs, numpy_fn=None):
    """One graph node computing ``fn(*args, **kwargs)`` in torch's NumPy layer (``fn`` names a
    ``torch._numpy`` function, or is an operator or method wrapper that works on both kinds of
    arrays); checked against ``numpy_fn`` (default ``fn``) run by NumPy on stand-ins."""
    _check_arguments(what, [*args, *kwargs.values()])
    tx.output.guards.NUMPY_ERRSTATE()
    args = [_scalar_operand(tx, a) for a in args]
    kwargs = {k: _scalar_operand(tx, v) for k, v in kwargs.items()}
    target = getattr(tnp, fn) if isinstance(fn, str) else fn
    stand_ins = [_stand_in(a) for a in args], {k: _stand_in(v) for k, v in kwargs.items()}
    operands = [(a, s) for a, s in zip([*args, *kwargs.values()], [*stand_ins[0], *stand_ins[1].values()])
                if isinstance(a, NdarrayVariable)]
    real_fn = numpy_fn if numpy_fn is not None else fn
    result = tx.output.call_graph(tx, "call_function", NumpyCall(target, what), tuple(args), kwargs)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            expected = real_fn(*stand_ins[0], **stand_ins[1])
    except Exception as e:
        raise Unsupported(f"numpy {what} raised {type(e).__name__} on stand-in arrays: {e}") from None
    return _as_numpy_result(tx, what, result, expected, operands)


def _storage(fake):
    return fake.untyped_storage()._cdata


def _as_numpy_result(tx, what, var, expected, operands):
    """The tracker of a graph node's result, its tensors made ndarrays, checked against what
    NumPy gave on the stand-ins."""
    from .tensor import TensorVariable
    from .lists import BaseListVariable, TupleVariable, ListVariable
    if isinstance(var, TensorVariable):
        if not isinstance(expected, (np.ndarray, np.generic)):
            raise Unsupported(f"numpy {what} gives a {type(expected).__name__} where torch's NumPy layer "
                              "gives an array")
        got_dtype, got_shape = _np_dtype(var.example_value.dtype), tuple(var.example_value.shape)
        if got_dtype != expected.dtype or got_shape != np.shape(expected):
            raise Unsupported(f"numpy {what} gives {expected.dtype}{list(np.shape(expected))} where "
                              f"torch's NumPy layer gives {got_dtype}{list(got_shape)}")
        copy = False
        for a, stand_in in operands:
            # views and copies as NumPy makes them: a write through one must reach the other
            # exactly when it does in NumPy. Where NumPy copies and the layer gives a view
            # (astype to the same dtype, flatten, an element), the graph copies too.
            shares = _storage(a.example_value) == _storage(var.example_value)
            if np.may_share_memory(expected, stand_in) and not shares:
                raise Unsupported(f"numpy {what} gives a view of its operand, torch's NumPy layer a copy")
            copy |= shares and not np.may_share_memory(expected, stand_in)
            if expected is stand_in:  # the operand itself (an in-place operator, asarray)
                if a.example_value is not var.example_value:
                    raise Unsupported(f"numpy {what} gives its operand back, torch's NumPy layer a new array")
                return a
        if copy:
            var = tx.output.call_graph(tx, "call_function", torch.clone, (var,), {})
        return NdarrayVariable(var.node, var.example_value, scalar=isinstance(expected, np.generic))
    if isinstance(var, BaseListVariable):
        if not isinstance(expected, (tuple, list)) or type(expected) is not var.python_cls \
                or len(expected) != len(var.items):
            raise Unsupported(f"numpy {what} gives {type(expected).__name__} where torch's NumPy layer "
                              f"gives {var.python_cls.__name__}")
        items = [_as_numpy_result(tx, what, v, e, operands) for v, e in zip(var.items, expected)]
        return ListVariable(items) if var.python_cls is list else TupleVariable(items, tuple_cls=var.python_cls)
    if var.is_python_constant():
        value = var.as_python_constant()
        if value is None and expected is None:
            return var
        if type(value) is not type(expected) or value != expected:
            raise Unsupported(f"numpy {what} gives {expected!r} where torch's NumPy layer gives {value!r}")
        return var
    raise Unsupported(f"numpy {what} gives {var}")


def _check_arguments(what, args):
    from .tensor import TensorVariable
    for a in args:
        for v in _leaves(a):
            if isinstance(v, TensorVariable):
                raise Unsupported(f"numpy {what} called with a torch.Tensor (mixing tensors and ndarrays "
                                  "is not modelled)")
            if isinstance(v, ConstantVariable) and isinstance(v.value, np.generic) and v not in args:
                raise Unsupported(f"numpy {what} called with a NumPy scalar inside a container")


def _scalar_operand(tx, var):
    """A NumPy scalar constant as an operand: a 0-d array node of its dtype (a graph's code has
    no literal for ``numpy.float32(2.0)``, and a plain number would lose the dtype)."""
    if not (isinstance(var, ConstantVariable) and isinstance(var.value, np.generic)):
        return var
    value = var.value
    if value.dtype not in _DTYPES:
        raise Unsupported(f"a NumPy scalar of dtype {value.dtype}")
    node = tx.output.call_graph(tx, "call_function", NumpyCall(tnp.asarray, "numpy.asarray"),
                                (ConstantVariable(value.item()), ConstantVariable(value.dtype.name)), {})
    scalar = NdarrayVariable(node.node, node.example_value, scalar=True)
    scalar.constant = value
    return scalar


def numpy_scalar(tx, cls, args, kwargs):
    """``numpy.float32(x)``: folded for a constant ``x``; of an array, NumPy's conversion."""
    if all(a.is_python_constant() and not isinstance(a.as_python_constant(), np.ndarray)
           for a in [*args, *kwargs.values()]):
        try:
            value = cls(*[a.as_python_constant() for a in args],
                        **{k: v.as_python_constant() for k, v in kwargs.items()})
        except Exception as e:
            raise Unsupported(f"numpy.{cls.__name__} raised {type(e).__name__}: {e}") from None
        if not isinstance(value, np.generic):
            raise Unsupported(f"numpy.{cls.__name__} gave a {type(value).__name__}")
        return ConstantVariable(value)  # immutable: a constant
    if len(args) == 1 and not kwargs and isinstance(args[0], NdarrayVariable):
        twin = lambda a: tnp.asarray(a, dtype=np.dtype(cls).name)  # noqa: E731
        return numpy_call(tx, f"numpy.{cls.__name__}", _Named(twin, cls.__name__), list(args), {},
                          numpy_fn=cls)
    raise Unsupported(f"numpy.{cls.__name__} with these arguments")


def is_numpy_dtype_class(value):
    return np is not None and value is np.dtype


def _dtype_spec(value):
    """A ``numpy.dtype`` argument from which NumPy makes the dtype without reading an attribute
    of the user's (an object with a ``dtype`` attribute would be asked for it): a str, a dtype,
    one of NumPy's scalar types, a Python number type, None."""
    return value is None or type(value) is str or isinstance(value, np.dtype) or \
        any(value is t for t in (bool, int, float, complex)) or \
        (is_numpy_scalar_type(value) and value.__module__ == "numpy")


def numpy_dtype(tx, args, kwargs):
    """``numpy.dtype(spec[, align[, copy]])`` of constants: folded to the dtype, a constant,
    where it is one of NumPy's builtin dtypes in native byte order, the very object NumPy
    shares (immutable; a structured dtype's field names can be assigned, a byte-swapped one has
    no name a graph's code can give, ``copy=True`` makes a new object each call). NumPy's own
    error (``data type 'x' not understood``) is raised as Python raises it; a call that warns is
    refused (it would warn once, at trace time)."""
    from .exceptions import raise_exception
    names = ("dtype", "align", "copy")
    if len(args) > 3 or not args or any(k not in names[len(args):] for k in kwargs) \
            or not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        raise Unsupported("numpy.dtype with these arguments")
    spec, *flags = [a.as_python_constant() for a in args]
    flags += [v.as_python_constant() for v in kwargs.values()]
    if not _dtype_spec(spec) or any(type(f) is not bool for f in flags):
        raise Unsupported(f"numpy.dtype with these arguments ({spec!r}: NumPy may read attributes of it)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = np.dtype(spec, *[a.as_python_constant() for a in args[1:]],
                             **{k: v.as_python_constant() for k, v in kwargs.items()})
        except (TypeError, ValueError) as e:
            raise_exception(e)
    if caught:
        raise Unsupported(f"numpy.dtype gave a warning for {spec!r} ({caught[0].message}): it would "
                          "warn once, at trace time")
    if value.isbuiltin != 1 or not value.isnative or value.metadata is not None or np.dtype(value.char) is not value:
        raise Unsupported(f"numpy.dtype gave a {value!r}, not a builtin dtype in native byte order")
    return ConstantVariable(value)


class _Named:
    def __init__(self, fn, name):
        self.fn, self.__name__ = fn, name

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def _leaves(var):
    from .lists import BaseListVariable
    from .dicts import DictVariable
    if isinstance(var, BaseListVariable):
        return [x for item in var.items for x in _leaves(item)]
    if isinstance(var, DictVariable):
        return [x for item in var.items.values() for x in _leaves(item)]
    return [var]


def _stand_in(var):
    """The NumPy value standing for a tracker in the trace-time check."""
    from .lists import BaseListVariable, SliceVariable
    from .user_defined import UserDefinedClassVariable
    if isinstance(var, NdarrayVariable):
        return var.constant if var.constant is not None else var._stand_in()
    if isinstance(var, BaseListVariable):
        return var.python_cls(_stand_in(i) for i in var.items)
    if isinstance(var, SliceVariable):
        return slice(*(_stand_in(p) for p in var.parts))
    if isinstance(var, UserDefinedClassVariable) and is_numpy_scalar_type(var.value):
        return var.value
    if var.is_python_constant():
        return var.as_python_constant()
    raise Unsupported(f"{var} as an argument of a NumPy call")


def is_numpy_scalar_type(value):
    return np is not None and isinstance(value, type) and issubclass(value, np.generic)


def graph_constant(value):
    """A NumPy dtype or scalar type as a graph node's argument: its name, which torch's NumPy
    layer takes (a graph's code has no literal for ``numpy.dtype('float32')``)."""
    return np.dtype(value).name


# ---- NumPy functions -----------------------------------------------------------------------

_SUBMODULES = {"numpy": tnp, "numpy.linalg": tnp.linalg, "numpy.fft": tnp.fft}


def _numpy_name(fn):
    """(module, name) where NumPy defines ``fn`` publicly, or None."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return None
    for module in ("numpy", "numpy.linalg", "numpy.fft"):
        mod = {"numpy": np, "numpy.linalg": np.linalg, "numpy.fft": np.fft}[module]
        try:
            if getattr(mod, name, None) is fn:
                return module, name
        except Exception:
            return None
    return None


def is_numpy_function(value):
    """A function (or ufunc) of NumPy's public namespace, ``numpy.linalg`` or ``numpy.fft``."""
    if np is None or isinstance(value, type) or not callable(value):
        return False
    module = getattr(value, "__module__", None) or ""
    if not (module == "numpy" or module.startswith("numpy.")) and not isinstance(value, np.ufunc):
        return False
    return _numpy_name(value) is not None


class NumpyFunctionVariable(ObjectVariable):
    """``numpy.sin``, ``numpy.linalg.norm``...: a call is a graph node of its ``torch._numpy``
    twin, checked against NumPy itself."""

    def call_function(self, tx, args, kwargs):
        folded = _fold_ufunc(self.value, args, kwargs)
        if folded is not None:
            return folded
        module, name = _numpy_name(self.value)
        twin = getattr(_SUBMODULES[module], name, None)
        if twin is None or not callable(twin):
            raise Unsupported(f"{module}.{name} has no equivalent in torch's NumPy layer")
        return numpy_call(tx, f"{module}.{name}", twin, list(args), dict(kwargs), numpy_fn=self.value)

    def _repr_value(self):
        return getattr(self.value, "__name__", repr(self.value))


def _fold_ufunc(fn, args, kwargs):
    """A NumPy ufunc (``numpy.sqrt``...) of plain numbers: a ufunc is a pure function of its
    operands, so the NumPy scalar it gives is a constant (as it is to CPython: ``x *= np.sqrt(d)``
    multiplies by a float). Anything else (arrays, keywords, a non-scalar result): None."""
    if not isinstance(fn, np.ufunc) or kwargs or not args:
        return None
    if not all(a.is_python_constant() and type(a.as_python_constant()) in (bool, int, float) for a in args):
        return None
    try:  # a floating-point error would warn or raise per call (np.seterr): not folded
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            value = fn(*(a.as_python_constant() for a in args))
    except Exception:  # noqa: BLE001 - left to the graph path
        return None
    return ConstantVariable(value) if isinstance(value, np.generic) else None


# ---- between tensors and arrays ------------------------------------------------------------

def tensor_numpy(tx, tensor, args, kwargs):
    """``t.numpy()`` / ``t.numpy(force=...)``: an ndarray sharing the tensor's memory."""
    from .base import call_model

    def model(tx, force=None):
        force = ConstantVariable(False) if force is None else force
        if not isinstance(force, ConstantVariable) or type(force.value) is not bool:
            raise Unsupported("Tensor.numpy(force=...) with a non-constant or non-bool argument")
        fake = tensor.example_value
        if not force.value and (fake.requires_grad or fake.device.type != "cpu" or fake.is_conj()
                                or fake.is_neg()):
            raise Unsupported("Tensor.numpy() of a tensor that requires grad, is not on the CPU, or has "
                              "its conjugate or negative bit set (it raises)")
        if fake.dtype not in {torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                              torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128}:
            raise Unsupported(f"Tensor.numpy() of a {fake.dtype} tensor")
        var = tensor
        if force.value:
            var = tx.output.call_graph(tx, "call_function", _to_numpy_tensor, (tensor,), {})
        return NdarrayVariable(var.node, var.example_value)
    return call_model(model, tx, args, kwargs, "Tensor.numpy")


def _to_numpy_tensor(t):
    """What ``t.numpy(force=True)`` views: detached, on the CPU, conjugate and negation resolved."""
    return t.detach().cpu().resolve_conj().resolve_neg()


def tensor_from_array(tx, fn, args, kwargs):
    """``torch.from_numpy(a)`` / ``torch.as_tensor(a)`` (the tensor sharing the array's memory)
    and ``torch.tensor(a)`` (a copy) of a traced ndarray; other forms are refused."""
    if len(args) != 1 or not isinstance(args[0], NdarrayVariable) or kwargs:
        raise Unsupported(f"torch.{fn.__name__} of an ndarray with other arguments")
    from .tensor import TensorVariable
    a = args[0]
    if a.scalar:
        raise Unsupported(f"torch.{fn.__name__} of a NumPy scalar")
    t = TensorVariable(a.node, a.example_value)
    if fn is torch.tensor:
        return tx.output.call_graph(tx, "call_function", torch.clone, (t,), {})
    return t


ARRAY_TO_TENSOR = (torch.from_numpy, torch.as_tensor, torch.tensor, torch.asarray)


def binary_op(tx, fn, a, b):
    """``a + b`` and the like where one operand is an ndarray."""
    return numpy_call(tx, f"operator.{fn.__name__}", fn, [a, b], {})


def unary_op(tx, fn, a):
    return numpy_call(tx, f"operator.{fn.__name__}", fn, [a], {})
