"""Python builtins and the operator module (which the arithmetic opcodes also go through).

Each supported builtin has one handler; calls with only constant arguments of a pure builtin
are folded; operators on tensors become graph nodes.
"""
import builtins
import enum
import math
import operator
import sys
import types

import torch

from ..exc import DataDependentError, SideEffectError, Unsupported
from .base import ObjectVariable
from .constant import ConstantVariable
from .dicts import DictVariable, items_of
from .lists import (BaseListVariable, ListIteratorVariable, ListVariable, RangeVariable, SliceVariable,
                    TupleVariable, iterator_type)
from .sets import binary_op as set_binary_op, is_set_like, set_new
from .tensor import TensorVariable

_HANDLERS = {}

BINARY_OPS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
              operator.mod, operator.pow, operator.matmul, operator.and_, operator.or_,
              operator.xor, operator.lshift, operator.rshift]
INPLACE_OPS = [operator.iadd, operator.isub, operator.imul, operator.itruediv,
               operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul,
               operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift]
COMPARE_OPS = [operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge]
UNARY_OPS = [operator.neg, operator.pos, operator.invert, operator.abs, builtins.abs]

# Builtins without side effects: with constant arguments, the call is done at trace time.
_PURE = {abs, all, any, bool, bytes, chr, complex, divmod, float, format, hash, int, len, max,
         min, ord, pow, repr, round, sorted, str, sum, tuple, list, dict, isinstance, issubclass,
         hex, oct, bin, *BINARY_OPS, *COMPARE_OPS, *UNARY_OPS, operator.not_, operator.truth,
         operator.getitem, operator.contains, operator.index, operator.concat}
_PURE |= {torch.finfo, torch.iinfo}  # of a dtype: immutable, read-only attributes
_PURE |= {sys.intern}  # of a constant str: an equal str (interned: `is` on trace-time strs is folded too)
_PURE |= {getattr(math, n) for n in dir(math) if callable(getattr(math, n))}
# str and bytes methods, read from the class (``str.join``): immutable values in and out
_PURE |= {getattr(t, n) for t in (str, bytes) for n in dir(t) if not n.startswith("_")}


def handles(*fns):
    def register(handler):
        for fn in fns:
            _HANDLERS[fn] = handler
        return handler
    return register


# what _HANDLERS and _PURE hold: C and Python functions, C methods, classes (a lookup must never hash a
# user object: its __hash__ would run at trace time)
_CALLABLE_KINDS = (types.BuiltinFunctionType, types.FunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                   types.ClassMethodDescriptorType, type)


def _known(value, *tables):
    if not isinstance(value, _CALLABLE_KINDS):
        return False
    try:
        return any(value in t for t in tables)
    except TypeError:  # a class whose metaclass makes it unhashable
        return False


def _is_pure(value):
    return _known(value, _PURE)


def is_supported_builtin(value):
    return _known(value, _HANDLERS, _PURE)


def _constants(args, kwargs):
    return [a.as_python_constant() for a in args], {k: v.as_python_constant() for k, v in kwargs.items()}


def _all_constant(args, kwargs=None):
    return all(a.is_python_constant() for a in [*args, *(kwargs or {}).values()])


def fold(fn, args, kwargs=None, exact=False):
    """``fn`` called on the constants, at trace time. ``exact``: the call is exactly the one
    Python makes (same function, same arguments), so an exception it raises is the one the
    program raises there, and the trace raises it too (try/except sees it)."""
    from .builder import wrap_constant
    cargs, ckwargs = _constants(args, kwargs or {})
    try:
        result = fn(*cargs, **ckwargs)
    except Exception as e:
        if exact:
            from .exceptions import raise_exception
            raise_exception(e)
        raise Unsupported(f"{getattr(fn, '__name__', fn)}{tuple(cargs)} raised "
                          f"{type(e).__name__}: {e}") from None
    return wrap_constant(result)


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (its attributes can change)


class BuiltinVariable(ObjectVariable):
    def call_function(self, tx, args, kwargs):
        return call_builtin(tx, self.value, list(args), dict(kwargs))

    def var_getattr(self, tx, name):
        if any(self.value is t for t in (str, bytes)) and is_supported_builtin(getattr(self.value, name, None)):
            from .builder import wrap_value
            return wrap_value(tx, getattr(self.value, name), self.attr_source(name))
        if any(self.value is t for t in (dict, list, tuple)) and isinstance(
                getattr(self.value, name, None), (types.MethodDescriptorType, types.WrapperDescriptorType)):
            from .objects import BuiltinMethodVariable  # dict.__getitem__(d, k): modelled per owner
            return BuiltinMethodVariable(getattr(self.value, name), None, self.attr_source(name))
        if self.value is dict and name == "fromkeys":  # a classmethod with a polyfill (polyfills.py)
            from .stdlib import PolyfillVariable
            return PolyfillVariable(dict.fromkeys, self.attr_source(name))
        if name in ("__name__", "__qualname__", "__module__", "__doc__") and (
                isinstance(self.value, types.BuiltinFunctionType) or (
                    isinstance(self.value, type) and not self.value.__flags__ & _HEAPTYPE)):
            return ConstantVariable(getattr(self.value, name))  # a C function's or class's: read-only
        return super().var_getattr(tx, name)

    def _repr_value(self):
        return getattr(self.value, "__name__", repr(self.value))


# Keyword arguments of the handled builtins that have no inspectable signature.
_KEYWORDS = {bool: (), super: (), type: (), getattr: (), range: (), zip: ("strict",), iter: (),
             next: (), min: ("key", "default"), max: ("key", "default"), int: ("base",),
             str: ("object", "encoding", "errors"), dict: None}


def check_call_form(fn, handler, args, kwargs):
    """Refuse a call whose arguments the real ``fn`` would not take in that form, or that
    ``handler`` (its model) does not take: a model never drops or reinterprets an argument.
    The call then runs natively and raises Python's own TypeError."""
    from .base import signature
    name = getattr(fn, "__name__", repr(fn))
    try:
        sig = signature(fn)
    except (TypeError, ValueError):
        allowed = _KEYWORDS.get(fn, ())
        if allowed is not None and any(k not in allowed for k in kwargs):
            raise Unsupported(f"{name}() with keyword arguments {sorted(kwargs)}") from None
    else:
        try:
            sig.bind(*args, **kwargs)
        except TypeError as e:
            raise Unsupported(f"TypeError: {name}(): {e}") from None
    try:
        signature(handler).bind(None, *args, **kwargs)
    except TypeError:
        raise Unsupported(f"{name}() with {len(args)} positional arguments and keywords "
                          f"{sorted(kwargs)} is not modelled") from None


def call_builtin(tx, fn, args, kwargs, from_opcode=False):
    """``fn(*args, **kwargs)``; ``from_opcode``: an opcode's own call, whose form is right."""
    if fn in (str, repr) and len(args) == 1 and not kwargs and hasattr(args[0], "as_string"):
        return args[0].as_string(fn)  # exceptions: str(e) / repr(e)
    handler = _HANDLERS.get(fn) if _known(fn, _HANDLERS) else None
    if handler is not None:
        if not from_opcode:
            check_call_form(fn, handler, args, kwargs)
        return handler(tx, *args, **kwargs)
    if _is_pure(fn) and _all_constant(args, kwargs):
        return fold(fn, args, kwargs, exact=True)
    if _is_pure(fn) and any(_sym_operands(a) for a in [*args, *kwargs.values()]):
        return _builtin_on_sizes(tx, fn, args, kwargs)
    raise Unsupported(f"builtin {getattr(fn, '__qualname__', fn)} with arguments "
                      f"{[type(a).__name__ for a in args]} is not supported")


def _any_ndarray(*args):
    from .ndarray import NdarrayVariable
    return any(isinstance(a, NdarrayVariable) for a in args)


def _any_tensor(*args):
    return any(isinstance(a, TensorVariable) for a in args)


def _sym_operands(*args):
    """Arithmetic on a symbolic size with numbers: a graph node (see variables/sym.py)."""
    from .sym import SymNodeVariable
    return any(isinstance(a, SymNodeVariable) for a in args) and all(
        isinstance(a, SymNodeVariable) or (a.is_python_constant() and
                                           type(a.as_python_constant()) in (int, float, bool))
        for a in args)


def _builtin_on_sizes(tx, fn, args, kwargs):
    """A pure builtin on symbolic sizes: ``int(n)`` is ``n``, ``max``/``min`` of two stay
    symbolic; anything else is computed on the sizes' values, which guards them."""
    import torch
    from .sym import SYM_MATH, SymNodeVariable, finite_for_guarded_ints
    if fn is int and len(args) == 1 and not kwargs and args[0].python_type() is int:
        return args[0]
    if fn in (max, min) and len(args) == 2 and not kwargs:
        target = torch.sym_max if fn is max else torch.sym_min
        return tx.output.call_graph(tx, "call_function", target, tuple(args), {})
    if fn in SYM_MATH and len(args) == 1 and not kwargs and isinstance(args[0], SymNodeVariable) \
            and finite_for_guarded_ints(args[0].value):
        return tx.output.call_graph(tx, "call_function", SYM_MATH[fn], (args[0],), {})
    def concrete(a):
        return ConstantVariable(a.as_python_constant()) if isinstance(a, SymNodeVariable) else a
    return fold(fn, [concrete(a) for a in args], {k: concrete(v) for k, v in kwargs.items()})


# The special methods behind the binary operators, (normal, reflected); in-place ones first try
# their own method (``__iadd__``) then fall back to these, as CPython does.
_DUNDERS = {f: (f"__{n}__", f"__r{n}__") for f, n in (
    (operator.add, "add"), (operator.sub, "sub"), (operator.mul, "mul"), (operator.truediv, "truediv"),
    (operator.floordiv, "floordiv"), (operator.mod, "mod"), (operator.pow, "pow"),
    (operator.matmul, "matmul"), (operator.and_, "and"), (operator.or_, "or"), (operator.xor, "xor"),
    (operator.lshift, "lshift"), (operator.rshift, "rshift"))}
_INPLACE_OF = dict(zip(INPLACE_OPS, BINARY_OPS))
_COMPARE_DUNDERS = {operator.lt: ("__lt__", "__gt__"), operator.le: ("__le__", "__ge__"),
                    operator.eq: ("__eq__", "__eq__"), operator.ne: ("__ne__", "__ne__"),
                    operator.gt: ("__gt__", "__lt__"), operator.ge: ("__ge__", "__le__")}


def _python_method(tx, var, name):
    """The Python function ``type(var).<name>`` if a user class defines it (not a builtin's
    slot), bound to ``var``; guarded by identity where ``var`` has a source."""
    import types
    from .functions import UserMethodVariable
    from ..source import AttrSource
    from .objects import UserDefinedObjectVariable
    if isinstance(var, UserDefinedObjectVariable):  # looked up (and guarded) along the MRO
        from .descriptors import type_lookup
        fn, src = type_lookup(tx, var.cls_var, name)
        return UserMethodVariable(fn, var, src) if isinstance(fn, types.FunctionType) else None
    try:
        cls = var.python_type()
    except Unsupported:
        return None
    if not isinstance(cls, type) or cls.__module__ == "builtins" or isinstance(var, (TensorVariable, ConstantVariable)):
        return None
    fn = getattr(cls, name, None)
    if not isinstance(fn, types.FunctionType):
        return None
    src = None
    if var.source is not None:
        src = AttrSource(AttrSource(var.source, "__class__"), name)
        tx.output.guards.ID_MATCH(src, fn)
    return UserMethodVariable(fn, var, src)


def _user_operator(tx, fn, a, b):
    """``a <op> b`` through a user class's special method (inlined), following CPython's
    order: ``__iadd__`` for in-place ops, the reflected method first when b's type is a proper
    subclass of a's that overrides it, NotImplemented passing to the other side. None when
    neither operand's class defines the operator in Python."""
    names = []
    if fn in _INPLACE_OF:
        names.append((a, f"__i{_DUNDERS[_INPLACE_OF[fn]][0][2:]}", b))
        fn = _INPLACE_OF[fn]
    normal, reflected = _DUNDERS.get(fn) or _COMPARE_DUNDERS.get(fn) or (None, None)
    if normal is None:
        return None
    pair = [(a, normal, b), (b, reflected, a)]
    try:
        ta, tb = a.python_type(), b.python_type()
        if ta is not tb and isinstance(tb, type) and isinstance(ta, type) and issubclass(tb, ta) \
                and getattr(tb, reflected, None) is not getattr(ta, reflected, None):
            pair.reverse()
    except Unsupported:
        pass
    names += pair
    if not any(_python_method(tx, obj, name) is not None for obj, name, _ in names):
        return None
    for obj, name, other in names:
        method = _python_method(tx, obj, name)
        if method is None:
            if _has_slot(obj, name):  # a builtin's own method would run here: not modelled
                raise Unsupported(f"{name} of {obj} after a Python special method")
            continue
        result = method.call_function(tx, [other], {})
        if not (isinstance(result, ConstantVariable) and result.value is NotImplemented):
            return result
    raise Unsupported(f"TypeError: unsupported operand types for {fn.__name__}")


def _has_slot(var, name):
    try:
        cls = var.python_type()
    except Unsupported:
        return True
    return getattr(cls, name, None) not in (None, getattr(object, name, None))


def _make_binary(fn):
    def handler(tx, a, b):
        from .ids import IdVariable, binary_op
        if isinstance(a, IdVariable) or isinstance(b, IdVariable):
            return binary_op(tx, fn, a, b)
        if _any_ndarray(a, b):
            from . import ndarray
            return ndarray.binary_op(tx, fn, a, b)
        if _any_tensor(a, b) or _sym_operands(a, b):
            # a number has no in-place method: `n += t` is `n + t` (and a graph's code cannot
            # print `1 += t`)
            op = fn if isinstance(a, TensorVariable) else _INPLACE_OF.get(fn, fn)
            if not _any_tensor(a, b):
                from .sym import guard_nonzero_divisor
                guard_nonzero_divisor(op, a, b)
            return tx.output.call_graph(tx, "call_function", op, (a, b), {})
        from .stdlib import typing_compare
        typed = typing_compare(tx, fn, a, b) if fn in (operator.eq, operator.ne) else None
        if typed is not None:  # typing aliases: typing's pure __eq__, folded
            return typed
        user = _user_operator(tx, fn, a, b)
        if user is not None:
            return user
        if is_set_like(a) or is_set_like(b):
            return set_binary_op(tx, fn, a, b)
        if fn is operator.iadd and isinstance(a, ListVariable):
            return a.call_method(tx, "__iadd__", [b], {})
        sized = _size_arithmetic(tx, fn, a, b)
        if sized is not None:
            return sized
        if _all_constant([a, b]):
            return fold(fn, [a, b], exact=True)
        if fn in (operator.add, operator.iadd) and isinstance(a, BaseListVariable) \
                and isinstance(b, BaseListVariable) and a.python_cls is b.python_cls \
                and a.python_cls in (list, tuple):  # not deques (maxlen)
            return type(a)(a.items + b.items) if a.python_cls is list else TupleVariable(a.items + b.items)
        if fn in (operator.mul, operator.imul):
            seq, n = (a, b) if isinstance(a, BaseListVariable) else (b, a)
            if isinstance(seq, BaseListVariable) and n.is_python_constant() and seq.python_cls in (list, tuple):
                items = seq.items * n.as_python_constant()
                return ListVariable(items) if seq.python_cls is list else TupleVariable(items)
        if fn in (operator.eq, operator.ne) and type(a.python_type()) is type \
                and a.python_type() is not b.python_type() and _is_simple_type(a) and _is_simple_type(b):
            return ConstantVariable(fn is operator.ne)
        if fn in (operator.eq, operator.ne):
            from .objects import default_rich_eq
            result = default_rich_eq(tx, fn is operator.eq, a, b)
            if result is not None:
                return result
        raise Unsupported(f"operator.{fn.__name__} on {a} and {b}")
    return handler


def _size_arithmetic(tx, fn, a, b):
    """``size + tuple``, ``tuple + size`` and ``size * k`` for a torch.Size: a torch.Size of the
    items (torch.Size's own operators, the reflected one first for a tuple on the left), made as
    ``torch.Size(items)`` makes it, so symbolic sizes stay symbolic (``x.size()[:-1] + (h, d)``
    with dynamic shapes), where folding would specialize them. None if it is not that case."""
    from .torch import make_size

    def is_size(v):
        return isinstance(v, TupleVariable) and v.python_type() is torch.Size
    if fn in (operator.add, operator.iadd) and (is_size(a) or is_size(b)) \
            and isinstance(a, TupleVariable) and isinstance(b, TupleVariable):
        return make_size(tx, [TupleVariable(a.items + b.items)], {})
    if fn in (operator.mul, operator.imul) and (is_size(a) or is_size(b)):
        seq, k = (a, b) if is_size(a) else (b, a)
        if k.is_python_constant() and type(k.as_python_constant()) in (int, bool):
            return make_size(tx, [TupleVariable(seq.items * k.as_python_constant())], {})
    return None


def _is_simple_type(v):
    """Types whose equality with another type is always False (no custom __eq__)."""
    try:
        t = v.python_type()
    except Unsupported:
        return False
    return t in (type(None), bool, int, float, str, tuple, list, dict)


for _fn in (*BINARY_OPS, *INPLACE_OPS, *COMPARE_OPS):
    _HANDLERS[_fn] = _make_binary(_fn)


def _make_unary(fn):
    def handler(tx, a):
        if _any_ndarray(a):
            from . import ndarray
            return ndarray.unary_op(tx, fn, a)
        if isinstance(a, TensorVariable) or _sym_operands(a):
            return tx.output.call_graph(tx, "call_function", fn, (a,), {})
        if a.is_python_constant():
            return fold(fn, [a], exact=True)
        raise Unsupported(f"{fn.__name__} of {a}")
    return handler


for _fn in UNARY_OPS:
    _HANDLERS[_fn] = _make_unary(_fn)


@handles(operator.not_)
def _not(tx, a):
    return ConstantVariable(not a.truth(tx))


@handles(operator.truth, bool)
def _bool(tx, a=None):
    if a is None:
        return ConstantVariable(False)
    return ConstantVariable(a.truth(tx))


def is_same_object(tx, a, b):
    """``a is b`` at trace time, or Unsupported when identity is not known."""
    from .functions import UserMethodVariable
    from .nn_module import NNModuleVariable, pin_identities
    if a is b:
        return True
    if isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
        return a.value is b.value
    for x, y in ((a, b), (b, a)):
        if isinstance(x, ConstantVariable) and (x.value is None or isinstance(x.value, enum.Enum)):
            return False  # None and enum members are always ConstantVariables: y is something else
    if a.source is not None and b.source is not None and a.source == b.source \
            and not isinstance(a, UserMethodVariable):  # bound methods are made per read
        return True
    if isinstance(a, NNModuleVariable) and isinstance(b, NNModuleVariable):
        if a.source is not None and b.source is not None:
            pin_identities(tx, (a, b))
        return a.module is b.module
    if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
        return _same_tensor(tx, a, b)
    if _any_ndarray(a, b):
        # one array is one tracker (ndarray.py gives an in-place operation's operand back); an
        # array made in the trace is a new object. Between inputs: not known
        if a.source is not None and b.source is not None:
            raise Unsupported("identity of two ndarray inputs")
        return False
    from .dicts import DictVariable
    from .user_defined import UserDefinedObjectVariable
    mutable = (ListVariable, DictVariable, UserDefinedObjectVariable)
    pre = [isinstance(v, UserDefinedObjectVariable) and not v.is_new for v in (a, b)]
    if all(pre) and (a.source is None or b.source is None):
        # a real object reached without a source is a fixed one (a default or a cell of a
        # function the trace made or reached without a source): identity is that of the objects,
        # pinned where one was read from an input
        for v in (a, b):
            if v.source is not None:
                tx.output.guards.ID_MATCH(v.source, v.value)
        return a.value is b.value
    if isinstance(a, mutable) or isinstance(b, mutable):
        # one object is one tracker (builder.wrap_value); an object made in the trace is none of
        # the inputs. Between inputs, the answer holds while their aliasing does: guarded.
        if a.source is not None and b.source is not None:
            tx.output.identity_read = True
        return False
    if isinstance(a, (ObjectVariable, ConstantVariable)) and isinstance(b, (ObjectVariable, ConstantVariable)):
        return a.as_python_constant() is b.as_python_constant()  # guarded by identity, or constants
    if isinstance(a, TupleVariable) and isinstance(b, TupleVariable) and _tuples_differ(tx, a, b):
        return False
    try:
        if a.python_type() is not b.python_type():
            return False  # objects of two types are two objects
    except Unsupported:
        pass
    raise Unsupported(f"identity of {a} and {b} is not known while tracing")


def _same_tensor(tx, a, b):
    """``a is b`` for two tensors: one node is one object; two graph inputs are what they were
    when traced, guarded (ALIASING); tensors of two storages are two objects. Otherwise (a view
    or an op that may give back its input) not known."""
    from torch.multiprocessing.reductions import StorageWeakRef
    if a.node is b.node:
        return True
    inputs = tx.output.inputs
    if all(v.node.op == "placeholder" and v.source is not None and v.source.name() in inputs for v in (a, b)):
        real = [inputs[v.source.name()][1] for v in (a, b)]
        tx.output.guards.ALIASING([a.source, b.source], real)
        return real[0] is real[1]
    fa, fb = a.example_value, b.example_value
    try:
        if StorageWeakRef(fa.untyped_storage()) != StorageWeakRef(fb.untyped_storage()):
            return False
    except (RuntimeError, NotImplementedError):
        pass
    raise Unsupported(f"identity of {a} and {b}, which share memory, is not known while tracing")


@handles(super)
def _super(tx, *args):
    """``super()`` reads the method's ``__class__`` cell and first argument, as CPython does."""
    from .user_defined import SuperVariable
    if len(args) == 2:
        return SuperVariable(*args)
    if args or "__class__" not in tx.cells or not tx.code.co_argcount:
        raise Unsupported("super() outside a method (or with one argument)")
    first = tx.code.co_varnames[0]
    obj = tx.cells[first].read(tx) if first in tx.cells else tx.symbolic_locals.get(first)
    if obj is None:
        raise Unsupported("super(): the first argument is not bound")
    return SuperVariable(tx.cells["__class__"].read(tx), obj)


def _tuples_differ(tx, a, b):
    """Two tuples of different lengths, or with items known to be different objects at one
    index, are two objects (a tuple's items are fixed)."""
    if len(a.items) != len(b.items):
        return True
    for x, y in zip(a.items, b.items):
        try:
            if not is_same_object(tx, x, y):
                return True
        except Unsupported:
            pass
    return False


_HANDLERS[operator.is_] = lambda tx, a, b: ConstantVariable(is_same_object(tx, a, b))
_HANDLERS[operator.is_not] = lambda tx, a, b: ConstantVariable(not is_same_object(tx, a, b))


@handles(operator.contains)
def _contains(tx, container, item):
    return container.call_method(tx, "__contains__", [item], {})


@handles(operator.getitem)
def _getitem(tx, obj, index):
    alias = _builtin_generic_alias(obj, index)
    if alias is not None:
        return alias
    return obj.call_method(tx, "__getitem__", [index], {})


def _builtin_generic_alias(obj, index):
    """``list[Tensor]``, ``dict[str, int]``, ``tuple[int, ...]`` (type hints torch's code
    evaluates, ``cast(list[Tensor], x)``): a builtin class's ``__class_getitem__`` makes a
    ``types.GenericAlias``, a constant."""
    cls = getattr(obj, "value", None) if isinstance(obj, ObjectVariable) else None  # (no folding:
    # a constant's value read here could specialize a symbolic one)
    if not (isinstance(cls, type) and cls.__flags__ & (1 << 8) and type(cls) is type
            and "__class_getitem__" in vars(cls) and index.is_python_constant()):
        return None  # (1 << 8: Py_TPFLAGS_IMMUTABLETYPE, a builtin class)
    return ConstantVariable(cls[index.as_python_constant()])


@handles(operator.setitem)
def _setitem(tx, obj, index, value):
    return obj.call_method(tx, "__setitem__", [index, value], {})


@handles(operator.delitem)
def _delitem(tx, obj, index):
    return obj.call_method(tx, "__delitem__", [index], {})


@handles(len)
def _len(tx, obj):
    return obj.call_method(tx, "__len__", [], {})


@handles(operator.length_hint)
def _length_hint(tx, obj, default=None):
    """len(obj) for the containers the trace models (their __len__ is exact: CPython's
    length_hint asks it first); others are refused rather than guessed."""
    if isinstance(obj, (BaseListVariable, DictVariable, RangeVariable)) or is_set_like(obj):
        return obj.call_method(tx, "__len__", [], {})
    if isinstance(obj, ListIteratorVariable) and obj.python_cls is not None:
        if hasattr(obj.python_cls, "__length_hint__"):  # list, tuple, range, str iterators: items left
            return ConstantVariable(len(obj.items) - obj.index)
        if not hasattr(obj.python_cls, "__len__"):  # zip, enumerate: the default (an int)
            if default is None:
                return ConstantVariable(0)
            if default.is_python_constant() and type(default.as_python_constant()) is int:
                return default
    raise Unsupported(f"operator.length_hint() of {obj}")


def _classes(spec):
    """The classes an isinstance/issubclass spec names (nested tuples, ``A | B`` unions)."""
    import types
    if isinstance(spec, tuple):
        return [c for item in spec for c in _classes(item)]
    if isinstance(spec, types.UnionType):
        return _classes(spec.__args__)
    if not isinstance(spec, type):
        raise Unsupported(f"isinstance() with {spec!r}, which is not a class")
    return [spec]


def _plain_instancecheck(cls):
    """``isinstance(x, cls)`` is decided by ``type(x)`` alone: type's own check, or an ABC's
    (which asks the class registry, as issubclass does)."""
    import abc
    check = type(cls).__instancecheck__
    return check is type.__instancecheck__ or check is abc.ABCMeta.__instancecheck__


@handles(isinstance)
def _isinstance(tx, obj, cls):
    import torch
    from .base import guarded_hasattr
    result = False
    for c in _classes(cls.as_python_constant()):
        if _plain_instancecheck(c):
            result = result or issubclass(obj.python_type(), c)
        elif c in (torch.nn.Parameter, torch.nn.Buffer) and isinstance(obj, TensorVariable):
            # their metaclass also accepts a plain tensor marked _is_param / _is_buffer
            if not issubclass(obj.python_type(), c):
                marker = "_is_param" if c is torch.nn.Parameter else "_is_buffer"
                if obj.source is not None and obj.source.name() in tx.output.inputs:
                    real = tx.output.inputs[obj.source.name()][1]
                    if guarded_hasattr(tx, real, obj.source, marker):
                        raise Unsupported(f"isinstance of a tensor marked {marker}")
            else:
                result = True
        elif obj.is_python_constant() and _trusted_metaclass(c):
            result = result or isinstance(obj.as_python_constant(), c)  # a DTensor placement
        else:
            raise Unsupported(f"isinstance() with {type(c).__name__}.__instancecheck__ of {c.__qualname__}")
    return ConstantVariable(result)


def _trusted_metaclass(cls):
    """torch's own metaclasses (OpaqueBaseMeta of DTensor's placements): their __instancecheck__
    of a constant is computed for real."""
    return (type(cls).__module__ or "").startswith("torch.")


@handles(issubclass)
def _issubclass(tx, a, b):
    return ConstantVariable(issubclass(a.as_python_constant(), b.as_python_constant()))


@handles(type)
def _type(tx, obj):
    """``type(obj)``: read from the object where it has a source, so the class's attributes the
    trace then reads are guarded (a class attribute can change between calls)."""
    from .builder import wrap_value
    from .functions import UserMethodVariable
    from ..source import AttrSource
    if getattr(obj, "cls_var", None) is not None:  # a user object: its class, as it was read
        return obj.cls_var
    if isinstance(obj, UserMethodVariable):  # (its source is its function's)
        return wrap_value(tx, types.MethodType, None)
    src = AttrSource(obj.source, "__class__") if obj.source is not None else None
    return wrap_value(tx, obj.python_type(), src)


def _attr_name(name):
    attr = name.as_python_constant()
    if type(attr) is not str:
        raise Unsupported(f"TypeError: attribute name must be string, not {type(attr).__name__}")
    return attr


def has_attr(tx, obj, attr):
    """``hasattr(obj, attr)``, seeing attribute stores made earlier in the trace."""
    if tx.output.side_effects.load_attr(tx, obj, attr) is not None:
        return True
    return obj.has_attr(tx, attr)


@handles(getattr)
def _getattr(tx, obj, name, default=None):
    from .descriptors import is_attribute_error
    from .objects import UserDefinedObjectVariable
    attr = _attr_name(name)
    if default is not None and isinstance(obj, UserDefinedObjectVariable):
        try:  # the protocol runs once; an AttributeError it raises gives the default
            return tx.getattr(obj, attr)
        except Unsupported as e:
            if not is_attribute_error(e):
                raise
            return default
    if default is not None and not has_attr(tx, obj, attr):
        return default
    return tx.getattr(obj, attr)


@handles(setattr)
def _setattr(tx, obj, name, value):
    from ..opcodes import store_attr
    store_attr(tx, obj, _attr_name(name), value)
    return ConstantVariable(None)


@handles(delattr)
def _delattr(tx, obj, name):
    from .objects import UserDefinedObjectVariable
    if not isinstance(obj, UserDefinedObjectVariable):
        raise SideEffectError(f"delattr() on {obj}")
    obj.delete_attr(tx, _attr_name(name))
    return ConstantVariable(None)


@handles(__import__("sys").getrecursionlimit)
def _getrecursionlimit(tx):
    """A read of interpreter state: answered now, guarded to stay the same."""
    import sys
    from .torch import GlobalStateIs
    value = sys.getrecursionlimit()
    tx.output.guards.PREDICATE(None, GlobalStateIs(sys.getrecursionlimit, value),
                               f"sys.getrecursionlimit() == {value}")
    return ConstantVariable(value)


@handles(__import__("types").MappingProxyType)
def _mappingproxy(tx, mapping):
    from .mappings import MappingProxyVariable
    return MappingProxyVariable(mapping)


@handles(vars)
def _vars(tx, obj):
    """``vars(obj)``: ``obj.__dict__`` (a user object's live instance dict)."""
    from .objects import UserDefinedObjectVariable
    if not isinstance(obj, UserDefinedObjectVariable):
        raise Unsupported(f"vars() of {obj}")
    return tx.getattr(obj, "__dict__")


@handles(hash)
def _hash(tx, obj):
    from .objects import UserDefinedObjectVariable
    if isinstance(obj, UserDefinedObjectVariable):
        return obj.hash(tx)
    if obj.is_python_constant():
        return fold(hash, [obj])
    raise Unsupported(f"hash() of {obj}")


@handles(id)
def _id(tx, obj):
    """``id(obj)``: an input nn.Module's is a constant (pinned by identity); any other object's
    is an IdVariable (variables/ids.py): compared and used as a dict key by the object's
    identity, a number only where the object is pinned by identity (ID_MATCH)."""
    from .ids import IdVariable
    from .nn_module import NNModuleVariable
    if isinstance(obj, NNModuleVariable) and obj.source is not None:  # (one made by the trace is new each run)
        tx.output.guards.ID_MATCH(obj.source, obj.module)
        return ConstantVariable(id(obj.module))
    return IdVariable(obj, tx.output)


@handles(hasattr)
def _hasattr(tx, obj, name):
    return ConstantVariable(has_attr(tx, obj, _attr_name(name)))


@handles(range)
def _range(tx, *args):
    return RangeVariable(fold(range, args).as_python_constant())


@handles(enumerate)
def _enumerate(tx, seq, start=None):
    if _is_iterator(seq):  # lazy: an iterator is read one item per step, as CPython does
        from .stdlib import call_polyfill
        return call_polyfill(tx, enumerate, [seq] if start is None else [seq, start], {})
    first = start.as_python_constant() if start is not None else 0
    items = seq.unpack_var_sequence(tx)
    return ListIteratorVariable([TupleVariable([ConstantVariable(first + i), item])
                                 for i, item in enumerate(items)], enumerate)


@handles(zip)
def _zip(tx, *seqs, strict=None):
    if any(_is_iterator(s) for s in seqs):  # lazy, as for enumerate
        from .stdlib import call_polyfill
        return call_polyfill(tx, zip, seqs, {} if strict is None else {"strict": strict})
    columns = [s.unpack_var_sequence(tx) for s in seqs]
    if strict is not None and strict.as_python_constant() and len({len(c) for c in columns}) > 1:
        raise Unsupported("zip(strict=True) of sequences of different lengths")
    return ListIteratorVariable([TupleVariable(list(row)) for row in zip(*columns)], zip)


def _is_iterator(obj):
    return hasattr(obj, "next_item")  # list iterators, generators, set iterators


def iterate(tx, obj):
    """Yield the items of ``obj`` one by one (lazily for generators)."""
    if not _is_iterator(obj):
        yield from obj.unpack_var_sequence(tx)
        return
    from .functions import next_item
    while (item := next_item(tx, obj)) is not None:  # any()/all(): exceptions pass on unchanged
        yield item


@handles(iter)
def _iter(tx, obj):
    if hasattr(obj, "make_iterator"):  # an iterable with its own rules (sets, user objects)
        return obj.make_iterator(tx)
    if _is_iterator(obj):
        return obj
    return ListIteratorVariable(obj.unpack_var_sequence(tx), iterator_type(obj))


@handles(next)
def _next(tx, it, default=None):
    if not _is_iterator(it):
        raise Unsupported(f"next() of {it}")
    from .functions import GeneratorVariable, next_item
    item = next_item(tx, it)
    if item is None:
        if default is None:
            from ..exc import ExceptionRaised
            from .exceptions import ExceptionVariable
            value = it.return_value() if isinstance(it, GeneratorVariable) else ConstantVariable(None)
            args = [] if value.is_python_constant() and value.as_python_constant() is None else [value]
            raise ExceptionRaised(ExceptionVariable.create(StopIteration, args))
        return default
    return item


@handles(reversed)
def _reversed(tx, seq):
    cls = iterator_type(seq, reverse=True)
    if cls is None and not isinstance(seq, (BaseListVariable, RangeVariable)):
        raise Unsupported(f"reversed() of {seq}")
    return ListIteratorVariable(list(reversed(seq.unpack_var_sequence(tx))), cls)


@handles(list)
def _list(tx, seq=None):
    # list(gen), tuple(gen), sum(gen): what the generator raises passes on unchanged (the
    # partial result is dropped), and sum's additions interleave with the generator's steps
    return ListVariable(list(iterate(tx, seq)) if seq is not None else [])


@handles(tuple)
def _tuple(tx, seq=None):
    return TupleVariable(list(iterate(tx, seq)) if seq is not None else [])


_HANDLERS[set] = lambda tx, iterable=None: set_new(tx, set, iterable)
_HANDLERS[frozenset] = lambda tx, iterable=None: set_new(tx, frozenset, iterable)


@handles(slice)
def _slice(tx, *args):
    """``slice(stop)`` / ``slice(start, stop[, step])``, as BUILD_SLICE makes it."""
    if not 1 <= len(args) <= 3:
        from .exceptions import raise_exception
        raise_exception(TypeError(f"slice expected at least 1 argument, got {len(args)}") if not args
                        else TypeError(f"slice expected at most 3 arguments, got {len(args)}"))
    none = ConstantVariable(None)
    parts = (none, args[0], none) if len(args) == 1 else (*args, none)[:3]
    return SliceVariable(*parts)


@handles(dict)
def _dict(tx, mapping=None, **kwargs):
    items = dict(items_of(tx, mapping)) if mapping is not None else {}
    items.update(kwargs)
    return DictVariable(items)


def _make_min_max(fn):
    def handler(tx, *args, **kwargs):
        items = args[0].unpack_var_sequence(tx) if len(args) == 1 else list(args)
        if _all_constant(items, kwargs):
            return fold(fn, items, kwargs)
        if len(args) == 2 and not kwargs and _sym_operands(*args) and \
                all(a.python_type() is int for a in args):  # symbolic ints: sym_max / sym_min
            return _builtin_on_sizes(tx, fn, args, kwargs)
        raise DataDependentError(f"{fn.__name__}() of tensors compares their data (data-dependent)",
                                 f"use torch.{'maximum' if fn is max else 'minimum'} or torch.stack(...).{fn.__name__}()")
    return handler


_HANDLERS[min] = _make_min_max(min)
_HANDLERS[max] = _make_min_max(max)


@handles(sum)
def _sum(tx, seq, start=None):
    acc = start if start is not None else ConstantVariable(0)
    for item in iterate(tx, seq):
        acc = _HANDLERS[operator.add](tx, acc, item)
    return acc


# short-circuit like CPython: items after the deciding one are never produced
_HANDLERS[any] = lambda tx, seq: ConstantVariable(any(i.truth(tx) for i in iterate(tx, seq)))
_HANDLERS[all] = lambda tx, seq: ConstantVariable(all(i.truth(tx) for i in iterate(tx, seq)))


def _make_conversion(fn):
    def handler(tx, *args, **kwargs):
        if args and (isinstance(args[0], TensorVariable) or _any_ndarray(args[0])):
            raise DataDependentError(f"{fn.__name__}() of a tensor or ndarray needs its data (data-dependent)",
                                     f"keep the value a tensor, or move {fn.__name__}() out of the "
                                     "compiled region")
        if _all_constant(args, kwargs):
            return fold(fn, args, kwargs, exact=True)
        if fn in (int, float) and len(args) == 1 and not kwargs and _sym_operands(*args):
            import torch  # int(n) / float(n) of a symbolic value: stays symbolic (trunc, as int())
            return tx.output.call_graph(tx, "call_function", torch.sym_int if fn is int else torch.sym_float,
                                        tuple(args), {})
        raise Unsupported(f"{fn.__name__}() of {args}")
    return handler


for _fn in (int, float, str, complex):
    _HANDLERS[_fn] = _make_conversion(_fn)


@handles(print)
def _print(tx, *args, **kwargs):
    raise SideEffectError("print() is I/O (a side effect)")


@handles(sorted)
def _sorted(tx, seq, *, key=None, reverse=None):
    """The key function is called on each item in order (inlined), as list.sort does; then the
    items are ordered by sorting their indices on the keys: the sort only ever compares keys,
    so ties and ``reverse`` keep the same (stable) order."""
    items = seq.unpack_var_sequence(tx)
    if key is not None and not (key.is_python_constant() and key.as_python_constant() is None):
        keys = [key.call_function(tx, [item], {}) for item in items]
    else:
        keys = items
    if not _all_constant(keys, {} if reverse is None else {"reverse": reverse}):
        raise Unsupported("sorted() of values that are not known while tracing")
    values = [k.as_python_constant() for k in keys]
    rev = {} if reverse is None else {"reverse": reverse.as_python_constant()}
    try:
        order = sorted(range(len(items)), key=values.__getitem__, **rev)
    except Exception as e:
        raise Unsupported(f"sorted() raised {type(e).__name__}: {e}") from None
    return ListVariable([items[i] for i in order])


def hash_of_hash_result(value):
    """What ``hash(obj)`` gives when ``type(obj).__hash__`` returned the int ``value``
    (CPython's slot_tp_hash): the value itself where it fits a Py_ssize_t, else the int's own
    hash; -1 (the C error value) becomes -2. Not ``hash(value)``, which reduces every int
    modulo 2**61 - 1."""
    if -sys.maxsize - 1 <= value <= sys.maxsize:
        return -2 if value == -1 else value
    return hash(value)
