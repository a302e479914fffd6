"""Mutations of objects that existed before the frame, recorded while tracing and replayed by
the generated code, in the order they were first made: before each graph break (the code that
runs natively must see them) and before returning.

Three kinds, each keyed by what it changes, so a later change of the same thing replaces the
earlier one (only the final state is observable):

* the contents of a pre-existing list or dict (``lst.append(x)``, ``d[k] = v``): the new
  contents are rebuilt and written back into the same object (``lst[:] = new``,
  ``d.clear(); d.update(new)``), so every alias sees them;
* an attribute of a pre-existing object or module (``obj.count += 1``): ``STORE_ATTR``;
* a global of the frame's module (``global G; G = x``): ``STORE_GLOBAL``.

The trace reads its own writes: ``load_attr`` / ``load_global`` answer with the stored tracker.
All new values are built before any is written, since a write may change what a Source reads.
"""
from . import bytecode_utils as bu
from .exc import Unsupported


class SideEffects:
    def __init__(self):
        self._effects = {}  # key -> (kind, target tracker or name, value tracker or None)

    def __bool__(self):
        return bool(self._effects)

    # ---- recording ----------------------------------------------------------------------------

    def mutate_container(self, var):
        if var.source is not None:
            self._effects.setdefault(("contents", var.source.name()), ("contents", var, None))

    def store_attr(self, obj, name, value):
        if obj.source is None:
            raise Unsupported(f"attribute assignment on {obj}, which was created while tracing")
        key = ("attr", obj.source.name(), name)
        self._effects.pop(key, None)  # replayed in the order of the last store
        self._effects[key] = ("attr", obj, value, name)

    def store_global(self, name, value):
        key = ("global", name)
        self._effects.pop(key, None)
        self._effects[key] = ("global", name, value)

    def load_attr(self, obj, name):
        if obj.source is None:
            return None
        effect = self._effects.get(("attr", obj.source.name(), name))
        return effect[2] if effect is not None else None

    def load_global(self, name):
        effect = self._effects.get(("global", name))
        return effect[2] if effect is not None else None

    # ---- replaying ----------------------------------------------------------------------------

    def values(self):
        """Trackers the replay needs at run time (tensors among them must be graph outputs)."""
        out = []
        for effect in self._effects.values():
            if effect[0] == "contents":
                out.append(effect[1])
            else:
                out.append(effect[2])
        return out

    def codegen_save(self, cg):
        """Build every new value into a temporary; returns what ``codegen_apply`` needs."""
        saved = []
        for effect in self._effects.values():
            temp = cg.new_temp()
            if effect[0] == "contents":
                _build_contents(cg, effect[1])
            else:
                cg(effect[2])
            cg.store_local(temp)
            saved.append((effect, temp))
        return saved

    def codegen_apply(self, cg, saved):
        for effect, temp in saved:
            kind = effect[0]
            if kind == "contents":
                _replay_contents(cg, effect[1], temp)
            elif kind == "attr":
                cg.load_local(temp)
                effect[1].source.reconstruct(cg)
                cg.append(bu.create_instruction("STORE_ATTR", effect[3]))
            else:
                cg.load_local(temp)
                cg.append(bu.create_instruction("STORE_GLOBAL", effect[1]))


def _build_contents(cg, var):
    from .variables.dicts import DictVariable
    is_dict = isinstance(var, DictVariable)
    for k, v in (var.items.items() if is_dict else enumerate(var.items)):
        if is_dict:
            cg.load_const(k)
        cg(v)
    cg.append_build(dict if is_dict else list, len(var.items))


def _replay_contents(cg, var, temp):
    """Make the pre-existing container ``var.source`` hold what the trace left in it."""
    from .variables.dicts import DictVariable
    if isinstance(var, DictVariable):
        var.source.reconstruct(cg)
        cg.append_call_method("clear", 0)
        cg.append_pop_top()
        var.source.reconstruct(cg)
        cg.append_load_method("update")
        cg.load_local(temp)
        cg.append_call(1)
        cg.append_pop_top()
    else:
        cg.load_local(temp)
        var.source.reconstruct(cg)
        cg.load_const(slice(None, None, None))
        cg.append(bu.create_store_subscr())
