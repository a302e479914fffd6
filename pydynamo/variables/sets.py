"""Sets and frozensets of trace-time constants, and the set algebra of dict key/item views.

A set's iteration order is that of its hash table, which depends on the whole history of the
object (insertions, deletions, resizes), not only on its contents: ``{1, 8}`` left in a 32-slot
table iterates 1, 8; rebuilt from that order in 8 slots it iterates 8, 1. So every set the trace
makes holds a *replica*, a real set of the same constants built by the same C operations in the
same order (``{a, b}`` adds a then b; ``s | t`` is ``replica_s | replica_t``), which iterates,
pops and prints exactly as the run-time object will; and a *recipe*, those operations again,
which the generated code replays to rebuild the object with the same table. The constants
allowed as elements are those whose hash and equality cannot differ between trace and run time
(see ``element``): no NaN, no objects with Python-level ``__hash__``/``__eq__``.

Tensors hash by identity: a set holds a ``TensorKey`` for one, the same key for the same tensor
(resolved by what the trace knows of identity, ``builtin._same_tensor``). Membership, length and
the set algebra are then exact, but the table's order depends on the run-time addresses: a set
that ever held a tensor is not iterated, popped or folded while tracing (refused); it is
rebuilt at run time by its recipe, which loads the real tensors.

A set read from the frame's inputs is guarded on its type and its exact iteration order, but
the table of the run-time object is unknown: sets computed from it hold a replica whose contents
are right but whose order may not be (no recipe), so they may be asked for
membership, length, equality, subsets, but not iterated, popped or rebuilt at run time.
Mutating a set that existed before the frame is refused (a graph break): replaying it could
not give the object the table eager execution would.
"""
import enum
import operator
import struct

import torch

from .. import bytecode_utils as bu
from ..exc import SideEffectError, Unsupported
from .base import TypeAttributes, VariableTracker
from .constant import ConstantVariable

_ELEMENT_TYPES = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis), torch.dtype)
# methods that take one element (the others take iterables)
_ELEMENT_METHODS = {"add", "discard", "remove", "__contains__"}
_MUTATING = {"add", "clear", "discard", "remove", "pop", "update", "difference_update",
             "intersection_update", "symmetric_difference_update"}
_METHODS = _ELEMENT_METHODS | _MUTATING | {
    "copy", "difference", "intersection", "isdisjoint", "issubset", "issuperset",
    "symmetric_difference", "union", "__len__"}


def element(var, tx=None):
    """The real value of ``var`` as a set element, or Unsupported. A set as a needle (``{1} in
    s`` looks up ``frozenset({1})``) passes its replica: CPython converts it itself. A tensor
    gives its TensorKey (see the module's docstring)."""
    if isinstance(var, SetVariable):
        return var.value
    from .tensor import TensorVariable
    if isinstance(var, TensorVariable) and tx is not None:
        return tensor_key(tx, var)
    if not var.is_python_constant():
        raise Unsupported(f"{var} as a set element (only trace-time constants are supported)")
    value = var.as_python_constant()
    if not _is_element(value):
        raise Unsupported(f"a {type(value).__name__} as a set element is not supported")
    return value


def tensor_key(tx, tensor):
    """The one TensorKey that stands for ``tensor`` in every set of this trace."""
    from .builtin import _same_tensor
    from .ids import TensorKey
    keys = tx.output.__dict__.setdefault("set_tensor_keys", [])
    for key in keys:
        if _same_tensor(tx, key.var, tensor):  # (not known: Unsupported)
            return key
    keys.append(TensorKey(tensor))
    return keys[-1]


def _node(value, tensors):
    """The recipe node of an element: the tensor it stands for, or the constant."""
    from .ids import TensorKey
    if type(value) is TensorKey:
        tensors.add(value)
        return ("var", value.var)
    return ("const", value)


def _is_element(value):
    if type(value) is tuple:
        return all(_is_element(v) for v in value)
    if type(value) in (float, complex):
        return value == value  # NaN: found by identity only, which trace and run time do not share
    if isinstance(value, enum.Enum):
        cls = type(value)
        return cls.__hash__ is enum.Enum.__hash__ and cls.__eq__ is object.__eq__
    return type(value) in _ELEMENT_TYPES


def _identical(a, b):
    """Same type and value, floats bit for bit (0.0 and -0.0 are equal set elements, but not the
    same value to the code that reads them)."""
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    if type(a) in (float, complex):
        return struct.pack("<2d", a.real, a.imag) == struct.pack("<2d", b.real, b.imag)
    return a == b


class IteratesAs:
    """A guard: the value is a set (or frozenset) of this type iterating as ``order``."""

    def __init__(self, cls, order):
        self.cls, self.order = cls, tuple(order)

    def __call__(self, value):
        return type(value) is self.cls and len(value) == len(self.order) and all(
            _identical(a, b) for a, b in zip(value, self.order))

    def __repr__(self):
        return f"iterates as {list(self.order)!r}"


class SetVariable(TypeAttributes, VariableTracker):
    """``value``: the replica (for a set read from an input: that object, never mutated).
    ``recipe``: ``(origin, steps)`` that rebuild the replica's table at run time (see
    ``codegen_recipe``), or None where the table is not known (a set computed from an input)."""

    def __init__(self, value, source=None, recipe=None):
        super().__init__(source)
        self.value, self.recipe = value, recipe
        self.version = 0  # bumped by each mutation: iterators over the set check it
        self.held_tensors = False  # ever held a TensorKey: its table's order is not known

    @staticmethod
    def new(value, origin):
        return SetVariable(value, recipe=(origin, []))

    @staticmethod
    def build(tx, items):
        """BUILD_SET: a new set, items added first to last."""
        var = SetVariable.new(set(), ("call", set, ()))
        for item in items:
            var.call_method(tx, "add", [item], {})
        return var

    def python_type(self):
        return type(self.value)

    def _ordered(self):
        """Whether iterating the replica gives the run-time order."""
        if self.held_tensors:
            return False
        return self.recipe is not None or (self.source is not None and self.version == 0)

    def as_python_constant(self):
        if self.held_tensors:
            raise Unsupported(f"{self} holds tensors: it is not a constant")
        if self.recipe is not None:
            return self.value
        if self._ordered():  # an input: a copy (folds must not hold the user's object)
            copy = type(self.value)(tuple(self.value))
            if list(copy) == list(self.value):
                return copy
        raise Unsupported(f"the iteration order of {self} is not known while tracing")

    def truth(self, tx):
        return bool(self.value)

    def unpack_var_sequence(self, tx):
        from .builder import wrap_constant
        if self.held_tensors:
            raise Unsupported(f"iterating over {self}, a set that held tensors (its run-time "
                              "order follows the tensors' addresses)")
        if not self._ordered():
            raise Unsupported(f"iterating over {self}, a set computed from an input set (its "
                              "run-time iteration order is not known while tracing)")
        return [wrap_constant(v) for v in self.value]

    def make_iterator(self, tx):
        return SetIteratorVariable(self, self.unpack_var_sequence(tx))

    def mutate(self, tx):
        if self.source is not None:
            raise SideEffectError(f"mutation of {self}, a set that existed before the frame")
        self.version += 1

    def call_method(self, tx, name, args, kwargs):
        what = f"{type(self.value).__name__}.{name}"
        if name not in _METHODS or not hasattr(self.value, name):
            raise Unsupported(what)
        if kwargs:
            raise Unsupported(f"TypeError: {what}() takes no keyword arguments")
        if name in _ELEMENT_METHODS:
            if len(args) != 1:
                raise Unsupported(f"TypeError: {what}() takes exactly one argument")
            if name == "add" and isinstance(args[0], SetVariable):
                raise Unsupported("a set or frozenset as a set element")
            value = element(args[0], tx)
            tensors = set()
            operands = [(value, _node(value, tensors))]
            if tensors and name == "add":
                self.held_tensors = True
        else:
            operands = [operand(tx, a) for a in args]
        if name == "pop" and (self.recipe is None or self.held_tensors):
            raise Unsupported(f"pop() of {self}: which item comes first is not known while tracing")
        if name in _MUTATING:
            self.mutate(tx)
        return apply(getattr(type(self.value), name), [self, *args], [operand(tx, self), *operands], what)

    def reconstruct(self, codegen):
        if self.source is not None and self.version == 0:
            return self.source.reconstruct(codegen)
        if self.recipe is None:
            raise Unsupported(f"{self} cannot be rebuilt at run time: it was computed from an "
                              "input set, whose table (and so its iteration order) is not known")
        codegen_recipe(codegen, self.recipe)

    def _repr_value(self):
        return repr(self.value) + ("" if self.recipe is not None else " (order unknown)")

    def tensors(self):
        """The tensor trackers the recipe loads (graph outputs where it is rebuilt)."""
        found = []

        def walk(node):
            kind = node[0] if isinstance(node, tuple) and node else None
            if kind == "var":
                found.append(node[1])
            elif kind == "seq":
                for sub in node[1]:
                    walk(sub)
            elif kind == "call":
                for sub in node[2]:
                    walk(sub)
            elif kind == "set":
                walk(node[1])
                for _fn, ops in node[2][:node[3]]:
                    for op in ops:
                        walk(op)
        if self.recipe is not None and self.held_tensors:
            walk(("set", self.recipe[0], self.recipe[1], len(self.recipe[1])))
        return found


class SetIteratorVariable(TypeAttributes, VariableTracker):
    """``iter(s)``: the items in table order. A set changed while it is iterated makes CPython
    raise or walk its new table: refused. Not rebuilt at a graph break (refused too)."""

    def __init__(self, set_var, items):
        super().__init__(None)
        self.set_var, self.items, self.index = set_var, items, 0
        self.version = set_var.version

    def python_type(self):
        return type(iter(self.set_var.value))

    def truth(self, tx):
        return True

    def next_item(self, tx):
        if self.set_var.version != self.version:
            raise Unsupported("RuntimeError: a set changed while it was iterated")
        if self.index >= len(self.items):
            return None
        self.index += 1
        return self.items[self.index - 1]

    def unpack_var_sequence(self, tx):
        items = []
        while (item := self.next_item(tx)) is not None:
            items.append(item)
        return items

    def var_getattr(self, tx, name):
        from .lists import iterator_attribute
        return iterator_attribute(tx, self, name)

    def call_method(self, tx, name, args, kwargs):
        from .lists import iterator_method
        return iterator_method(tx, self, name, args, kwargs)


def apply(fn, vars, operands, what):
    """``fn(*operands)`` on the real operands (``(value, recipe)`` pairs standing for the
    trackers ``vars``): the result's tracker. A set operand that is returned (``s |= t``,
    ``frozenset(fs)``) is that operand's tracker; a set receiver changed in place records the
    call as a step of its recipe; a new set gets the call as its origin."""
    values = [v for v, _ in operands]
    recipes = _aliases(vars, [r for _, r in operands])
    try:
        result = fn(*values)
    except Exception as e:
        raise Unsupported(f"{what} raised {type(e).__name__}: {e}") from None
    known = all(r is not None for r in recipes)
    receiver = vars[0]
    if isinstance(receiver, SetVariable) and type(receiver.value) is set and (
            getattr(fn, "__name__", "") in _MUTATING or (fn in _INPLACE and result is receiver.value)):
        if any(isinstance(v, SetVariable) and v.held_tensors for v in vars[1:]) or any(
                _holds_tensor_node(r) for r in recipes[1:]):
            receiver.held_tensors = True
        if receiver.recipe is not None and known:
            receiver.recipe[1].append((fn, recipes[1:]))
        else:
            receiver.recipe = None
    for value, var in zip(values, vars):
        if result is value and isinstance(var, SetVariable):
            return var
    if type(result) in (set, frozenset):
        out = SetVariable(result, recipe=(("call", fn, recipes), []) if known else None)
        out.held_tensors = any(isinstance(v, SetVariable) and v.held_tensors for v in vars) or any(
            _holds_tensor_node(r) for r in recipes)
        return out
    from .builder import wrap_constant
    return wrap_constant(result)


def _holds_tensor_node(node):
    if not isinstance(node, tuple) or not node:
        return False
    if node[0] == "var":
        return True
    if node[0] == "seq":
        return any(_holds_tensor_node(n) for n in node[1])
    return False


def _aliases(vars, recipes):
    """The operands' recipes, a set passed again given as ``("alias", its first index)``:
    CPython takes shortcuts when operands are one object (``s &= s`` keeps ``s``, ``s -= s``
    clears it), so the rebuilt call must get one object too."""
    out = []
    for i, (var, recipe) in enumerate(zip(vars, recipes)):
        first = next((j for j in range(i) if vars[j] is var), None)
        out.append(("alias", first) if first is not None and isinstance(var, SetVariable) else recipe)
    return tuple(out)


def operand(tx, var):
    """(the real object that stands for ``var`` in a C set operation, its recipe: how to make
    an object the operation treats alike at run time, or None where there is none). Sets give
    their replica; dicts and key/item views a dict with the same keys in the same order (CPython
    walks them in that order); str, bytes, tuples and ranges themselves; other iterables (lists,
    generators) a tuple of their items, which CPython's generic path consumes alike."""
    from .dicts import DictVariable, DictViewVariable
    if isinstance(var, SetVariable):
        if var.recipe is None:
            return var.value, None
        return var.value, ("set", var.recipe[0], var.recipe[1], len(var.recipe[1]))
    if isinstance(var, DictViewVariable) and var.kind in ("keys", "items"):
        keys, values = _dict_parts(var.dict_var, var.kind == "items")
        real = dict(zip(keys, values)) if values is not None else dict.fromkeys(keys)
        return getattr(real, var.kind)(), ("view", var.kind, keys, values)
    if isinstance(var, DictVariable) and var.python_type() is dict:
        keys, _ = _dict_parts(var, False)
        return dict.fromkeys(keys), ("view", None, keys, None)
    if var.is_python_constant() and type(var.as_python_constant()) in (str, bytes, tuple, range):
        value = var.as_python_constant()
        if type(value) is tuple:
            value = tuple(element(ConstantVariable(v)) for v in value)
        return value, ("const", value)
    value = tuple(element(v, tx) for v in var.unpack_var_sequence(tx))  # (consumes an iterator)
    tensors = set()
    nodes = tuple(_node(v, tensors) for v in value)
    return value, (("seq", nodes) if tensors else ("const", value))


def _dict_parts(dict_var, with_values):
    keys = tuple(dict_var.items)
    for k in keys:
        element(ConstantVariable(k))
    if not with_values:
        return keys, None
    return keys, tuple(v.as_python_constant() for v in dict_var.items.values())


_MAX_RECIPE = 10_000  # instructions: a set rebuilt through a longer history is refused


def codegen_recipe(codegen, recipe):
    """Push a new object built as ``recipe`` says: its origin (a constant, or a call on other
    recipes), then each step ``fn(obj, *operands)`` in order."""
    start = len(codegen.instructions)

    def emit(node):
        if len(codegen.instructions) - start > _MAX_RECIPE:
            raise Unsupported("a set with too long a history to rebuild at run time")
        if node[0] == "const":
            return codegen.load_const(node[1])
        if node[0] == "var":
            return codegen(node[1])
        if node[0] == "seq":
            for sub in node[1]:
                emit(sub)
            codegen.append(bu.create_instruction("BUILD_TUPLE", len(node[1])))
            return None
        if node[0] == "view":  # dict.fromkeys(keys) or dict(zip(keys, values)); .keys()/.items()
            _, view, keys, values = node
            if values is None:
                call(dict.fromkeys, [("const", keys)])
            else:
                codegen.load_function(dict)
                call(zip, [("const", keys), ("const", values)])
                codegen.append_call(1)
            if view is not None:
                codegen.append_call_method(view, 0)
            return None
        _, origin, steps, n = node  # "set"
        if origin[0] == "const":
            codegen.load_const(origin[1])
        else:
            call(origin[1], origin[2])
        for fn, operands in steps[:n]:
            call(fn, [("receiver",), *operands])
            codegen.append_pop_top()

    def call(fn, operands):
        codegen.load_function(fn)
        for i, op in enumerate(operands):
            if op[0] == "receiver":  # below NULL and fn
                codegen.append(bu.create_instruction("COPY", 3))
            elif op[0] == "alias":
                codegen.append(bu.create_instruction("COPY", i - op[1]))
            else:
                emit(op)
        codegen.append_call(len(operands))

    emit(("set", recipe[0], recipe[1], len(recipe[1])))


def is_set_like(var):
    from .dicts import DictViewVariable
    return isinstance(var, SetVariable) or (isinstance(var, DictViewVariable) and var.kind in ("keys", "items"))


_INPLACE = {operator.ior, operator.iand, operator.isub, operator.ixor}


def binary_op(tx, fn, a, b):
    """``a <op> b`` where one side is a set or a key/item view: the real operator on the
    operands' replicas (``operator.ior`` mutates a set's replica in place, as CPython does)."""
    operands = [_operator_operand(tx, a), _operator_operand(tx, b)]
    if fn in _INPLACE and isinstance(a, SetVariable) and type(a.value) is set:
        a.mutate(tx)
    return apply(fn, [a, b], operands, fn.__name__)


def _operator_operand(tx, var):
    if is_set_like(var):
        return operand(tx, var)
    if var.is_python_constant():  # compared with a set, or a TypeError: the type is what matters
        value = var.as_python_constant()
        return value, ("const", value)
    raise Unsupported(f"{var} as an operand of a set operator")


def set_new(tx, cls, iterable=None):
    """``set(iterable)`` / ``frozenset(iterable)``."""
    if iterable is None:
        return SetVariable.new(cls(), ("call", cls, ()))
    return apply(cls, [iterable], [operand(tx, iterable)], cls.__name__)


def wrap_input_set(tx, value, source):
    """A set or frozenset read from the frame's inputs: its type and exact iteration order are
    guarded (equal sets may iterate differently). Without a source (read from torch's own
    modules), only a frozenset: that very object is used."""
    if not all(_is_element(v) for v in value):
        raise Unsupported(f"a {type(value).__name__} with elements other than plain constants")
    if source is None:
        if type(value) is not frozenset:
            raise Unsupported("a set that is not reachable from the frame's inputs")
        return SetVariable.new(value, ("const", value))
    tx.output.guards.TYPE_MATCH(source, value)
    check = IteratesAs(type(value), value)
    tx.output.guards.PREDICATE(source, check, f"{source.name()} {check!r}")
    return SetVariable(value, source)
