"""User objects follow Python's data model (issue 18): objects created in traced code, the
attribute protocol (descriptors, ``__getattr__``, ``__getattribute__``, ``__setattr__``,
slots, properties, cached_property), ``super()`` into builtins, dataclasses, namedtuples,
enums, dict/list/tuple subclasses, dunder methods, and the guards that keep all of it sound.

Each test compiles with ``fullgraph=True`` where capture is expected, compares the result with
eager Python (types and states of returned objects included, and the mutations of the
objects it was given), then changes what the trace depended on and checks that the compiled
function recompiles rather than giving a stale answer.
"""
import collections
import dataclasses
import enum
import functools
from typing import NamedTuple

import pytest
import torch

import pydynamo
from pydynamo.exc import Unsupported
from pydynamo.testing import CompileCounter, same


def state(obj):
    """A comparable picture of a value: objects by type, instance dict, slots and contents."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", obj.dtype, tuple(obj.shape), obj.tolist())
    if isinstance(obj, (enum.Enum, type)) or obj is None:
        return obj
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return (type(obj), [state(v) for v in obj])
    if isinstance(obj, dict) and type(obj) is dict:
        return (dict, [(k, state(v)) for k, v in obj.items()])
    if hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__") or isinstance(obj, (dict, list, tuple)):
        attrs = [(k, state(v)) for k, v in vars(obj).items()] if hasattr(obj, "__dict__") else []
        slots = [(s, state(getattr(obj, s))) for c in type(obj).__mro__
                 for s in c.__dict__.get("__slots__", ()) if hasattr(obj, s)]
        contents = None
        if isinstance(obj, dict):
            contents = [(k, state(v)) for k, v in dict.items(obj)]
        elif isinstance(obj, (list, tuple)):
            contents = [state(v) for v in obj]
        return (type(obj), attrs, slots, contents)
    return obj


def compiled(fn, **kw):
    counter = CompileCounter()
    return pydynamo.optimize(counter, fullgraph=True, **kw)(fn), counter


def check(fn, *args, graphs=1):
    """fn(*args) compiled equals eager (result and the arguments' states afterwards)."""
    import copy
    eager_args = copy.deepcopy(args)
    expected = fn(*eager_args)
    opt, counter = compiled(fn)
    got = opt(*args)
    assert state(got) == state(expected)
    assert [state(a) for a in args] == [state(a) for a in eager_args]
    assert counter.frame_count == graphs
    return got


# ---- objects created in the trace ---------------------------------------------------------------

class Point:
    scale = 2.0

    def __init__(self, x, y=1):
        self.x = x
        self.y = y

    def norm(self):
        return self.x * self.scale + self.y


def test_object_created_and_used_never_exists_at_run_time():
    def f(x):
        return Point(x).norm() + Point(x, 3).y

    check(f, torch.randn(3))


def test_object_created_escapes_with_its_class_and_state():
    def f(x):
        p = Point(x * 2)
        p.z = [x, 1]
        return p

    got = check(f, torch.randn(3))
    assert type(got) is Point and list(vars(got)) == ["x", "y", "z"]


def test_new_object_returned_twice_is_one_object():
    def f(x):
        p = Point(x + 1)
        return p, [p]

    a, b = compiled(f)[0](torch.randn(2))
    assert a is b[0]


def test_new_object_stored_into_an_input_object():
    class Holder:
        pass

    def f(x, h):
        h.child = Point(x + 1)
        return x

    h = Holder()
    check(f, torch.randn(2), h)
    assert type(h.child) is Point


def test_user_new_and_init():
    class WithNew:
        def __new__(cls, v):
            obj = super().__new__(cls)
            obj.made = True
            return obj

        def __init__(self, v):
            self.v = v

    check(lambda x: WithNew(x * 2), torch.randn(2))


def test_object_new_rejects_arguments_as_python_does():
    class NoInit:
        pass

    opt, _ = compiled(lambda x: NoInit(x))
    with pytest.raises(Unsupported):
        opt(torch.randn(2))
    with pytest.raises(TypeError):
        NoInit(1)


# ---- mutation of objects that existed before the frame -----------------------------------------

def test_attribute_stores_and_deletes_are_replayed():
    def f(x, p):
        p.x = p.x + x
        p.count = getattr(p, "count", 0) + 1
        del p.y
        setattr(p, "w", x * 2)
        object.__setattr__(p, "v", 5)
        delattr(p, "v")
        return p.x, hasattr(p, "y"), getattr(p, "v", "gone")

    p = Point(torch.ones(2), 4)
    check(f, torch.randn(2), p)
    assert not hasattr(p, "y") and not hasattr(p, "v") and p.count == 1


def test_reads_after_writes_see_the_writes():
    def f(x, p):
        p.x = x * 3
        p.scale = 10.0  # an instance attribute shadowing the class attribute
        return p.norm()

    p = Point(torch.ones(2))
    check(f, torch.randn(2), p)
    assert p.scale == 10.0 and Point.scale == 2.0


def test_deleted_attribute_reads_as_absent():
    def f(x, p):
        p.extra = x
        del p.extra
        return x + 1 if hasattr(p, "extra") else x - 1

    check(f, torch.randn(2), Point(1))


# ---- guards: mutation between calls recompiles -------------------------------------------------

def test_instance_attribute_added_later_shadows_class_attribute():
    def f(x, p):
        return x * p.scale

    p = Point(0)
    opt, counter = compiled(f)
    x = torch.ones(2)
    assert opt(x, p).tolist() == [2.0, 2.0]
    p.scale = 5.0
    assert opt(x, p).tolist() == [5.0, 5.0]
    del p.scale
    Point.scale = 3.0
    try:
        assert opt(x, p).tolist() == [3.0, 3.0]
    finally:
        Point.scale = 2.0
    assert counter.frame_count == 3


def test_class_attribute_added_in_a_base_later():
    class Base:
        def get(self):
            return 1

    class Derived(Base):
        pass

    def f(x, o):
        return x * o.get()

    o = Derived()
    opt, _ = compiled(f)
    assert opt(torch.ones(1)).tolist() == [1.0] if False else opt(torch.ones(1), o).tolist() == [1.0]
    Derived.get = lambda self: 7
    assert opt(torch.ones(1), o).tolist() == [7.0]
    Base.get = lambda self: 9  # shadowed by Derived.get: no change
    assert opt(torch.ones(1), o).tolist() == [7.0]
    del Derived.get
    assert opt(torch.ones(1), o).tolist() == [9.0]


def test_getattr_added_to_the_class_later():
    class C:
        pass

    def f(x, o):
        return x + 1 if hasattr(o, "missing") else x - 1

    o = C()
    opt, _ = compiled(f)
    assert opt(torch.zeros(1), o).tolist() == [-1.0]
    C.__getattr__ = lambda self, name: 0
    assert opt(torch.zeros(1), o).tolist() == [1.0]


def test_method_replaced_by_a_staticmethod_recompiles():
    class C:
        def m(self, v=2):
            return v

    def f(x, o):
        return x * o.m()

    o = C()
    opt, _ = compiled(f)
    assert opt(torch.ones(1), o).tolist() == [2.0]
    C.m = staticmethod(lambda v=5: v)
    assert opt(torch.ones(1), o).tolist() == [5.0]


def test_c_guard_steps_type_lookup_and_generic_getattr():
    from pydynamo import _C

    class A:
        def f(self):
            pass

    class B(A):
        def __getattribute__(self, name):  # never run by the "g" step
            raise RuntimeError(name)

    gs = _C.GuardSet()
    gs.add((("L", 0), ("g", "__class__"), ("t", "f")), "ID_MATCH", A.f, "f found")
    gs.add((("L", 0), ("g", "__class__"), ("t", "g")), "NOT_PRESENT", None, "no g")
    gs.add((("L", 0), ("g", "__dict__"), ("i", "x")), "EQUALS_MATCH", 1, "x == 1")
    b = B()
    object.__setattr__(b, "x", 1)
    assert gs.first_failure([b], {}) is None
    B.g = 0
    assert gs.first_failure([b], {}).startswith("no g")
    del B.g
    B.f = lambda self: 1  # shadows A.f along the MRO
    assert gs.first_failure([b], {}).startswith("f found")
    del B.f
    assert gs.first_failure([b], {}) is None
    not_a_class = _C.GuardSet()
    not_a_class.add((("L", 0), ("t", "f")), "NOT_PRESENT", None, "read fails")
    assert not_a_class.first_failure([b], {}) is None


# ---- the attribute protocol ----------------------------------------------------------------------

class Props:
    def __init__(self, v):
        self._v = v

    @property
    def v(self):
        return self._v * 2

    @v.setter
    def v(self, value):
        self._v = value / 2

    @v.deleter
    def v(self):
        del self._v

    @classmethod
    def make(cls, v):
        return cls(v)

    @staticmethod
    def helper(v):
        return v + 1


def test_property_classmethod_staticmethod():
    def f(x, o):
        n = Props.make(x)
        n.v = x * 4
        o.v = x
        return n.v + Props.helper(x) + n.helper(x) + o.v

    o = Props(torch.ones(2))
    check(f, torch.randn(2), o)


def test_property_deleter():
    def f(x, o):
        del o.v
        return x + 1 if hasattr(o, "_v") else x - 1

    o = Props(1)
    check(f, torch.randn(2), o)
    assert not hasattr(o, "_v")


def test_instance_dict_writes_bypass_descriptors():
    def f(x, o):
        n = Props(x)
        n.__dict__["v"] = 7  # shadowed by the data descriptor for reads, kept in the dict
        vars(o)["v"] = 8
        del o.__dict__["_v"]
        return n.v, n, "_v" in o.__dict__, len(vars(n))

    o = Props(torch.ones(2))
    got = check(f, torch.randn(2), o)
    assert vars(o) == {"v": 8} and vars(got[1])["v"] == 7


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a


def test_slots():
    def f(x, s):
        n = Slotted(x)
        n.b = x + 1
        s.b = x * 2
        return n.a + n.b, n, hasattr(n, "c")

    s = Slotted(torch.ones(2))
    check(f, torch.randn(2), s)
    assert torch.is_tensor(s.b)


def test_one_slotted_object_reached_by_two_paths():
    def f(x, a, b):
        a.b = x * 2
        return b.b

    s = Slotted(1)
    s.b = torch.ones(2)
    opt, _ = compiled(f)
    assert torch.equal(opt(torch.ones(2), s, s), torch.full((2,), 2.0))
    t = Slotted(2)
    t.b = torch.zeros(2)
    assert torch.equal(opt(torch.ones(2), s, t), torch.zeros(2))  # no longer aliased: recompiles


def test_slots_reject_unknown_attributes():
    def f(x):
        s = Slotted(x)
        s.c = 1
        return x

    with pytest.raises(Unsupported):
        compiled(f)[0](torch.randn(2))


class Cached:
    def __init__(self, t):
        self.t = t
        self.calls = 0

    @functools.cached_property
    def heavy(self):
        self.calls += 1
        return self.t * 10


def test_cached_property():
    def f(x, c):
        n = Cached(x)
        return n.heavy + n.heavy + c.heavy, n.calls

    c = Cached(torch.ones(2))
    check(f, torch.randn(2), c)
    assert c.calls == 1 and "heavy" in vars(c)
    opt, counter = compiled(f)
    opt(torch.randn(2), c)  # cached now: read from the instance dict
    assert c.calls == 1


class Fallback:
    def __init__(self):
        self.table = {"a": 1}

    def __getattr__(self, name):
        if name.startswith("__"):  # copy.deepcopy asks for __deepcopy__
            raise AttributeError(name)
        return self.table.get(name, 0)


def test_getattr_fallback():
    def f(x, o):
        return x + o.a + o.zz + Fallback().a + getattr(o, "table")["a"]

    check(f, torch.randn(2), Fallback())


def test_attribute_error_reaches_the_users_handler():
    class Lazy:
        @property
        def broken(self):
            return self.nothing_here

        def __getattr__(self, name):
            if name == "broken":
                return 10
            raise AttributeError(name)

    def f(x, p):
        try:
            v = p.missing
        except AttributeError:
            v = 2
        return x * v + Lazy().broken  # the property's AttributeError falls back to __getattr__

    check(f, torch.randn(2), Point(1))


class Config:
    attribute_map = {"hidden": "hidden_size"}

    def __init__(self, n):
        self.hidden_size = n

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __setattr__(self, key, value):
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)


def test_getattribute_and_setattr_in_python():
    def f(x, c):
        c.hidden = c.hidden_size + 1
        n = Config(2)
        return x * c.hidden + n.hidden, getattr(c, "nope", None)

    c = Config(4)
    check(f, torch.randn(2), c)
    assert vars(c) == {"hidden_size": 5}
    opt, counter = compiled(f)
    assert opt(torch.ones(1), c)[0].tolist() == [8.0]
    c.__dict__["hidden_size"] = 1  # read through __dict__: guarded
    assert opt(torch.ones(1), c)[0].tolist() == [4.0]
    assert counter.frame_count == 2


class Doubler:
    """A data descriptor written in Python."""

    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, cls=None):
        return getattr(obj, self.name) * 2

    def __set__(self, obj, value):
        setattr(obj, self.name, value)


class UsesDescriptor:
    d = Doubler()


def test_python_descriptor():
    def f(x, o):
        o.d = x
        n = UsesDescriptor()
        n.d = x + 1
        return o.d + n.d

    check(f, torch.randn(2), UsesDescriptor())


# ---- super() into builtins, container subclasses -----------------------------------------------

class Frozen:
    def __init__(self, v):
        object.__setattr__(self, "v", v)

    def __setattr__(self, name, value):
        raise AttributeError("frozen")


def test_object_setattr_bypasses_the_class():
    check(lambda x: Frozen(x * 2).v + 1, torch.randn(2))


class Registry(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key, value * 2)

    def total(self):
        return sum(self.values())


def test_dict_subclass():
    def f(x):
        r = Registry(a=x)
        r["b"] = x + 1
        return r, r.total(), len(r), "a" in r, list(r), r.get("zz", 3)

    got = check(f, torch.randn(2))
    assert type(got[0]) is Registry


class Ordered(collections.OrderedDict):
    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __getitem__(self, k):
        return self.to_tuple()[k] if isinstance(k, int) else super().__getitem__(k)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


def test_ordered_dict_subclass():
    def f(x):
        o = Ordered()
        o["a"] = x
        o["b"] = x * 2
        return o, o[1], o["a"], o.b, o.to_tuple()

    got = check(f, torch.randn(2))
    assert type(got[0]) is Ordered and list(got[0]) == ["a", "b"]


def test_list_and_tuple_subclasses():
    class Stack(list):
        def push(self, v):
            self.append(v)
            return self

        def top(self):
            return self[-1]

    class Pair(tuple):
        def first(self):
            return self[0]

    def f(x):
        s = Stack([x])
        s.push(x + 1).push(x + 2)
        p = Pair((x, 1))
        return s, s.top(), len(s), p, p.first(), p[1]

    got = check(f, torch.randn(2))
    assert type(got[0]).__name__ == "Stack" and type(got[3]).__name__ == "Pair"


def test_contents_of_an_input_dict_subclass_are_guarded():
    class Reg(dict):
        pass

    def f(x, r):
        return x * r.get("k", 1)

    r = Reg()
    opt, _ = compiled(f)
    assert opt(torch.ones(1), r).tolist() == [1.0]
    r["k"] = 5
    assert opt(torch.ones(1), r).tolist() == [5.0]


# ---- dataclasses, namedtuples, enums -----------------------------------------------------------

@dataclasses.dataclass
class Record:
    a: torch.Tensor
    b: int = 3
    c: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.c.append(self.b)


@dataclasses.dataclass(frozen=True)
class FrozenRecord:
    a: torch.Tensor
    k: int = 2


def test_dataclasses():
    def f(x):
        r = Record(x, b=4)
        fr = FrozenRecord(x + 1)
        return r, fr.a * fr.k, Record(1) == Record(1), Record(1) == Record(2), dataclasses.fields(r)[0].name

    got = check(f, torch.randn(2))
    assert type(got[0]) is Record and got[0].c == [4]


def test_frozen_dataclass_write_is_refused():
    def f(x):
        r = FrozenRecord(x)
        r.k = 5
        return r

    with pytest.raises(Unsupported):
        compiled(f)[0](torch.randn(2))


class NT(NamedTuple):
    a: torch.Tensor
    b: int = 2

    def scaled(self):
        return self.a * self.b


def test_namedtuple_methods():
    Pt = collections.namedtuple("Pt", ["u", "v"])

    class Sub(Pt):  # a namedtuple subclass whose instances have a __dict__
        def total(self):
            return self.u + self.v

    def f(x):
        n = NT(x)
        s = Sub(x, 2)
        s.extra = 1
        return (n.scaled(), n, Pt(x, 1).v, n._replace(b=5).scaled(), n._asdict(), NT._make([x, 3]),
                s.total(), s)

    check(f, torch.randn(2))


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def test_enums():
    def f(x, c):
        if Color(1) is c:
            return x + 1
        return x * 2 if c == Color.BLUE else x

    check(f, torch.randn(2), Color.RED)
    opt, counter = compiled(f)
    x = torch.ones(1)
    assert opt(x, Color.RED).tolist() == [2.0] and opt(x, Color.BLUE).tolist() == [2.0]
    assert counter.frame_count == 2


# ---- special methods -----------------------------------------------------------------------------

class Bag:
    def __init__(self, items):
        self.items = list(items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __setitem__(self, i, v):
        self.items[i] = v

    def __iter__(self):
        for item in self.items:
            yield item

    def __contains__(self, v):
        return v in [1, 2]

    def __call__(self, y):
        return y * len(self)

    def __eq__(self, other):
        return isinstance(other, Bag) and len(other) == len(self)

    def __hash__(self):
        return len(self.items)


def test_special_methods():
    def f(x):
        b = Bag([x, x + 1])
        b[0] = x * 3
        total = 0
        for v in b:
            total = total + v
        return (total, b[1], len(b), 2 in b, 5 in b, b(x), bool(b), bool(Bag([])),
                b == Bag([1, 2]), b != Bag([1]), isinstance(b, Bag), type(b) is Bag, [*b][0])

    check(f, torch.randn(2))


class Countdown:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n


def test_iterator_protocol_and_hash():
    def f(x, pinned):
        t = x
        for i in Countdown(3):
            t = t + i
        c = Countdown(2)
        return t, next(c), next(c), next(c, "done"), hash(Bag([1, 2])), hash(pinned) == hash(pinned)

    check(f, torch.ones(2), Point(1))


def test_new_object_alive_at_a_graph_break_is_rebuilt():
    def f(x):
        p = Point(x + 1)
        print("a break")
        return p.norm(), p

    counter = CompileCounter()
    got = pydynamo.optimize(counter)(f)(torch.ones(2))
    assert state(got) == state(f(torch.ones(2))) and counter.frame_count == 2


def test_zero_argument_super_after_a_graph_break():
    class Base:
        def go(self, x):
            return x + 1

    class Derived(Base):
        k = 3

        def go(self, x):
            y = x * 2
            print("a break")
            return super().go(y) + self.k

        def go2(self, x):  # self is also on the stack at the break
            return self.helper(x, print("a break"), super().go(x))

        def helper(self, a, b, c):
            return a + c

    d = Derived()
    for method in ("go", "go2"):
        got = pydynamo.optimize(CompileCounter())(getattr(d, method))(torch.ones(2))
        assert torch.equal(got, getattr(Derived(), method)(torch.ones(2)))


def test_default_equality_is_identity():
    def f(x, p):
        q = Point(x)
        return q == q, q == p, q != p, p == p, q == None  # noqa: E711

    check(f, torch.randn(2), Point(1), graphs=0)


class Counter:
    def __init__(self):
        self.depth = 0

    def __enter__(self):
        self.depth += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        return False


def test_with_on_a_user_context_manager():
    def f(x, outer):
        with outer as o, Counter() as c:
            y = x + o.depth + c.depth
        return y, outer.depth

    check(f, torch.randn(2), Counter())


def test_isinstance_issubclass_type_id():
    p = Point(1)

    def f(x, p):
        return (isinstance(p, Point), issubclass(type(p), Point), type(p).scale, id(p) == id(p),
                x * 2)

    check(f, torch.randn(2), p)
    opt, _ = compiled(lambda x, p: x + (id(p) % 7))
    x = torch.zeros(1)
    assert opt(x, p).item() == id(p) % 7
    q = Point(2)
    assert opt(x, q).item() == id(q) % 7  # id() pinned the object: a new one recompiles


def test_user_operators_reuse_python_methods():
    class V:
        def __init__(self, t):
            self.t = t

        def __add__(self, other):
            return V(self.t + other.t)

        def __mul__(self, k):
            return V(self.t * k)

    check(lambda x: (V(x) + V(x) * 3).t, torch.randn(2))


# ---- transformers ------------------------------------------------------------------------------

def test_transformers_model_output_and_config():
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    def f(x, cfg):
        out = BaseModelOutputWithPooling(last_hidden_state=x * cfg.hidden_size, pooler_output=x + 1)
        return out, out[0], out["pooler_output"], out.to_tuple(), len(out), list(out.keys())

    cfg = transformers.BertConfig(hidden_size=8, num_attention_heads=2)
    got = check(f, torch.randn(2, 3), cfg)
    assert type(got[0]) is BaseModelOutputWithPooling


def test_installed_packages_are_user_code():
    """site-packages lies inside the standard library's directory: its packages are compiled
    like the user's code (a frame of theirs called natively after a break), torch's are not."""
    import os
    import sysconfig
    from pydynamo.convert_frame import skip_reason

    def code_at(path):
        return compile("pass", path, "exec")

    site = sysconfig.get_paths()["purelib"]
    assert skip_reason(code_at(os.path.join(site, "somepkg", "mod.py"))) is None
    assert skip_reason(code_at(os.path.join(os.path.dirname(torch.__file__), "nn", "x.py")))
    assert skip_reason(code_at(collections.__file__))


def _explain(model, ids):
    model.eval()
    with torch.no_grad():
        expected = model(ids)
        out = pydynamo.explain(model)(ids)
        got = pydynamo.optimize("eager")(model)(ids)
    pydynamo.reset()
    assert type(got) is type(expected) and list(got.keys()) == list(expected.keys())
    assert all(same(a, b) for a, b in zip(got.to_tuple(), expected.to_tuple()) if torch.is_tensor(a))
    return out


def test_transformers_gpt2_in_one_graph():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2Model(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0))
    out = _explain(model, torch.randint(0, 100, (2, 8)))
    assert (out.graph_count, out.graph_break_count) == (1, 0), [str(r) for r in out.break_reasons]


def test_transformers_bert():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=37, vocab_size=100))
    out = _explain(model, torch.randint(0, 100, (2, 8)))
    assert (out.graph_count, out.graph_break_count) == (1, 0), [str(r) for r in out.break_reasons]


def test_inspect_signature_of_a_method():
    import inspect

    class M:
        def ff(self, a, b=2):
            return a * b

    def f(x, m):
        sig = inspect.signature(m.ff)
        return x * len(sig.parameters), list(sig.parameters), [p.default for p in sig.parameters.values()]

    m = M()
    check(f, torch.ones(2), m)
    pydynamo.reset()
    opt, counter = compiled(f)
    opt(torch.ones(2), m)
    M.ff = lambda self, a: a  # one parameter now
    assert opt(torch.ones(2), m)[1] == ["a"] and counter.frame_count == 2
