"""Recipes: values made in the trace that a resume function makes again in its prologue.

A value alive at a graph break is usually given to the resume function as an object (built by
generated code, ``reconstruct``). Some values are better made again by the resume function's
own prologue, where its trace sees them being made, as they were made in the first trace:

* a function made in the trace (a lambda, an inner def): given as an object, its trace would
  guard it by identity, and a new function each call would compile the rest again each call;
  made again by MAKE_FUNCTION over the frame's cells (free variables of the resume function);
* an iterator over known items (``iter(list)``, ``zip``, ``enumerate``, ``range``...) and the
  polyfill generators standing for C iterators (``map``, ``filter``, ``itertools.count``...):
  given as objects, the trace could not see their items;
* a user's generator suspended at a ``yield``: a generator function made from its code goes
  on from there (resume.generator_resume_code), given its stack and live locals;
* tuples and lists made in the trace holding such values.

``recipe_of`` turns a tracker into a recipe (hashable data: resume codes are memoised by it)
and its leaves (trackers passed as they are, in one tuple argument); resume.py emits the
prologue's bytecode from the recipe. A recipe node is one of:

* ``("leaf",)``: the next leaf;
* ``("const", value)``;
* ``("global", name)``: a global of the frame (a resume generator's function);
* ``("call", fn, (node, ...))``: ``fn(*nodes)`` (``fn`` is ``rebuild_call``,
  ``rebuild_iterator`` or ``rebuild_generator``, whose calls the trace models:
  ``RebuildVariable``);
* ``("tuple", (node, ...))``, ``("list", (node, ...))``, ``("dict", keys, (node, ...))``;
* ``("fn", code, defaults node or None, keyword defaults node or None, annotations, cell names)``.

A list made again is a new object: one held by anything else alive (``shared``) is passed as an
object instead.
"""
from ..exc import Unsupported
from .base import VariableTracker

LEAF = ("leaf",)


def rebuild_call(fn, *args):
    """``fn(*args)``: a C iterator (map, filter...) made again by a resume function's prologue."""
    return fn(*args)


def rebuild_generator(fn, *args):
    """A user's generator suspended at a yield, made again: ``fn`` (resume.generator_resume_code)
    goes on from there; its first ``next()`` runs up to a yield of its own, so that it is
    suspended at a yield too, and the next ``send`` or ``next`` reaches the user's code after
    the original one."""
    gen = fn(*args)
    next(gen)
    return gen


def rebuild_iterator(items, kind):
    """An iterator of type ``kind`` (lists.ITERATOR_KINDS) yielding ``items`` (a tuple)."""
    from .lists import ITERATOR_KINDS
    return ITERATOR_KINDS[kind][1](items)


class RebuildVariable(VariableTracker):
    """``rebuild_call`` / ``rebuild_iterator`` called in a resume function's prologue: the value
    they make, as the trace models it (the polyfill's generator, the iterator of the items)."""

    def __init__(self, fn):
        super().__init__(None)
        self.fn = fn

    def call_function(self, tx, args, kwargs):
        from .builder import wrap_value
        from .lists import ITERATOR_KINDS, ListIteratorVariable
        if self.fn is rebuild_iterator:
            items, kind = args
            return ListIteratorVariable(items.unpack_var_sequence(tx), ITERATOR_KINDS[kind.as_python_constant()][0])
        if self.fn is rebuild_generator:
            gen = args[0].call_function(tx, list(args[1:]), {})
            gen.next_item(tx)  # up to the resume generator's own first yield
            return gen
        fn = args[0].value if hasattr(args[0], "value") else args[0].as_python_constant()
        return wrap_value(tx, fn, None).call_function(tx, list(args[1:]), {})


def is_rebuild_function(value):
    return value is rebuild_call or value is rebuild_iterator or value is rebuild_generator


def _kinds():
    from .functions import GeneratorVariable, NestedUserFunctionVariable
    from .lists import ListIteratorVariable
    return (NestedUserFunctionVariable, ListIteratorVariable, GeneratorVariable)


def needs_recipe(var):
    """Whether ``var`` holds a value better made again by the prologue."""
    from ..output_graph import walk_values
    kinds = _kinds()
    return any(isinstance(v, kinds) for v in walk_values([var]))


def recipe_of(var, frame_globals, shared):
    """(recipe, leaves) making ``var`` again in a resume function of a frame with globals
    ``frame_globals``; None where it is better passed as an object. ``shared``: ids of trackers
    that something else alive holds (not to be made twice)."""
    if not needs_recipe(var):
        return None
    leaves = []
    node = _node(var, frame_globals, shared, leaves, top=True)
    return None if node == LEAF else (node, leaves)


def _node(var, frame_globals, shared, leaves, top=False):
    from .constant import ConstantVariable
    from .functions import GeneratorVariable, NestedUserFunctionVariable
    from .lists import ListIteratorVariable, ListVariable, TupleVariable

    def leaf(v):
        leaves.append(v)
        return LEAF

    def sub(v):
        return _node(v, frame_globals, shared, leaves) if needs_recipe(v) else leaf(v)

    if not top and id(var) in shared:
        return leaf(var)
    if isinstance(var, NestedUserFunctionVariable):
        spec = var.prologue_spec(frame_globals)
        if spec is None:
            return leaf(var)
        code, cells, annotations = spec
        defaults = ("tuple", tuple(sub(d) for d in var.defaults)) if var.defaults else None
        kwdefaults = None
        if var.kwdefaults:
            keys = tuple(var.kwdefaults)
            kwdefaults = ("dict", keys, tuple(sub(var.kwdefaults[k]) for k in keys))
        return ("fn", code, defaults, kwdefaults, annotations, cells)
    if isinstance(var, ListIteratorVariable):
        kind = var.rebuild_kind()
        if kind is None:
            return leaf(var)
        items = ("tuple", tuple(sub(i) for i in var.items[var.index:]))
        return ("call", rebuild_iterator, (items, ("const", kind)))
    if isinstance(var, GeneratorVariable):
        state = var.c_iterator_state()
        if state is not None:
            fn, args = state
            return ("call", rebuild_call, (("const", fn), *(sub(a) for a in args)))
        state = var.resume_state()
        if state is None:
            return leaf(var)
        from ..output_graph import install_global
        fn, stack, local_values = state
        name = f"__resume_gen_{id(fn.__code__):x}"
        install_global(frame_globals, name, fn)
        return ("call", rebuild_generator, (("global", name), *(sub(a) for a in [*stack, *local_values])))
    if isinstance(var, TupleVariable) and var.python_type() is tuple and var.source is None:
        return ("tuple", tuple(sub(i) for i in var.items))
    if type(var) is ListVariable and var.source is None and id(var) not in shared:
        return ("list", tuple(sub(i) for i in var.items))
    if isinstance(var, ConstantVariable):
        return ("const", var.as_python_constant())
    return leaf(var)


def check_rebuildable(var, frame_globals):
    """Refuse ``var`` if it holds a function made in the trace that would be given as an object
    (its trace would guard it by identity: compiled again on every call)."""
    from ..output_graph import walk_values
    from .functions import NestedUserFunctionVariable
    for inner in walk_values([var]):
        if isinstance(inner, NestedUserFunctionVariable):
            exc = Unsupported(f"the function {inner.code.co_qualname}, made in the trace, would be "
                              "given to the rest of the frame as a new object on each call")
            exc.culprit = inner
            raise exc
