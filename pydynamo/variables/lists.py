"""Sequences: tuples, lists, torch.Size, range, slices, list iterators (FOR_ITER), and
collections.deque."""
import collections
import types

import torch

from ..exc import Unsupported
from .base import TypeAttributes, VariableTracker, call_model
from .constant import ConstantVariable


def _const_index(tx, index):
    if not index.is_python_constant():
        raise Unsupported(f"indexing a sequence with {index}")
    return index.as_python_constant()


class BaseListVariable(TypeAttributes, VariableTracker):
    python_cls = list

    def __init__(self, items, source=None):
        super().__init__(source)
        self.items = list(items)

    def python_type(self):
        return self.python_cls

    def as_python_constant(self):
        return self.python_cls([item.as_python_constant() for item in self.items])

    def unpack_var_sequence(self, tx):
        return list(self.items)

    def truth(self, tx):
        return bool(self.items)

    def _new(self, items):
        return type(self)(items)

    def getitem(self, tx, index):
        key = _const_index(tx, index)
        try:
            if isinstance(key, slice):
                return self._new(self.items[key])
            return self.items[key]
        except (IndexError, TypeError) as e:
            self._raise_like(lambda seq: seq[key])
            raise Unsupported(f"{self.python_cls.__name__} index {key!r}: {e}") from None

    def _raise_like(self, op):
        """Raise in the trace what ``op`` raises on a real list or tuple of this length (the
        same exception and message as Python's); nothing for other sequence types."""
        cls = self.python_type()
        if cls in (list, tuple):
            try:
                op(cls(range(len(self.items))))
            except (IndexError, TypeError, ValueError) as e:
                from .exceptions import raise_exception
                raise_exception(e)

    def call_method(self, tx, name, args, kwargs):
        if kwargs:
            raise Unsupported(f"{self.python_type().__name__}.{name} with keyword arguments")
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0])
        if name == "__len__" and not args:
            return ConstantVariable(len(self.items))
        if name in ("index", "count") and self.is_python_constant():
            from .builtin import fold
            return fold(getattr(self.as_python_constant(), name), args, exact=True)
        if name == "__contains__" and len(args) == 1:
            return contains(tx, self.items, args[0])
        raise Unsupported(f"{self.python_cls.__name__}.{name}")

    def reconstruct(self, codegen):
        if self.source is not None:  # the same object (mutations were replayed into it)
            return self.source.reconstruct(codegen)
        for item in self.items:
            codegen(item)
        codegen.append_build(self.python_cls, len(self.items))

    def _repr_value(self):
        return repr(self.items)


def contains(tx, items, needle):
    """``needle in items`` when every element (and the needle) is a trace-time constant."""
    if needle.is_python_constant() and all(i.is_python_constant() for i in items):
        value = needle.as_python_constant()
        return ConstantVariable(any(value == i.as_python_constant() for i in items))
    raise Unsupported("'in' on a sequence of non-constant values")


class TupleVariable(BaseListVariable):
    python_cls = tuple

    def __init__(self, items, source=None, tuple_cls=tuple):
        super().__init__(items, source)
        self.tuple_cls = tuple_cls

    def python_type(self):
        return self.tuple_cls

    def _new(self, items):
        return TupleVariable(items)

    def as_python_constant(self):
        if self.tuple_cls is tuple:
            return super().as_python_constant()
        from .user_defined import _is_namedtuple_class
        if _is_namedtuple_class(self.tuple_cls):
            return tuple.__new__(self.tuple_cls, [i.as_python_constant() for i in self.items])
        raise Unsupported(f"{self.tuple_cls.__name__} as a constant")

    def var_getattr(self, tx, name):
        fields = tuple_fields(self.tuple_cls)
        if fields and name in fields:
            return self.items[fields.index(name)]
        if self.tuple_cls.__flags__ & (1 << 9) and tuple_fields(self.tuple_cls) is not None:
            from .user_defined import namedtuple_attribute  # a namedtuple class's own methods
            found = namedtuple_attribute(tx, self, name)
            if found is not None:
                return found
        return super().var_getattr(tx, name)

    def reconstruct(self, codegen):
        if self.tuple_cls is not tuple and self.source is None:
            from .user_defined import _is_namedtuple_class
            plain = _is_namedtuple_class(self.tuple_cls)
            if plain:  # tuple.__new__(cls, items): what its generated __new__ does, in C
                codegen.load_function(tuple.__new__)
                codegen.load_const(self.tuple_cls)
            else:
                codegen.load_function(self.tuple_cls)
            for item in self.items:
                codegen(item)
            if hasattr(self.tuple_cls, "_fields") and not plain:  # namedtuple(*items)
                return codegen.append_call(len(self.items))
            codegen.append_build(tuple, len(self.items))  # structseq(tuple)
            return codegen.append_call(2 if plain else 1)
        super().reconstruct(codegen)


def tuple_fields(cls):
    """Field names of a namedtuple or of a structseq such as torch.return_types.max."""
    fields = getattr(cls, "_fields", None)
    if fields is None and hasattr(cls, "n_sequence_fields"):
        fields = [k for k, v in vars(cls).items() if isinstance(v, types.MemberDescriptorType)]
    return fields


class SizeVariable(TupleVariable):
    """torch.Size of a tensor: static shapes make every entry a constant."""

    def __init__(self, items, source=None):
        super().__init__(items, source, tuple_cls=torch.Size)

    def _new(self, items):
        return TupleVariable(items)

    def as_python_constant(self):
        return torch.Size([item.as_python_constant() for item in self.items])

    def call_method(self, tx, name, args, kwargs):
        if name == "numel" and not args and not kwargs:
            if not all(item.is_python_constant() for item in self.items):
                raise Unsupported("torch.Size.numel() of symbolic sizes")
            return ConstantVariable(self.as_python_constant().numel())
        if name == "__getitem__" and len(args) == 1:
            key = _const_index(tx, args[0])
            if isinstance(key, slice):
                return SizeVariable(self.items[key])
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, codegen):
        if self.source is None and all(item.is_python_constant() and type(item.as_python_constant()) is int
                                       for item in self.items):
            return codegen.load_const(self.as_python_constant())
        # symbolic sizes: torch.Size((graph outputs...)); items of other types (numpy ints, which
        # torch.Size keeps as they are) one by one: a constant Size would be merged with an equal one
        super().reconstruct(codegen)


class ListVariable(BaseListVariable):
    python_cls = list

    def _mutate(self, tx):
        tx.output.note_mutation(self)

    def call_method(self, tx, name, args, kwargs):
        handler = getattr(self, f"_method_{name.strip('_')}", None) if hasattr(list, name) else None
        if handler is not None and not kwargs:
            return call_model(handler, tx, args, {}, f"list.{name}")
        if name == "sort" and self.python_cls is list:
            return call_model(self._sort, tx, args, kwargs, "list.sort")
        return super().call_method(tx, name, args, kwargs)

    def _sort(self, tx, *, key=None, reverse=None):
        """sorted() of the items, stored back; the list reads as empty while its key function
        runs, as in CPython."""
        from .builtin import call_builtin
        items, self.items = self.items, []
        self._mutate(tx)
        kwargs = {k: v for k, v in (("key", key), ("reverse", reverse)) if v is not None}
        try:
            self.items = call_builtin(tx, sorted, [ListVariable(items)], kwargs).items
        except BaseException:
            self.items = items
            raise
        return ConstantVariable(None)

    def _method_append(self, tx, item):
        self._mutate(tx)
        self.items.append(item)
        return ConstantVariable(None)

    def _method_extend(self, tx, other):
        items = other.unpack_var_sequence(tx)
        self._mutate(tx)
        self.items.extend(items)
        return ConstantVariable(None)

    def _method_iadd(self, tx, other):
        self._method_extend(tx, other)
        return self

    def _method_insert(self, tx, index, item):
        self._mutate(tx)
        self.items.insert(_const_index(tx, index), item)
        return ConstantVariable(None)

    def _method_pop(self, tx, index=None):
        i = -1 if index is None else _const_index(tx, index)
        self._raise_like(lambda seq: seq.pop(i))
        self._mutate(tx)
        return self.items.pop(i)

    def _method_clear(self, tx):
        self._mutate(tx)
        self.items.clear()
        return ConstantVariable(None)

    def _method_reverse(self, tx):
        self._mutate(tx)
        self.items.reverse()
        return ConstantVariable(None)

    def _method_copy(self, tx):
        return ListVariable(self.items)

    def _method_setitem(self, tx, index, value):
        key = _const_index(tx, index)
        self._mutate(tx)
        if isinstance(key, slice):
            self.items[key] = value.unpack_var_sequence(tx)
        else:
            self.items[key] = value
        return ConstantVariable(None)

    def _method_delitem(self, tx, index):
        key = _const_index(tx, index)
        self._mutate(tx)
        del self.items[key]
        return ConstantVariable(None)


class RangeVariable(VariableTracker):
    def __init__(self, value: range):
        super().__init__(None)
        self.value = value

    def python_type(self):
        return range

    def as_python_constant(self):
        return self.value

    def unpack_var_sequence(self, tx):
        return [ConstantVariable(i) for i in self.value]

    def truth(self, tx):
        return bool(self.value)

    def call_method(self, tx, name, args, kwargs):
        from .builder import wrap_constant
        if kwargs or len(args) != (0 if name == "__len__" else 1):
            raise Unsupported(f"range.{name} with these arguments")
        if name == "__getitem__":
            return wrap_constant(self.value[_const_index(tx, args[0])])
        if name == "__len__":
            return ConstantVariable(len(self.value))
        if name == "__contains__":
            return contains(tx, self.unpack_var_sequence(tx), args[0])
        raise Unsupported(f"range.{name}")

    def reconstruct(self, codegen):
        codegen.load_const(self.value)


class SliceVariable(VariableTracker):
    def __init__(self, start, stop, step):
        super().__init__(None)
        self.parts = (start, stop, step)

    def python_type(self):
        return slice

    def as_python_constant(self):
        return slice(*[p.as_python_constant() for p in self.parts])

    def reconstruct(self, codegen):
        codegen.load_const(self.as_python_constant())


class ListIteratorVariable(TypeAttributes, VariableTracker):
    """An iterator over known items (what GET_ITER makes of lists, ranges, dicts, zip...).

    ``python_cls`` is the real type of the iterator it stands for (``range_iterator``,
    ``zip``, ``enumerate``...), or None where that is not known: then asking for it refuses."""

    def __init__(self, items, python_cls=None):
        super().__init__(None)
        self.items = list(items)
        self.index = 0
        self.python_cls = python_cls

    def python_type(self):
        if self.python_cls is None:
            raise Unsupported("the type of this iterator is not known while tracing")
        return self.python_cls

    def next_item(self, tx):
        """The next item, or None when exhausted."""
        if self.index >= len(self.items):
            return None
        self.index += 1
        return self.items[self.index - 1]

    def unpack_var_sequence(self, tx):
        rest = self.items[self.index:]
        self.index = len(self.items)
        return rest

    def truth(self, tx):
        return True

    def var_getattr(self, tx, name):
        return iterator_attribute(tx, self, name)

    def call_method(self, tx, name, args, kwargs):
        return iterator_method(tx, self, name, args, kwargs)

    def rebuild_kind(self):
        """The name ``rebuild.rebuild_iterator`` knows this iterator's type by (checked to give the same
        type for the items left), or None where it cannot be rebuilt."""
        cls = self.python_cls
        if cls is None or cls.__name__ not in ITERATOR_KINDS or ITERATOR_KINDS[cls.__name__][0] is not cls:
            return None
        items = self.items[self.index:]
        if cls.__name__ in ("range_iterator", "str_iterator", "str_ascii_iterator"):
            if not all(i.is_python_constant() for i in items):
                return None
            try:
                if type(ITERATOR_KINDS[cls.__name__][1](tuple(i.as_python_constant() for i in items))) is not cls:
                    return None
            except (TypeError, ValueError):
                return None
        return cls.__name__

    def reconstruct(self, codegen):
        """``rebuild_iterator(items left, kind)``: an iterator of the same type yielding them."""
        kind = self.rebuild_kind()
        if kind is None:
            name = self.python_cls.__name__ if self.python_cls is not None else "of unknown type"
            raise Unsupported(f"an iterator {name} cannot be rebuilt at run time")
        from .rebuild import rebuild_iterator
        codegen.load_function(rebuild_iterator)
        codegen(TupleVariable(self.items[self.index:]))
        codegen.load_const(kind)
        codegen.append_call(2)


def _range_of(items):
    step = items[1] - items[0] if len(items) > 1 else 1
    if step == 0 or any(b - a != step for a, b in zip(items, items[1:])):
        raise ValueError("not a range")
    start = items[0] if items else 0
    return range(start, start + step * len(items), step)


def _zip_rows(rows):
    return zip(*zip(*rows)) if rows else zip()


def _enumerate_rows(rows):
    return enumerate(tuple(r[1] for r in rows), rows[0][0] if rows else 0)


# kind -> (the iterator type, how to make one from the items left)
ITERATOR_KINDS = {type(it).__name__: (type(it), make) for it, make in [
    (iter(()), iter), (iter([]), lambda items: iter(list(items))),
    (reversed([]), lambda items: reversed(list(items[::-1]))),
    (reversed(()), lambda items: reversed(items[::-1])),  # a tuple's is the generic `reversed`
    (iter(""), lambda items: iter("".join(items))), (iter("é"), lambda items: iter("".join(items))),
    (iter(range(0)), lambda items: iter(_range_of(items))),
    (zip(), _zip_rows), (enumerate(()), _enumerate_rows)]}


def iterator_attribute(tx, it, name):
    """``it.__next__`` / ``it.__iter__`` of an iterator tracker (heapq.merge reads them); other
    names as the iterator's real type has them (descriptors.modelled_getattr)."""
    from .base import GetAttrVariable
    from .descriptors import modelled_getattr
    if name in ("__next__", "__iter__"):
        return GetAttrVariable(it, name)
    return modelled_getattr(tx, it, name)


def iterator_method(tx, it, name, args, kwargs):
    from .builtin import call_builtin
    if name in ("__next__", "__iter__") and not args and not kwargs:
        return call_builtin(tx, next if name == "__next__" else iter, [it], {})
    raise Unsupported(f"method {name!r} of an iterator")


# Builtin iterables whose iterator type is that of their base (when they keep its __iter__ or
# __reversed__), and a sample of each to ask Python for it.
_ITERABLE_SAMPLES = {list: [], tuple: (), dict: {}, range: range(0), str: "", bytes: b"",
                     set: set(), frozenset: frozenset(), type({}.keys()): {}.keys(),
                     type({}.values()): {}.values(), type({}.items()): {}.items()}


def iterator_type(var, reverse=False):
    """``type(iter(x))`` (or ``type(reversed(x))``) for the value ``var`` stands for; None
    where it is not known. A constant gives its own answer (``iter("é")`` is a str_iterator,
    ``iter(range(2**64))`` a longrange_iterator)."""
    fn = reversed if reverse else iter
    if var.is_python_constant():
        value = var.as_python_constant()
        try:
            return type(fn(value))
        except TypeError:
            return None
    try:
        cls = var.python_type()
    except Unsupported:
        return None
    if cls is torch.Tensor or (isinstance(cls, type) and issubclass(cls, torch.Tensor)
                               and cls.__iter__ is torch.Tensor.__iter__):
        return None if reverse else type(iter(()))  # Tensor.__iter__ is iter(self.unbind(0))
    dunder = "__reversed__" if reverse else "__iter__"
    for base, sample in _ITERABLE_SAMPLES.items():
        if isinstance(cls, type) and issubclass(cls, base) and getattr(cls, dunder, None) is getattr(base, dunder, None):
            try:
                return type(fn(sample))
            except TypeError:
                return None
    return None


class DequeVariable(ListVariable):
    """A ``collections.deque``: a list of items with an optional ``maxlen`` (an append past it
    drops an item from the other end). Indexes are ints only: a deque has no slices."""

    python_cls = collections.deque

    def __init__(self, items, maxlen=None, source=None):
        super().__init__(items, source)
        self.maxlen = maxlen

    def as_python_constant(self):
        return collections.deque([item.as_python_constant() for item in self.items], self.maxlen)

    def var_getattr(self, tx, name):
        if name == "maxlen":
            return ConstantVariable(self.maxlen)
        return super().var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        handler = getattr(self, f"_method_{name.strip('_')}", None) if hasattr(collections.deque, name) else None
        if handler is not None and not kwargs and name not in ("__getitem__", "__len__", "__contains__"):
            return call_model(handler, tx, args, {}, f"deque.{name}")
        if name == "__getitem__" and len(args) == 1 and not isinstance(_const_index(tx, args[0]), int):
            raise Unsupported("TypeError: deque indices must be integers")
        if name in ("__getitem__", "__len__", "__contains__", "index", "count"):
            return BaseListVariable.call_method(self, tx, name, args, kwargs)
        raise Unsupported(f"deque.{name}")

    def _full(self):
        return self.maxlen is not None and len(self.items) > self.maxlen

    def _method_append(self, tx, item):
        super()._method_append(tx, item)
        if self._full():
            self.items.pop(0)
        return ConstantVariable(None)

    def _method_appendleft(self, tx, item):
        self._mutate(tx)
        self.items.insert(0, item)
        if self._full():
            self.items.pop()
        return ConstantVariable(None)

    def _method_extend(self, tx, other):
        for item in other.unpack_var_sequence(tx):  # of a copy, where other is the deque itself
            self._method_append(tx, item)
        return ConstantVariable(None)

    def _method_extendleft(self, tx, other):
        for item in other.unpack_var_sequence(tx):
            self._method_appendleft(tx, item)
        return ConstantVariable(None)

    def _method_pop(self, tx):
        if not self.items:
            raise Unsupported("IndexError: pop from an empty deque")
        self._mutate(tx)
        return self.items.pop()

    def _method_popleft(self, tx):
        if not self.items:
            raise Unsupported("IndexError: pop from an empty deque")
        self._mutate(tx)
        return self.items.pop(0)

    def _method_rotate(self, tx, n=None):
        steps = 1 if n is None else _const_index(tx, n)
        if type(steps) is not int:
            raise Unsupported("deque.rotate() of a non-int")
        self._mutate(tx)
        if self.items:
            steps %= len(self.items)
            self.items[:] = self.items[len(self.items) - steps:] + self.items[:len(self.items) - steps]
        return ConstantVariable(None)

    def _method_insert(self, tx, index, item):
        if self.maxlen is not None and len(self.items) >= self.maxlen:
            raise Unsupported("IndexError: deque already at its maximum size")
        return super()._method_insert(tx, index, item)

    def _method_remove(self, tx, value):
        if not (value.is_python_constant() and all(i.is_python_constant() for i in self.items)):
            raise Unsupported("deque.remove() of values that are not constants")
        values = [i.as_python_constant() for i in self.items]
        if value.as_python_constant() not in values:
            raise Unsupported("ValueError: deque.remove(x): x not in deque")
        self._mutate(tx)
        del self.items[values.index(value.as_python_constant())]
        return ConstantVariable(None)

    def _method_setitem(self, tx, index, value):
        if type(_const_index(tx, index)) is not int:
            raise Unsupported("TypeError: deque indices must be integers")
        return super()._method_setitem(tx, index, value)

    def _method_delitem(self, tx, index):
        if type(_const_index(tx, index)) is not int:
            raise Unsupported("TypeError: deque indices must be integers")
        return super()._method_delitem(tx, index)

    def _method_copy(self, tx):
        return DequeVariable(self.items, self.maxlen)

    def reconstruct(self, codegen):
        if self.source is not None:
            return self.source.reconstruct(codegen)
        codegen.load_function(collections.deque)
        for item in self.items:
            codegen(item)
        codegen.append_build(list, len(self.items))
        codegen.load_const(self.maxlen)
        codegen.append_call(2)
