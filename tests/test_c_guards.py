"""GuardSet: every check kind, value chains, failure texts, refusal of bad input."""
import gc
import types

import pytest

from pydynamo import _C
from c_support import guards


def L(i, *chain):
    return (("L", i),) + tuple(chain)


def one(steps, kind, value, text="check"):
    return guards((steps, kind, value, text))


def _torch():
    return pytest.importorskip("torch")


def tensor_spec(t, sizes=None, strides=None):
    return (type(t), t.dtype, t.device, t.layout, t.requires_grad,
            tuple(t.shape) if sizes is None else sizes, t.stride() if strides is None else strides)


def test_type_match_is_exact():
    class Sub(int):
        pass
    gs = one(L(0), "TYPE_MATCH", int)
    assert gs.check([3], {})
    assert not gs.check([Sub(3)], {})
    assert not gs.check([True], {})


def test_id_match_weak_and_strong():
    class Obj:
        pass
    a, b = Obj(), Obj()
    gs = one(L(0), "ID_MATCH", a)
    assert gs.check([a], {}) and not gs.check([b], {})
    # a dead weak reference fails: even None, which a dead weakref reads as, must not pass
    del a
    gc.collect()
    assert not gs.check([None], {})
    assert "no longer exists" in gs.first_failure([None], {})
    strong = one(L(0), "ID_MATCH", [1])  # lists are not weakly referenceable: held strongly
    assert not strong.check([[1]], {})


@pytest.mark.parametrize("value,same,different", [
    (None, None, 0),
    (True, True, 1),
    (1, 1, True),
    (1, 1, 1.0),
    (0.0, 0.0, -0.0),
    (float("nan"), float("nan"), 1.0),
    ("s", "s", b"s"),
    ((1, "a", (2.5, None)), (1, "a", (2.5, None)), (1, "a", (2.5, 0))),
    ((1,), (1,), (True,)),
])
def test_equals_match_same_type_and_bits(value, same, different):
    gs = one(L(0), "EQUALS_MATCH", value)
    assert gs.check([same], {})
    assert not gs.check([different], {})


def test_equals_match_refuses_mutable_constants():
    with pytest.raises(TypeError, match="EQUALS_MATCH takes"):
        one(L(0), "EQUALS_MATCH", [1])
    with pytest.raises(TypeError, match="EQUALS_MATCH takes"):
        one(L(0), "EQUALS_MATCH", (1, {}))


def test_tensor_match_each_property():
    torch = _torch()
    t = torch.randn(2, 3)
    gs = one(L(0), "TENSOR_MATCH", tensor_spec(t), "L['x']")
    assert gs.check([t], {}) and gs.check([torch.zeros(2, 3)], {})
    cases = {
        "type": torch.nn.Parameter(torch.randn(2, 3)),
        "dtype": torch.randn(2, 3, dtype=torch.float64),
        "device": torch.randn(2, 3, device="meta"),
        "layout": torch.randn(2, 3).to_sparse(),
        "requires_grad": torch.randn(2, 3, requires_grad=True),
        "size": torch.randn(3, 3),
        "stride": torch.randn(3, 2).t(),
    }
    for what, other in cases.items():
        assert not gs.check([other], {}), what
        assert gs.first_failure([other], {}) == f"L['x'] ({what})"
    assert not gs.check([torch.randn(2, 3, 1)], {})  # rank
    assert gs.first_failure([3], {}) == "L['x'] (type)"
    assert "could not be read" in gs.first_failure([], {})


def test_tensor_match_any_size():
    torch = _torch()
    t = torch.randn(2, 3)
    gs = one(L(0), "TENSOR_MATCH", tensor_spec(t, sizes=(None, 3), strides=(None, 1)))
    assert gs.check([torch.randn(7, 3)], {})
    assert not gs.check([torch.randn(7, 4)], {})


def test_dict_keys_len_predicate_not_present():
    assert one(L(0), "DICT_KEYS", ("a", "b")).check([{"a": 1, "b": 2}], {})
    assert not one(L(0), "DICT_KEYS", ("a", "b")).check([{"b": 2, "a": 1}], {})  # order matters
    assert not one(L(0), "DICT_KEYS", ("a",)).check([{"a": 1, "b": 2}], {})
    assert not one(L(0), "DICT_KEYS", (1,)).check([{True: 1}], {})
    assert one(L(0), "LEN", 2).check([[1, 2]], {}) and not one(L(0), "LEN", 2).check([[1]], {})
    assert not one(L(0), "LEN", 2).check([3], {})  # len() raising fails the check
    assert one(L(0), "PREDICATE", lambda v: v > 2).check([3], {})
    assert not one(L(0), "PREDICATE", lambda v: 1 / 0).check([3], {})
    flag = []
    assert one((), "PREDICATE", lambda: not flag).check([], {})
    flag.append(1)
    assert not one((), "PREDICATE", lambda: not flag).check([], {})
    assert one((("G", "missing"),), "NOT_PRESENT", None).check([], {})
    assert not one((("G", "there"),), "NOT_PRESENT", None).check([], {"there": 1})


def test_chains_from_every_root():
    mod = types.SimpleNamespace(cfg={"k": [10, 20]}, w=3)
    cell = types.CellType(mod)
    g = {"M": mod}
    b = {"len": len}
    gs = guards(
        (L(0, ("a", "cfg"), ("i", "k"), ("i", 1)), "EQUALS_MATCH", 20, "L['m'].cfg['k'][1] == 20"),
        ((("G", "M"), ("a", "w")), "EQUALS_MATCH", 3, "G['M'].w == 3"),
        ((("B", "len"),), "ID_MATCH", len, "B['len'] is len"),
        ((("C", 0), ("a", "w")), "EQUALS_MATCH", 3, "closure[0].w == 3"),
    )
    assert gs.check([mod], g, b, (cell,))
    mod.cfg["k"][1] = 21
    assert gs.first_failure([mod], g, b, (cell,)) == "L['m'].cfg['k'][1] == 20"
    mod.cfg["k"][1] = 20
    assert gs.first_failure([mod], {}, b, (cell,)) == "G['M'].w == 3 (value could not be read)"
    assert gs.first_failure([mod], g, {}, (cell,)) == "B['len'] is len (value could not be read)"
    assert gs.first_failure([mod], g, b, (types.CellType(),)) == "closure[0].w == 3 (value could not be read)"
    assert gs.first_failure([mod], g, b, (cell,)) is None


def test_reads_that_raise_fail_without_leaving_an_exception():
    class Boom:
        @property
        def a(self):
            raise KeyError("x")
    gs = one(L(0, ("a", "a")), "EQUALS_MATCH", 1, "boom")
    assert not gs.check([Boom()], {})
    assert gs.first_failure([Boom()], {}) == "boom (value could not be read)"


def test_texts_repr_and_len():
    gs = guards((L(0), "TYPE_MATCH", int, "type(L['x']) is int"), (L(0), "EQUALS_MATCH", 1, "L['x'] == 1"))
    assert len(gs) == 2
    assert gs.texts() == ["type(L['x']) is int", "L['x'] == 1"]
    assert repr(gs) == "GuardSet(2 checks):\n  type(L['x']) is int\n  L['x'] == 1"


@pytest.mark.parametrize("steps,kind,value,err", [
    ((), "TYPE_MATCH", int, "only PREDICATE"),
    ((("X", 0),), "TYPE_MATCH", int, "bad root"),
    ((("L", 0), ("L", 1)), "TYPE_MATCH", int, "bad chain"),
    ((("L", -1),), "TYPE_MATCH", int, "negative"),
    ((("L", 0),), "NOPE", int, "unknown check kind"),
    ((("L", 0),), "TYPE_MATCH", 3, "needs a type"),
    ((("L", 0),), "TENSOR_MATCH", (int,), "TENSOR_MATCH value"),
    ((("L", 0),), "DICT_KEYS", ["a"], "tuple of keys"),
    ((("L", 0),), "PREDICATE", 3, "callable"),
])
def test_bad_checks_are_refused_clearly(steps, kind, value, err):
    gs = _C.GuardSet()
    with pytest.raises((TypeError, ValueError), match=err):
        gs.add(steps, kind, value, "t")
    assert len(gs) == 0


def test_fast_tensor_guards_are_used_when_built():
    torch = _torch()
    import importlib.util
    built = importlib.util.find_spec("pydynamo._tensor_guard") is not None
    if built:
        importlib.import_module("pydynamo._tensor_guard")  # refuses another torch version: then the portable path
    x = torch.randn(2, 3)
    gs = one(L(0), "TENSOR_MATCH", tensor_spec(x), "L['x']")
    assert gs.check([x], {}) and gs.first_failure([x.t()], {}) == "L['x'] (size)"
    assert _C.fast_tensor_guards() == built


def test_aliasing_pattern():
    a, b = object(), object()
    paths = ((("L", 0),), (("L", 1),), (("L", 2),))
    distinct = one((), "ALIASING", (paths, (0, 1, 2)), "distinct")
    assert distinct.check([a, b, []], {})
    assert distinct.first_failure([a, a, b], {}) == "distinct (two inputs are now the same object)"
    shared = one((), "ALIASING", (paths, (0, 0, 1)), "x is y")
    assert shared.check([a, a, b], {})
    assert shared.first_failure([a, b, b], {}) is not None
    with pytest.raises(TypeError, match="ALIASING takes no steps"):
        one((), "ALIASING", (paths, (0,)), "bad")


def test_aliasing_memory_overlap_predicate():
    """A third item: called with the values once identities match; views of one storage are
    distinct objects that the overlap check tells apart."""
    torch = pytest.importorskip("torch")
    from pydynamo.guards import MemoryOverlap, overlapping_pairs
    paths = ((("L", 0),), (("L", 1),))
    x, y = torch.zeros(4), torch.zeros(4)
    pairs = overlapping_pairs([x, y], {0})
    assert pairs == frozenset()
    gs = one((), "ALIASING", (paths, (0, 1), MemoryOverlap({0}, pairs)), "distinct memory")
    assert gs.check([x, y], {})
    assert "share memory differently" in gs.first_failure([x, x[1:]], {})
    assert gs.first_failure([x, x], {}) == "distinct memory (two inputs are now the same object)"
    with pytest.raises(TypeError, match="ALIASING takes no steps"):
        one((), "ALIASING", (paths, (0, 1), 5), "bad")


def test_overlapping_pairs_fast_and_portable_agree():
    torch = pytest.importorskip("torch")
    import numpy as np
    from pydynamo import guards
    base = torch.zeros(8)
    arr = np.zeros(6)
    values = [base, base[2:], torch.zeros(3), arr, arr[1:3], np.zeros(0), torch.zeros(0), None,
              torch.empty(2, device="meta")]
    for changed in ({0}, {3}, {2}, {0, 3}, set()):
        got = guards.overlapping_pairs(values, changed)
        fast, guards._fast_pairs = guards._fast_pairs, None
        try:
            assert guards.overlapping_pairs(values, changed) == got
        finally:
            guards._fast_pairs = fast
    assert guards.overlapping_pairs(values, {0, 3}) == {(0, 1), (3, 4)}


def _shape_env_set(*facts, bindings=None):
    bindings = bindings or ((L(0), "size", 0), (L(1), "int", 0))
    gs = _C.GuardSet()
    gs.add((), "SHAPE_ENV", (bindings, facts), "symbolic shapes")
    return gs


def test_shape_env_facts_evaluated_in_c():
    torch = _torch()
    gs = _shape_env_set(((("c", 2), ("v", 0), ("<=",)), "2 <= s0"),
                        ((("v", 0), ("c", 4), ("%",), ("c", 0), ("==",)), "s0 % 4 == 0"),
                        ((("v", 1), ("v", 0), ("==",)), "n == s0"))
    assert gs.check([torch.randn(8, 3), 8], {})
    assert gs.first_failure([torch.randn(6, 3), 6], {}) == "symbolic shapes (s0 % 4 == 0)"
    assert gs.first_failure([torch.randn(8, 3), 7], {}) == "symbolic shapes (n == s0)"
    assert "could not be read" in gs.first_failure([torch.randn(8, 3), 8.0], {})  # not an int
    assert not gs.check([torch.randn(8, 3), True], {})  # bool is not int
    assert not gs.check([torch.randn(8, 3)], {})          # missing argument


def test_shape_env_python_semantics_and_overflow():
    fact = ((("v", 1), ("c", -7), ("//",), ("c", -2), ("==",), ("v", 1), ("c", -7), ("%",), ("c", -4), ("==",),
             ("and",)), "floor")
    gs = _shape_env_set(fact, bindings=((L(0), "int", 0), (L(1), "int", 0)))
    assert gs.check([0, 10], {})      # Python: 10 // -7 == -2, 10 % -7 == -4 (C truncates: -1, 3)
    assert not gs.check([0, 3], {})
    div0 = _shape_env_set(((("v", 0), ("v", 1), ("//",), ("c", 0), (">=",)), "div"),
                          bindings=((L(0), "int", 0), (L(1), "int", 0)))
    assert not div0.check([3, 0], {})  # division by zero fails, never passes
    big = _shape_env_set(((("v", 0), ("v", 0), ("*",), ("c", 0), (">",)), "square"),
                         bindings=((L(0), "int", 0), (L(1), "int", 0)))
    assert big.check([3, 0], {}) and not big.check([2 ** 40, 0], {})  # overflow fails
    assert not big.check([2 ** 70, 0], {})


def test_shape_env_strides_and_offsets():
    torch = _torch()
    bindings = ((L(0), "stride", 0), (L(0), "size", 1), (L(0), "storage_offset", 0))
    gs = _shape_env_set(((("v", 0), ("v", 1), ("==",)), "contiguous rows"),
                        ((("v", 2), ("c", 0), ("==",)), "offset 0"), bindings=bindings)
    base = torch.randn(6, 6)
    assert gs.check([base], {})
    assert gs.first_failure([base[:, :3]], {}) == "symbolic shapes (contiguous rows)"
    assert gs.first_failure([base[1:]], {}) == "symbolic shapes (offset 0)"


def test_shape_env_refuses_bad_programs():
    bad_facts = [((("+",),), "underflow"), ((("v", 0),), "no binding"),
                 ((("c", 1), ("c", 2)), "two values"), ((("c", 1), ("?",)), "unknown op")]
    for value in [((), (fact,)) for fact in bad_facts] + [(((L(0), "volume", 0),), ()), "not a tuple"]:
        with pytest.raises((TypeError, ValueError)):
            _C.GuardSet().add((), "SHAPE_ENV", value, "bad")
    with pytest.raises(ValueError):
        _C.GuardSet().add(L(0), "SHAPE_ENV", ((), ()), "steps are not allowed")


def test_method_func_read_matches_python_semantics():
    """("a", "forward"), ("a", "__func__") is read without a bound method where that is the same."""
    class Base:
        def forward(self):
            return 1

    class Custom(Base):
        def __getattribute__(self, name):  # not the generic lookup: the plain two reads
            return object.__getattribute__(self, name)

    steps = L(0, ("a", "forward"), ("a", "__func__"))
    for cls in (Base, Custom):
        obj = cls()
        g = one(steps, "ID_MATCH", Base.forward)
        assert g.check([obj], {})
        obj.forward = lambda: 2          # an instance attribute shadows the class's function
        assert not g.check([obj], {})
        del obj.forward
        assert g.check([obj], {})
    g = one(steps, "ID_MATCH", Base.forward)
    sub = type("Sub", (Base,), {})()
    assert g.check([sub], {})
    type(sub).forward = lambda self: 3   # the class's function replaced
    assert not g.check([sub], {})
    assert not g.check([object()], {})   # no such attribute


def test_empty_attrs_checks_each_named_attribute():
    torch = _torch()
    m = torch.nn.Linear(2, 2)
    hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    g = one(L(0), "EMPTY_ATTRS", hooks, "no hooks")
    assert g.check([m], {})
    h = m.register_forward_pre_hook(lambda mod, args: None)
    assert g.first_failure([m], {}) == "no hooks"
    h.remove()
    assert g.check([m], {})
    assert not g.check([object()], {})   # attributes missing: fails, never passes
    with pytest.raises(TypeError):
        one(L(0), "EMPTY_ATTRS", ["_forward_hooks"])


def test_aliasing_reads_values_with_the_tree_and_many_paths():
    """The paths' values are kept while the tree is walked (shared with other checks' chains);
    more paths than the small buffer; unreadable values are left to other checks."""
    objs = [object() for _ in range(40)]
    holder = types.SimpleNamespace(items=list(objs))
    paths = tuple(L(0, ("a", "items"), ("i", i)) for i in range(40))
    gs = guards((L(0, ("a", "items")), "LEN", 40, "len"),
                ((), "ALIASING", (paths, tuple(range(40))), "distinct"))
    assert gs.check([holder], {})
    holder.items[7] = holder.items[31]
    assert gs.first_failure([holder], {}) == "distinct (two inputs are now the same object)"
    holder.items[7] = objs[7]
    assert gs.check([holder], {})
    groups = tuple(100 if i in (3, 39) else i for i in range(40))
    shared = one((), "ALIASING", (paths, groups), "3 is 39")
    assert shared.first_failure([holder], {}) == "3 is 39 (inputs no longer alias)"
    holder.items[39] = holder.items[3]
    assert shared.check([holder], {})
    holder.items = holder.items[:10]  # paths 10.. unreadable: this check passes, LEN reports it
    assert gs.first_failure([holder], {}) == "len"


def test_module_attribute_reads_follow_module_getattr():
    """nn.Module's __getattr__ (registered by pydynamo.guards) is read from its tables in C, with
    Python's order and fallbacks."""
    torch = _torch()
    import pydynamo.guards  # noqa: F401 - registers nn.Module.__getattr__
    m = torch.nn.Linear(2, 2)
    w = m.weight
    g = one(L(0, ("a", "weight")), "ID_MATCH", w, "weight")
    assert g.check([m], {})
    m.weight = torch.nn.Parameter(torch.zeros(2, 2))
    assert not g.check([m], {})
    m.weight = w
    assert g.check([m], {})
    del m._parameters["weight"]
    assert g.first_failure([m], {}) == "weight (value could not be read)"   # in no table
    m._buffers["weight"] = w                      # a buffer of that name is found next
    assert g.check([m], {})
    del m._buffers["weight"]
    m._modules["weight"] = w                      # then a submodule
    assert g.check([m], {})
    m._parameters["weight"] = torch.nn.Parameter(torch.zeros(1))  # parameters come first
    assert not g.check([m], {})
    m._parameters = type("Table", (dict,), {})(weight=w)  # not a plain dict: the real __getattr__
    assert g.check([m], {})
    assert one(L(0, ("a", "nothing")), "NOT_PRESENT", None).check([m], {})

    class Own(torch.nn.Module):
        def __getattr__(self, name):
            return w if name == "weight" else super().__getattr__(name)

    assert g.check([Own()], {})
