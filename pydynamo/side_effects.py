"""Mutations of objects that existed before the frame, recorded while tracing and replayed by
the generated code, in the order they were first made: before each graph break (the code that
runs natively must see them) and before returning.

Each kind is keyed by what it changes, so a later change of the same thing replaces the
earlier one (only the final state is observable):

* the contents of a pre-existing list or dict (``lst.append(x)``, ``d[k] = v``): the new
  contents are rebuilt and written back into the same object (``lst[:] = new``,
  ``d.clear(); d.update(new)``), so every alias sees them;
* an attribute of a pre-existing module (``self.count += 1``) or class (``Cls.count += 1``):
  ``STORE_ATTR``. After a class attribute is written, the trace reads it back only through the
  same path; any other lookup of that name along an MRO holding the class is refused
  (``class_written``), since it would see the old value;
* an instance-dict entry or slot of a pre-existing user object (``obj.x = v``, ``del obj.x``,
  whatever Python ``__setattr__`` or property setter led there): its final state, written into
  the instance dict itself (or through the slot's member descriptor): the trace already ran the
  class's own ``__setattr__``, the replay is the raw write it ended in. The state lives in the
  object's tracker (``attrs`` / ``slots``), where the trace reads it back;
* a global of the frame's module (``global G; G = x``): ``STORE_GLOBAL``;
* a call whose only effect is outside the program (logging, warnings): the call itself;
* a closure cell of a function that existed before the frame (``nonlocal n; n += 1``), or one
  of the compiled frame's own cells: ``STORE_DEREF`` for the frame's own cells and free
  variables, ``cell.cell_contents = x`` for others;
* a Python attribute of a tensor the graph computes (``y = x * 2; y.tag = 5``): keyed by its
  fake tensor (an op that returns its input, ``y.add_(1)``, gives the same one), ``STORE_ATTR``
  on the graph's output, if the tensor is one; a tensor the graph does not return is dead, and
  no one sees its attribute;
* ``p.data = t`` on a graph input: the graph itself makes the change (variables/tensor.py); the
  record replays nothing, it shows that the trace changed state (a subgraph region, an
  lru_cache'd call compare the records) and checks, as the trace ends, that the graph did not
  then change p's new memory in place (``_check_data_unchanged``).

The trace reads its own writes: ``load_attr`` / ``load_global`` answer with the stored tracker
(a module's attribute by whatever path reaches the module).
All new values are built before any is written, and so is every object written into (a target
reached by a Source): a write may change what a Source reads (``kwargs[new] = kwargs.pop(old)``
replayed into ``kwargs`` before a store into ``kwargs[old].layers[0]``).
"""
import collections

from . import bytecode_utils as bu
from .exc import Unsupported


class SideEffects:
    def __init__(self):
        self._effects = {}  # key -> (kind, target tracker or name, value tracker or None)
        self._class_writes = {}  # attribute name -> ids of the classes the trace wrote it on
        self.buffer_stores = set()  # ids of the modules a buffer of which the trace reassigned

    def __bool__(self):
        return bool(self._effects)

    # ---- recording ----------------------------------------------------------------------------

    def mutate_container(self, var):
        if var.source is not None:
            self._effects.setdefault(("contents", var.source.name()), ("contents", var, None))

    def store_attr(self, obj, name, value):
        if obj.source is None:
            raise Unsupported(f"attribute assignment on {obj}, which was created while tracing")
        key = _attr_key(obj, name)
        self._effects.pop(key, None)  # replayed in the order of the last store
        self._effects[key] = ("attr", obj, value, name)

    def store_class_attr(self, cls_var, name, value):
        """``cls.name = value`` on a pre-existing class (type.__setattr__: checked by the caller)."""
        self.store_attr(cls_var, name, value)
        self._class_writes.setdefault(name, {})[id(cls_var.value)] = cls_var.value

    def class_written(self, cls, name):
        """The trace wrote ``name`` on a class along ``cls``'s MRO (a lookup would see the old
        value: the caller refuses)."""
        written = self._class_writes.get(name)
        return bool(written) and isinstance(cls, type) and any(id(c) in written for c in cls.__mro__)

    def store_object_attr(self, obj, name, slot):
        """``obj.attrs[name]`` (or ``obj.slots``) was written: replay its final state, in the
        order each name was first written (the instance dict's key order)."""
        self._effects.setdefault(("objattr", id(obj), name, slot), ("objattr", obj, name, slot))

    def store_global(self, name, value):
        key = ("global", name)
        self._effects.pop(key, None)
        self._effects[key] = ("global", name, value)

    def store_cell(self, cell, value):
        """``nonlocal x; x = value`` into a closure cell that existed before the frame."""
        key = ("cell", cell.source.name() if cell.source is not None else f"<cell {cell.frame_name}>")
        self._effects.pop(key, None)
        self._effects[key] = ("cell", cell, value)

    def drop_cell(self, cell):
        """Forget the stores into the frame's own ``cell`` (the frame is returning)."""
        self._effects.pop(("cell", f"<cell {cell.frame_name}>"), None)

    def store_tensor_attr(self, var, name, value):
        """``var.name = value`` on a tensor computed in the graph."""
        key = ("tattr", id(var.example_value), name)
        self._effects.pop(key, None)
        self._effects[key] = ("tattr", var, value, name)

    def load_tensor_attr(self, var, name):
        effect = self._effects.get(("tattr", id(var.example_value), name))
        return effect[2] if effect is not None else None

    def set_tensor_data(self, var, value):
        """``var.data = value`` on a graph input (made by the graph, tensor.py). Each assignment
        is a new record, so that a comparison of the records before and after sees it; it holds
        the version of the input's new fake tensor, see values()."""
        key = ("data", var.source.name())
        self._effects.pop(key, None)
        self._effects[key] = ("data", var, value, var.example_value, var.example_value._version)

    def tensor_data_set(self, var):
        return ("data", var.source.name()) in self._effects

    def record_call(self, call):
        """A call whose only effect is outside the program's values (logging, warnings; see
        variables/deferred.py): replayed once, in order with the other effects."""
        self._effects[("call", id(call))] = ("call", call, call.values)

    def load_attr(self, tx, obj, name):
        """``obj.name`` as the trace last stored it, or None. A module's is found by the object,
        whichever path the store took: the answer holds while which of the modules written and
        read are the same object does, which is pinned (ALIASING)."""
        from .variables.nn_module import NNModuleVariable, pin_identities
        if obj.source is None:
            return None
        if isinstance(obj, NNModuleVariable):
            written = [e[1] for k, e in self._effects.items() if k[0] == "attr" and k[2] == name
                       and isinstance(e[1], NNModuleVariable) and e[1].source.name() != obj.source.name()]
            if written:
                pin_identities(tx, [obj, *written])
        effect = self._effects.get(_attr_key(obj, name))
        return effect[2] if effect is not None else None

    def load_global(self, name):
        effect = self._effects.get(("global", name))
        return effect[2] if effect is not None else None

    def pending(self):
        """The effects recorded so far, in order: (kind, target, ...) tuples (see _effects)."""
        return list(self._effects.values())

    # ---- replaying ----------------------------------------------------------------------------

    def values(self):
        """Trackers the replay needs at run time (tensors among them must be graph outputs)."""
        out = []
        for effect in self._effects.values():
            if effect[0] == "contents":
                out.append(effect[1])
            elif effect[0] == "objattr":
                out.extend(v for v in [_object_attr(effect)] if v is not None)
            elif effect[0] == "data":
                _check_data_unchanged(effect)
            else:  # for "tattr" the value only: the tensor is an output if it outlives the graph
                out.append(effect[2])
        return out

    def codegen_save(self, cg):
        """Build every new value, and load every object written into, into temporaries (each
        Source is read before any write); returns what ``codegen_apply`` needs."""
        saved = []
        for effect in self._effects.values():
            if effect[0] == "data" or effect[0] == "tattr" and not _tensor_outputs(cg, effect[1]):
                continue
            target = _load_target(cg, effect)
            temp = cg.new_temp()
            if effect[0] == "contents":
                _build_contents(cg, effect[1])
            elif effect[0] == "objattr":
                if _object_attr(effect) is None:  # deleted: nothing to build
                    saved.append((effect, None, target))
                    continue
                cg(_object_attr(effect))
            else:
                cg(effect[2])
            cg.store_local(temp)
            saved.append((effect, temp, target))
        return saved

    def codegen_apply(self, cg, saved):
        for effect, temp, target in saved:
            kind = effect[0]
            if kind == "contents":
                _replay_contents(cg, effect[1], temp, target)
            elif kind == "attr":
                cg.load_local(temp)
                cg.load_local(target)
                cg.append(bu.create_instruction("STORE_ATTR", effect[3]))
            elif kind == "tattr":
                for tensor in _tensor_outputs(cg, effect[1]):
                    cg.load_local(temp)
                    cg(tensor)
                    cg.append(bu.create_instruction("STORE_ATTR", effect[3]))
            elif kind == "objattr":
                _replay_object_attr(cg, effect, temp, target)
            elif kind == "cell":
                cg.load_local(temp)
                if target is None:
                    effect[1].codegen_store(cg)  # the frame's own cell: STORE_DEREF
                else:
                    cg.load_local(target)
                    cg.append(bu.create_instruction("STORE_ATTR", "cell_contents"))
            elif kind == "call":
                effect[1].codegen_replay(cg, temp)
            else:
                cg.load_local(temp)
                cg.append(bu.create_instruction("STORE_GLOBAL", effect[1]))


def _load_target(cg, effect):
    """The object ``effect`` writes into, loaded into a temporary by its Source; None where the
    write names no object (a global, the frame's own cell, a tensor the graph returns)."""
    from .source import ClosureSource
    kind = effect[0]
    if kind in ("contents", "attr", "objattr"):
        src = effect[1].source
    elif kind == "cell" and effect[1].source is not None and not isinstance(effect[1].source, ClosureSource):
        src = effect[1].source.base
    else:
        return None
    if kind == "objattr" and _object_attr(effect) is None \
            and not effect[1].orig_present.get(effect[2], False):
        return None  # added, then deleted: nothing is written
    cg.source(src)
    temp = cg.new_temp()
    cg.store_local(temp)
    return temp


def _attr_key(obj, name):
    """An attribute store's key: a module's by the object (the store pins which one it is,
    opcodes.store_attr), so that a read through another path to it sees the store (load_attr);
    anything else's (a class, a tensor input) by its source."""
    from .variables.nn_module import NNModuleVariable
    return ("attr", id(obj.module) if isinstance(obj, NNModuleVariable) else obj.source.name(), name)


def _build_contents(cg, var):
    from .variables.dicts import DictVariable, load_key
    is_dict = isinstance(var, DictVariable)
    for k, v in (var.items.items() if is_dict else enumerate(var.items)):
        if is_dict:
            load_key(cg, k)
        cg(v)
    cg.append_build(dict if is_dict else list, len(var.items))


def _replay_contents(cg, var, temp, target):
    """Make the pre-existing container ``var.source`` hold what the trace left in it."""
    from .variables.dicts import DictVariable
    from .variables.lists import DequeVariable
    if getattr(var, "raw_of", None) is collections.OrderedDict:
        # an OrderedDict subclass instance: OrderedDict.clear(d), then OrderedDict.__setitem__(d, k,
        # new[k]) per key, in order (its own methods may be overridden, dict's skip the order)
        cg.load_function(collections.OrderedDict.clear)
        cg.load_local(target)
        cg.append_call(1)
        cg.append_pop_top()
        for k in var.items:
            cg.load_function(collections.OrderedDict.__setitem__)
            cg.load_local(target)
            cg.load_const(k)
            cg.load_local(temp)
            cg.load_const(k)
            cg.append(bu.create_binary_subscr())
            cg.append_call(3)
            cg.append_pop_top()
    elif isinstance(var, DequeVariable) or (isinstance(var, DictVariable) and type(var) is not DictVariable):
        # a deque, OrderedDict or defaultdict (exactly that type): d.clear(); d.extend/update(new)
        cg.load_local(target)
        cg.append_call_method("clear", 0)
        cg.append_pop_top()
        cg.load_local(target)
        cg.append_load_method("extend" if isinstance(var, DequeVariable) else "update")
        cg.load_local(temp)
        cg.append_call(1)
        cg.append_pop_top()
    elif isinstance(var, DictVariable):  # a dict or dict subclass: dict.clear(d); dict.update(d, new)
        for method, args in ((dict.clear, ()), (dict.update, (temp,))):
            cg.load_function(method)
            cg.load_local(target)
            for a in args:
                cg.load_local(a)
            cg.append_call(1 + len(args))
            cg.append_pop_top()
    else:  # list.__setitem__(lst, slice(None), new)
        cg.load_function(list.__setitem__)
        cg.load_local(target)
        cg.load_const(slice(None, None, None))
        cg.load_local(temp)
        cg.append_call(3)
        cg.append_pop_top()


def _check_data_unchanged(effect):
    """After ``p.data = t`` in the graph, nothing may change p's new memory in place:
    AOTAutograd refuses set_() on an input that has other changes (outside no_grad), so the
    graph would not compile. Found as the trace ends (a change may come through any alias):
    the frame then runs eagerly."""
    _, var, _, fake, version = effect
    if fake._version != version:
        exc = Unsupported(f"Tensor.data of {var.source.name()} was assigned, then changed in place in "
                          "the same graph (AOTAutograd cannot compile that set_())",
                          "change the new tensor before assigning it to .data")
        exc.whole_frame = True
        raise exc


def _tensor_outputs(cg, var):
    """Trackers of the graph outputs that are the tensor ``var`` is: the nodes giving its fake
    tensor (one object in eager; a backend may return one object per node)."""
    from .variables.tensor import TensorVariable
    return [TensorVariable(node, var.example_value) for node in cg.graph_outputs
            if node.meta.get("example_value") is var.example_value]


def _object_attr(effect):
    """The final tracker of an object attribute effect; None if the attribute was deleted."""
    from .variables.descriptors import DELETED
    _, obj, name, slot = effect
    value = (obj.slots if slot else obj.attrs)[name]
    return None if value is DELETED else value


def _replay_object_attr(cg, effect, temp, target):
    """Write the final state of one attribute of a pre-existing object: a slot through its
    member descriptor (``object.__setattr__`` / ``__delattr__``), an instance-dict entry into
    the dict itself (a data descriptor of that name may exist, which the trace did not run:
    the write was made through ``obj.__dict__``). Deleting an attribute the object did not have
    (added, then deleted, by the trace) leaves nothing to do."""
    _, obj, name, slot = effect
    if temp is None and not obj.orig_present.get(name, False):
        return
    if slot:
        cg.load_function(object.__setattr__ if temp is not None else object.__delattr__)
        cg.load_local(target)
        cg.load_const(name)
        if temp is not None:
            cg.load_local(temp)
        cg.append_call(3 if temp is not None else 2)
        cg.append_pop_top()
        return
    if temp is not None:
        cg.load_local(temp)
    load_instance_dict(cg, lambda: cg.load_local(target))
    cg.load_const(name)
    cg.append(bu.create_store_subscr() if temp is not None else bu.create_instruction("DELETE_SUBSCR"))


def load_instance_dict(cg, load_obj):
    """Push ``object.__getattribute__(obj, '__dict__')`` (no user ``__getattribute__`` runs)."""
    cg.load_function(object.__getattribute__)
    load_obj()
    cg.load_const("__dict__")
    cg.append_call(2)
