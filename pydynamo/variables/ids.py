"""``id(obj)`` while tracing, for objects whose identity the trace knows but whose address it
does not (an object made by the trace has none yet; one read from the inputs has one only while
pinned by an ID_MATCH guard).

``IdVariable`` is the int ``id(obj)``. What a program does with it decides what the trace must
know:

- ``id(a) == id(b)`` (and ``!=``), and a dict keyed by ids (``copy.deepcopy``'s memo): the same
  object gives the same id. Two different objects give different ids only while *both* are
  alive; an id taken of an object that has since died may be that of a new object (CPython
  reuses addresses). So a comparison of two different objects is answered only where both are
  provably alive at that point: reachable from the frames being traced (their locals, stacks
  and cells, through the containers and objects the trace holds), or read from the frame's
  inputs before the trace changed any of them. Otherwise it is refused.
- Anything else (arithmetic, ``hash()``, ``str()``, a comparison with a number, a return value
  of the compiled code) needs the number: for an object read from the inputs it is the real
  ``id()``, under an ID_MATCH guard (or computed at run time where it is returned); for an
  object made by the trace it is refused.

In a DictVariable, ``id(obj)`` is an ``IdKey`` (hashed by identity, one per object and dict);
``prepare_dict_call`` resolves a lookup against the keys already there (see above) before the
dict's own model runs. A dict keyed by ids never holds keys that could equal an int (numbers),
is never rebuilt at run time, never folded to a constant, and is never a dict that existed
before the frame.
"""
import numbers

from ..exc import ExceptionRaised, Unsupported
from .base import VariableTracker
from .constant import ConstantVariable

_IMMORTAL = (type(None), bool, type(Ellipsis), type(NotImplemented))


class IdVariable(VariableTracker):
    """``id(obj)``: ``obj`` is the tracker of the object; ``key`` the IdKey a dict method
    resolved it to (see prepare_dict_call)."""

    def __init__(self, obj, output, key=None):
        super().__init__(None)
        self.obj, self.output, self.key = obj, output, key

    def python_type(self):
        return int

    def truth(self, tx):
        return True  # no object lives at address 0

    def _pinnable(self):
        from .base import ObjectVariable
        from .objects import UserDefinedObjectVariable
        obj = self.obj
        if isinstance(obj, UserDefinedObjectVariable):
            return not obj.is_new and obj.source is not None
        if isinstance(obj, ConstantVariable):
            return type(obj.value) in _IMMORTAL
        return isinstance(obj, ObjectVariable) and obj.source is not None

    def is_python_constant(self):
        return self._pinnable()

    def as_python_constant(self):
        """The real number: the object is pinned by identity (ID_MATCH) or refused."""
        import weakref
        from .objects import UserDefinedObjectVariable
        obj = self.obj
        if not self._pinnable():
            raise Unsupported(f"id() of {obj} used as a number (its identity is not pinned: "
                              "only comparisons of ids and dict keys are modelled for it)")
        if isinstance(obj, UserDefinedObjectVariable):
            try:
                weakref.ref(obj.value)  # the guard must not keep the object alive
            except TypeError:
                raise Unsupported(f"id() of a {obj.python_type().__name__} (no weak references)") from None
            self.output.guards.ID_MATCH(obj.source, obj.value)
            return id(obj.value)
        return id(obj.as_python_constant())  # guarded by identity when read (builder)

    def reconstruct(self, codegen):
        if self.obj.source is None:
            raise Unsupported(f"id() of {self.obj} as a value at run time (the object is made "
                              "by the trace: its address is not known)")
        codegen.load_function(id)
        codegen(self.obj)
        codegen.append_call(1)

    def _repr_value(self):
        return f"id({self.obj})"


class IdKey:
    """What a DictVariable holds for the key ``id(var.obj)``: hashed and compared by identity
    (prepare_dict_call finds the key of the same object before the dict's model runs)."""

    __slots__ = ("var", "from_input")

    def __init__(self, var):
        self.var = var
        self.from_input = False  # a key of a dict read from the inputs (dicts.wrap_keyed_input)

    def __repr__(self):
        return f"id({self.var.obj})"


def same_object(tx, a, b):
    """Whether trackers ``a`` and ``b`` are one object: True, False, or None (not known)."""
    from .builtin import is_same_object
    from .mappings import InstanceDictVariable
    if a is b:
        return True
    da, db = isinstance(a, InstanceDictVariable), isinstance(b, InstanceDictVariable)
    if da and db:
        same = same_object(tx, a.obj, b.obj)
        if same:
            return True
        if same is None:
            return None
        # two objects share one __dict__ only after ``b.__dict__ = a.__dict__``: not for an
        # object the trace made (an assignment of __dict__ is not modelled)
        if a.obj.is_new or b.obj.is_new:
            return False
        ra, rb = _input_dict(tx, a), _input_dict(tx, b)
        return None if ra is None or rb is None else ra is rb
    if da or db:
        d, other = (a, b) if da else (b, a)
        try:
            if other.python_type() is not dict:
                return False
        except Unsupported:
            return None
        if other.source is None or d.obj.is_new:
            return False  # a dict made by the trace is no object's __dict__ (and vice versa)
        real = _input_dict(tx, d)
        if real is None:
            return None
        entry = tx.output.mutable_objects.get(id(real))
        if entry is not None and entry[1] is real:
            return True if entry[0] is other else None
        return False  # `other` is another object read from the inputs (aliasing guarded)
    if isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
        if type(a.value) in _IMMORTAL and type(b.value) in _IMMORTAL:
            return a.value is b.value
        return None  # which equal constants are one object is CPython's business
    try:
        return is_same_object(tx, a, b)
    except Unsupported:
        return None


def _input_dict(tx, d):
    """The real ``__dict__`` of the object read from the inputs behind InstanceDictVariable
    ``d``, registered with the objects whose aliasing is guarded (None: not known)."""
    from .objects import _real_dict
    obj = d.obj
    real = _real_dict(obj.value)
    if real is None or obj.source is None:
        return None
    src = obj._own_attr_source("__dict__")
    tx.output.mutable_sources[src.name()] = (src, real)
    tx.output.identity_read = True
    return real


def _reachable(tx):
    """ids of the trackers reachable from the frames being traced: objects alive now. Only
    references the real objects hold are followed (see output_graph.walk_values; not an
    iterator's items, nor the owner of a ``__dict__``)."""
    from ..output_graph import walk_values
    roots, t = [], tx
    while t is not None:
        roots += t.stack
        roots += [v for v in t.symbolic_locals.values() if v is not None]
        roots += list(t.cells.values())
        t = getattr(t, "parent", None)
    return {id(v) for v in walk_values(roots, through_iterators=False)}


def _alive(tx, var, reachable):
    """Whether the object of tracker ``var`` is certainly alive now: reachable from the frames
    being traced, or read from the frame's inputs while nothing the frame received has been
    changed yet (the caller holds the arguments, so what they reach stays alive), or the
    ``__dict__`` of such an object."""
    from .mappings import InstanceDictVariable
    if isinstance(var, ConstantVariable) and type(var.value) in _IMMORTAL:
        return True
    if id(var) in reachable:
        return True
    if isinstance(var, InstanceDictVariable):  # (assigning __dict__ is not modelled)
        return _alive(tx, var.obj, reachable)
    return var.source is not None and not any(
        effect[0] != "call" for effect in tx.output.side_effects._effects.values())


def ids_differ(tx, a, b):
    """``id(a) != id(b)`` for two trackers: True/False, or Unsupported where not known."""
    same = same_object(tx, a, b)
    if same is None:
        raise Unsupported(f"whether {a} and {b} are one object is not known while tracing "
                          "(a comparison of their id())")
    if same:
        return False
    reachable = _reachable(tx)
    for v in (a, b):
        if not _alive(tx, v, reachable):
            raise Unsupported(f"a comparison of id() of {v}, which may no longer be alive (CPython "
                              "may have given its address to another object)")
    return True


def _may_equal_int(key):
    """Whether a DictVariable key (a real value) could be equal to an int."""
    if type(key) is IdKey:
        return False
    if type(key) is tuple:
        return False
    return isinstance(key, numbers.Number)


def _tracker_may_equal_int(var):
    if var.is_python_constant():
        return isinstance(var.as_python_constant(), numbers.Number)
    try:
        cls = var.python_type()
    except Unsupported:
        return True
    return isinstance(cls, type) and issubclass(cls, numbers.Number)


# the DictVariable methods whose first argument is a key, and those that only read or copy
# the dict as a whole (safe with IdKeys: keys come back as IdVariables, see key_var)
_KEYED = {"__getitem__", "get", "__contains__", "__setitem__", "__delitem__", "pop", "setdefault"}
_WHOLE = {"__len__", "keys", "values", "items", "copy", "clear", "__iter__", "popitem"}
_MUTATING = {"__setitem__", "__delitem__", "pop", "setdefault"}


def has_id_keys(dict_var):
    return any(type(k) is IdKey for k in dict_var.items)


class TensorKey:
    """What a DictVariable holds for a tensor key: ``torch.Tensor`` hashes by identity and a
    dict compares identity first, so a key is found only by the same tensor object
    (prepare_dict_call resolves a lookup against the tensors already there, by what the trace
    knows of identity: builtin._same_tensor)."""

    __slots__ = ("var", "from_input")

    def __init__(self, var):
        self.var = var
        self.from_input = False  # a key of a dict read from the inputs (dicts.wrap_keyed_input)

    def __repr__(self):
        return f"<tensor key {self.var}>"


class ResolvedKeyVariable(VariableTracker):
    """A tensor argument of a dict method, resolved to the dict's TensorKey (dicts._key)."""

    def __init__(self, key):
        super().__init__(None)
        self.key = key


def has_tensor_keys(dict_var):
    return any(type(k) is TensorKey for k in dict_var.items)


def _resolve_tensor(tx, dict_var, tensor):
    from .builtin import _same_tensor
    keys = [k for k in dict_var.items if type(k) is TensorKey]
    found = _resolve_input_key(tx, keys, tensor)
    if found is not None:
        return found
    for k in dict_var.items:
        if type(k) is TensorKey and _same_tensor(tx, k.var, tensor):  # (not known: Unsupported)
            return k
    return TensorKey(tensor)


def _resolve_input_key(tx, keys, tensor):
    """A graph input looked up among tensor keys that are all graph inputs (an optimizer's
    ``state[p]``: keys read with the dict, or stored by the trace): the key that is the same
    object, under one aliasing guard (the keys are distinct objects: pinned by the dict's key
    guard, or resolved so when stored), or a new key, under one guard that it is none of them.
    None where this does not apply (the generic pairwise resolution)."""
    inputs = tx.output.inputs

    def real(var):
        if var.node.op != "placeholder" or var.source is None or var.source.name() not in inputs:
            return None
        return inputs[var.source.name()][1]
    if not keys:
        return None
    mine = real(tensor)
    reals = [real(k.var) for k in keys]
    if mine is None or any(r is None for r in reals):
        return None
    for k, r in zip(keys, reals):
        if r is mine:
            tx.output.guards.ALIASING([tensor.source, k.var.source], [mine, r])
            return k
    tx.output.guards.ALIASING([tensor.source, *(k.var.source for k in keys)], [mine, *reals])
    return TensorKey(tensor)


def _prepare_tensor_keys(tx, dict_var, name, args):
    """A tensor as the key of a dict method: resolved to the dict's key for that tensor. Merging
    one tensor-keyed dict into another could hold one tensor twice: refused."""
    from .tensor import TensorVariable
    key = args[0] if args else None
    if name in _KEYED and isinstance(key, TensorVariable):
        if dict_var.source is not None:
            keys = [k for k in dict_var.items if type(k) is TensorKey]
            # keys guarded by the dict's key guard: constants (a tensor is none of them), or
            # tensors read with the dict (resolved by identity under one aliasing guard)
            found = _resolve_input_key(tx, keys, key) if keys else TensorKey(key)
            if found is None:
                raise Unsupported("a tensor as a key of a dict that existed before the frame")
            return [ResolvedKeyVariable(found), *args[1:]]
        return [ResolvedKeyVariable(_resolve_tensor(tx, dict_var, key)), *args[1:]]
    from .dicts import DictVariable
    if name not in _KEYED and name not in _WHOLE and (has_tensor_keys(dict_var) or dict_var.source is not None) \
            and any(isinstance(a, DictVariable) and has_tensor_keys(a) for a in args):
        raise Unsupported(f"dict.{name} of a dict keyed by tensors into another dict keyed by tensors, "
                          "or into a dict that existed before the frame")
    return None


def prepare_dict_call(tx, dict_var, name, args):
    """The arguments of ``dict_var.<name>(*args)`` with an ``id()`` key resolved to the dict's
    IdKey for that object (or a new one), or Unsupported where the answer is not known."""
    resolved = _prepare_tensor_keys(tx, dict_var, name, args)
    if resolved is not None:
        return resolved
    key = args[0] if args else None
    with_ids = has_id_keys(dict_var)
    if name in _KEYED and isinstance(key, IdVariable) and dict_var.source is not None and not with_ids \
            and key._pinnable():
        # a dict that existed before the frame holds real ids: the object is pinned by identity
        # (ID_MATCH), so its id is that number at run time too (GradScaler's per-optimizer states)
        return [ConstantVariable(key.as_python_constant()), *args[1:]]
    if name in _KEYED and isinstance(key, IdVariable):
        if dict_var.source is not None and name in _MUTATING:
            raise Unsupported("id() stored as a key of a dict that existed before the frame")
        return [IdVariable(key.obj, key.output, resolve(tx, dict_var, key)), *args[1:]]
    if not with_ids and not any(isinstance(a, VariableTracker) and _holds_ids(a) for a in args):
        return args
    if name in _KEYED and key is not None:
        if _tracker_may_equal_int(key):
            raise Unsupported(f"a number looked up in a dict keyed by id() ({key}): whether it "
                              "is one of the ids is not known while tracing")
        return args
    if name in _WHOLE:
        return args
    raise Unsupported(f"dict.{name} with a dict keyed by id()")


def _holds_ids(var):
    from .dicts import DictVariable
    return isinstance(var, DictVariable) and has_id_keys(var)


def resolve(tx, dict_var, idvar):
    """The IdKey of ``dict_var`` for ``id(idvar.obj)``: the key of the same object, or a new
    one where every key of the dict is known to be another object's id."""
    if any(_may_equal_int(k) for k in dict_var.items):
        raise Unsupported("id() looked up in a dict that also has number keys: whether it is "
                          "one of them is not known while tracing")
    reachable = None
    for k in dict_var.items:
        if type(k) is not IdKey:
            continue
        same = same_object(tx, idvar.obj, k.var.obj)
        if same is None:
            raise Unsupported(f"whether {idvar.obj} and {k.var.obj} are one object is not known "
                              "while tracing (a lookup of id() in a dict)")
        if same:
            return k
        if reachable is None:
            reachable = _reachable(tx)
        for v in (idvar.obj, k.var.obj):
            if not _alive(tx, v, reachable):
                raise Unsupported(f"a lookup of id() in a dict whose keys include the id of {v}, "
                                  "which may no longer be alive (CPython may have given its "
                                  "address to another object)")
    return IdKey(idvar)


def dict_key(idvar):
    """The real key a DictVariable holds for ``idvar`` (resolved by prepare_dict_call)."""
    if idvar.key is None:
        raise Unsupported(f"{idvar} as a dict key here (only dict methods of a dict keyed by "
                          "id() are modelled)")
    return idvar.key


def key_var(key):
    """The tracker of an IdKey found in a dict (resolved again by each dict it is used with)."""
    return IdVariable(key.var.obj, key.var.output)


def key_error(key):
    """KeyError(id(obj)) raised by a dict lookup (its argument is not known while tracing)."""
    from .exceptions import ExceptionVariable
    var = ExceptionVariable(KeyError, [key_var(key)])
    var.by_model = True
    return ExceptionRaised(var)


def binary_op(tx, fn, a, b):
    """``a <op> b`` where an operand is an IdVariable (operator module function ``fn``)."""
    import operator
    from .builtin import call_builtin
    if fn in (operator.eq, operator.ne) and isinstance(a, IdVariable) and isinstance(b, IdVariable):
        differ = ids_differ(tx, a.obj, b.obj)
        return ConstantVariable(differ if fn is operator.ne else not differ)
    if fn in (operator.eq, operator.ne):
        other = b if isinstance(a, IdVariable) else a
        if isinstance(other, ConstantVariable) and not isinstance(other.value, numbers.Number):
            return ConstantVariable(fn is operator.ne)  # an int is never equal to a str, None...
    a, b = (ConstantVariable(v.as_python_constant()) if isinstance(v, IdVariable) else v for v in (a, b))
    return call_builtin(tx, fn, [a, b], {}, from_opcode=True)
