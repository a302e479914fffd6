"""Attributes of C-implemented objects (issue 37, item 2): ``hasattr``, ``getattr`` with a
default, attribute loads, ``type()`` and ``isinstance`` on an object pydynamo models answer as
CPython answers on the real object, or the trace refuses (a graph break, and Python answers).

A pool of real objects (partials, builtins, bound C methods, method-wrappers, descriptors,
iterators, dict views, generators, modules, classes, functions and methods...), each passed in
from outside the frame and, where it can be, made inside the trace, is asked about a list of
names (dunder and plain, present and absent). The programs are straight-line code written for
each object, so a refused question breaks the graph there and the questions after it are still
compiled (a resume function). Guards: an answer read from an input object is recomputed when
that object changes.
"""
import collections
import functools
import itertools
import math
import operator
import types
from typing import NamedTuple

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter


def ufn(a, b=1):
    "a user function"
    return a


class C:
    "a user class"

    def m(self):
        return 1

    @property
    def prop(self):
        return 1

    @staticmethod
    def sm():
        return 1

    @classmethod
    def cm(cls):
        return 1


class Slotted:
    __slots__ = ("a",)


class Pair(NamedTuple):
    a: int
    b: int


def gen():
    yield 1


def make_closure():
    v = 1

    def inner():
        return v
    return inner


lam = lambda q: q  # noqa: E731
inst = C()

# name: (a factory of the object passed in, or None; the expression that makes it in the trace, or None)
POOL = {
    "partial": (lambda: functools.partial(torch.add, 1), "functools.partial(torch.add, 1)"),
    "partial_kw": (lambda: functools.partial(ufn, b=2), "functools.partial(ufn, b=2)"),
    "partial_of_partial": (None, "functools.partial(functools.partial(ufn, 1), b=2)"),
    "itemgetter": (lambda: operator.itemgetter(1), "operator.itemgetter(1)"),
    "attrgetter": (lambda: operator.attrgetter("a"), "operator.attrgetter('a')"),
    "len": (lambda: len, "len"),
    "isinstance": (lambda: isinstance, "isinstance"),
    "math_sqrt": (lambda: math.sqrt, "math.sqrt"),
    "list_append": (lambda: [].append, "[].append"),
    "dict_get": (lambda: {}.get, "{}.get"),
    "torch_add": (lambda: torch.add, "torch.add"),
    "tensor_add": (lambda: torch.ones(1).add, "x.add"),
    "method_wrapper": (lambda: (1).__add__, "(1).__add__"),
    "list_len_wrapper": (lambda: [].__len__, "[].__len__"),
    "property": (lambda: C.__dict__["prop"], "C.__dict__['prop']"),
    "staticmethod": (lambda: C.__dict__["sm"], "C.__dict__['sm']"),
    "classmethod": (lambda: C.__dict__["cm"], "C.__dict__['cm']"),
    "member_descriptor": (lambda: Slotted.a, "Slotted.a"),
    "getset_descriptor": (lambda: types.FunctionType.__dict__["__globals__"], None),
    "method_descriptor": (lambda: list.append, "list.append"),
    "wrapper_descriptor": (lambda: list.__len__, "list.__len__"),
    "user_function": (lambda: ufn, "ufn"),
    "bound_method": (lambda: inst.m, "inst.m"),
    "bound_classmethod": (lambda: C.cm, "C.cm"),
    "closure": (make_closure, None),
    "lambda": (lambda: lam, "lam"),
    "nested_function": (None, "(lambda q: q)"),
    "wrapped_function": (None, "functools.wraps(ufn)(lambda q: q)"),
    "range_iterator": (lambda: iter(range(3)), "iter(range(3))"),
    "list_iterator": (lambda: iter([1, 2]), "iter([1, 2])"),
    "tuple_iterator": (lambda: iter((1, 2)), "iter((1, 2))"),
    "set_iterator": (None, "iter({1, 2})"),
    "zip": (lambda: zip([1], [2]), "zip([1], [2])"),
    "map": (lambda: map(abs, [1]), "map(abs, [1])"),
    "enumerate": (lambda: enumerate([1]), "enumerate([1])"),
    "enumerate_lazy": (None, "enumerate(iter([1]))"),
    "chain": (lambda: itertools.chain([1]), "itertools.chain([1])"),
    "dict_keys": (lambda: {1: 2}.keys(), "{1: 2}.keys()"),
    "dict_values": (lambda: {1: 2}.values(), "{1: 2}.values()"),
    "dict_items": (lambda: {1: 2}.items(), "{1: 2}.items()"),
    "generator": (lambda: gen(), "gen()"),
    "genexp": (None, "(i for i in [1])"),
    "module_math": (lambda: math, "math"),
    "module_functools": (lambda: functools, "functools"),
    "module_torch_nn": (lambda: torch.nn, "torch.nn"),
    "user_class": (lambda: C, "C"),
    "class_int": (lambda: int, "int"),
    "class_partial": (lambda: functools.partial, "functools.partial"),
    "dtype": (lambda: torch.float32, "torch.float32"),
    "device": (lambda: torch.device("cpu"), "torch.device('cpu')"),
    "nn_module": (lambda: torch.nn.Linear(1, 1), None),
    "int": (lambda: 3, "3"),
    "str": (lambda: "s", "'s'"),
    "none": (lambda: None, "None"),
    "list": (lambda: [1], "[1]"),
    "tuple": (lambda: (1, torch.ones(1)), "(1, x)"),
    "namedtuple": (lambda: Pair(1, 2), "Pair(1, 2)"),
    "dict": (lambda: {1: 2}, "{1: 2}"),
    "instance_dict": (None, "inst.__dict__"),
    "set": (lambda: {1}, "{1}"),
    "deque": (lambda: collections.deque([1]), "collections.deque([1])"),
    "ordered_dict": (lambda: collections.OrderedDict(a=1), "collections.OrderedDict(a=1)"),
    "defaultdict": (lambda: collections.defaultdict(list), "collections.defaultdict(list)"),
    "torch_size": (lambda: torch.Size([2]), "x.size()"),
    "slice": (lambda: slice(1, 2), "slice(1, 2)"),
    "range": (lambda: range(3), "range(3)"),
    "tensor": (lambda: torch.ones(2), "x"),
    "user_object": (lambda: inst, "inst"),
}

NAMES = ["__name__", "__qualname__", "__module__", "__doc__", "__wrapped__", "__self__",
         "__func__", "__dict__", "__class__", "func", "args", "keywords", "__call__", "__get__",
         "__set__", "__len__", "__iter__", "__next__", "__getitem__", "__code__", "__defaults__",
         "__objclass__", "__text_signature__", "__annotations__", "__closure__", "__globals__",
         "__mro__", "__bases__", "__file__", "__reduce__", "__setstate__", "__isabstractmethod__",
         "__hash__", "__eq__", "__weakref__", "__slots__", "__abstractmethods__", "fget", "append",
         "keys", "mapping", "gi_frame", "send", "maxlen", "default_factory", "real", "itemsize",
         "type", "weight", "a", "m", "bogus", "_items"]

SENT = object()
ABCS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodWrapperType,
        type, types.ModuleType, collections.abc.Iterator, collections.abc.Callable,
        collections.abc.Mapping, collections.abc.Sequence, tuple, dict, functools.partial)
CASES = [(name, inside) for name, (outside, expr) in POOL.items() for inside in (False, True)
         if (expr if inside else outside) is not None]


def _program(expr, lines):
    """A straight-line function of (x, o): ``o`` is made in the trace when ``expr`` is given."""
    body = ([f"    o = {expr}"] if expr else []) + ["    r = []"] + [f"    {line}" for line in lines]
    env = dict(globals())
    exec("\n".join(["def f(x, o):", *body, "    return r"]), env)
    return env["f"]


def _run_both(name, inside, lines):
    outside, expr = POOL[name]
    f = _program(expr if inside else None, lines)
    x = torch.ones(2)
    want = f(x, None if inside else outside())
    pydynamo.reset()
    got = pydynamo.optimize("eager")(f)(x, None if inside else outside())
    return want, got


@pytest.mark.parametrize("name,inside", CASES)
def test_hasattr_and_getattr_default(name, inside):
    lines = [f"r.append(hasattr(o, {n!r}))" for n in NAMES]
    lines += [f"r.append(getattr(o, {n!r}, SENT) is SENT)" for n in NAMES]
    want, got = _run_both(name, inside, lines)
    labels = [f"hasattr {n}" for n in NAMES] + [f"getattr default {n}" for n in NAMES]
    wrong = [(label, w, g) for label, w, g in zip(labels, want, got) if w != g]
    assert not wrong, wrong


@pytest.mark.parametrize("name,inside", CASES)
def test_type_and_isinstance(name, inside):
    lines = ["r.append(type(o))", "r.append(type(o).__name__)", "r.append(callable(o))"]
    lines += [f"r.append(isinstance(o, ABCS[{i}]))" for i in range(len(ABCS))]
    want, got = _run_both(name, inside, lines)
    assert want == got


def _present(name, inside):
    outside, expr = POOL[name]
    probe = _program(expr if inside else None, [f"r.append(hasattr(o, {n!r}))" for n in NAMES])
    return [n for n, h in zip(NAMES, probe(torch.ones(2), None if inside else outside())) if h]


def _describe(v):
    """What an attribute's value is, comparable across runs (bound methods are new objects)."""
    if isinstance(v, (str, int, float, bool, type(None), type)):
        return v
    return type(v), getattr(v, "__name__", None)


# a tensor's weak-reference slot: tracing it (torch's fake-tensor converter) holds a weak
# reference to it, so it is no longer None: an effect of being observed, not of the model
_OBSERVED = {("tensor", "__weakref__")}


@pytest.mark.parametrize("name,inside", CASES)
def test_attribute_loads(name, inside):
    present = [n for n in _present(name, inside) if (name, n) not in _OBSERVED]
    lines = []
    for n in present:
        lines += [f"v = o.{n}", "r.append(_describe(v))", "r.append(hasattr(v, '__name__'))",
                  "r.append(getattr(v, '__qualname__', None))"]
    want, got = _run_both(name, inside, lines)
    assert want == got


def test_getset_and_member_descriptors_of_modelled_types_never_raise():
    """What modelled_has_attr assumes: a getset or member descriptor of a builtin class reads
    without AttributeError on the objects the trace models (each pool object of such a class)."""
    from pydynamo.variables.descriptors import _GENERIC_GETATTR
    x = torch.ones(2)
    env = dict(globals(), x=x)
    for name, (outside, expr) in POOL.items():
        values = ([outside()] if outside else []) + ([eval(expr, env)] if expr else [])
        for value in values:
            cls = type(value)
            if cls not in _GENERIC_GETATTR or not cls.__flags__ & (1 << 8):  # (immutable types)
                continue
            for klass in cls.__mro__:
                for attr, descr in vars(klass).items():
                    if isinstance(descr, (types.GetSetDescriptorType, types.MemberDescriptorType)):
                        getattr(value, attr)  # raises if the assumption is wrong


# ---- the reproducer and answers inside one graph ---------------------------------------------

def test_partial_has_no_name():
    def h(x):
        p = functools.partial(torch.add, x)
        return hasattr(p, "__name__"), hasattr(p, "__qualname__"), hasattr(torch.add, "__name__")

    x = torch.randn(3)
    assert pydynamo.optimize("eager")(h)(x) == h(x) == (False, False, True)


def test_answers_from_the_type_need_no_break():
    """Made in the trace, these objects' types are known exactly: answered in the graph."""
    def h(x):
        p = functools.partial(torch.add, x)
        d, lst, it = {1: x}, [x], zip([1], [2])
        flags = (hasattr(p, "__name__"), hasattr(p, "func"), hasattr(p, "__dict__"),
                 hasattr(d, "__name__"), hasattr(lst, "__call__"), hasattr(lst, "append"),
                 hasattr(it, "__next__"), hasattr(it, "__mro__"), getattr(p, "__wrapped__", None),
                 p.__module__, type(p) is functools.partial, lst.__class__ is list)
        return x + 1, flags

    cnt = CompileCounter()
    x = torch.randn(3)
    got = pydynamo.optimize(cnt, fullgraph=True)(h)(x)
    assert got[1] == h(x)[1]
    assert cnt.frame_count == 1


def test_bound_method_class_is_the_method_type():
    def h(x, m):
        return x + 1, m.__class__ is types.MethodType, m.__class__ is types.FunctionType

    got = pydynamo.optimize("eager")(h)(torch.ones(1), inst.m)
    assert got[1:] == (True, False)


# ---- guards: answers read from an input object follow the object -----------------------------

def _calls(fn, before, change, after):
    opt = pydynamo.optimize("eager")(fn)
    pydynamo.reset()
    x = torch.ones(1)
    assert opt(x) == fn(x) == before
    change()
    assert opt(x) == fn(x) == after


def test_partial_input_gaining_a_name():
    p = functools.partial(torch.add, 1)

    def fn(x):
        return hasattr(p, "__name__"), getattr(p, "__name__", "none")

    def change():
        p.__name__ = "named"
    _calls(fn, (False, "none"), change, (True, "named"))


def test_partial_input_instance_dict_hiding_call():
    p = functools.partial(ufn)

    def fn(x):
        return p.__call__(3)

    def change():
        p.__call__ = lambda q: -q
    _calls(fn, 3, change, -3)


def test_user_function_gaining_wrapped():
    def g(a):
        return a

    def fn(x):
        return hasattr(g, "__wrapped__"), hasattr(g, "__name__")

    def change():
        g.__wrapped__ = ufn
    _calls(fn, (False, True), change, (True, True))


def test_bound_method_forwards_to_its_function():
    class K:
        def m(self):
            return 1
    k = K()
    m = k.m

    def fn(x):
        return hasattr(m, "tag"), hasattr(m, "__call__"), hasattr(m, "__wrapped__")

    def change():
        K.m.tag = 1
    _calls(fn, (False, True, False), change, (True, True, False))


def test_namedtuple_class_gaining_an_attribute():
    class P(NamedTuple):
        a: int

    def fn(x):
        return hasattr(P(1), "extra"), hasattr(P(1), "__name__"), hasattr(P(1), "a")

    def change():
        P.extra = 1
    _calls(fn, (False, False, True), change, (True, False, True))


def test_ordered_dict_input_with_instance_attributes():
    od = collections.OrderedDict(a=1)

    def fn(x):
        return hasattr(od, "tag"), hasattr(od, "keys")

    def change():
        od.tag = 1
    _calls(fn, (False, True), change, (True, True))


def test_module_getattr_is_not_run_while_tracing():
    mod = types.ModuleType("lazy")
    calls = []

    def module_getattr(name):
        calls.append(name)
        raise AttributeError(name)
    mod.__getattr__ = module_getattr

    def fn(x):
        return hasattr(mod, "thing")

    assert pydynamo.optimize("eager")(fn)(torch.ones(1)) is False
    assert calls == ["thing"]  # once: by Python, never at trace time


def test_ordered_dict_input_method_hidden_by_its_instance_dict():
    od = collections.OrderedDict(a=1)

    def fn(x):
        return list(od.keys())

    def change():
        od.keys = lambda: ["hidden"]
    _calls(fn, ["a"], change, ["hidden"])
