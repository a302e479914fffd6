"""Python idioms of real model libraries (issue 18): ModuleList/Sequential slices, torch.finfo,
slice(), dicts keyed by classes, functions marked assume_constant_result, typing objects read
by validators. Each is captured (fullgraph=True), equals eager, and recompiles when what it
depended on changes."""
import functools
import typing

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter


def _compile(fn, counter=None):
    return pydynamo.compile(fn, backend=counter or "eager", fullgraph=True)


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if not isinstance(a, (tuple, list)):
        return type(a) is type(b) and a == b
    return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(4)])
        self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))

    def forward(self, x, n):
        for layer in self.layers[:n]:
            x = layer(x)
        head = self.layers[1:]
        return self.seq[1:](x), head[-1](x), len(head), self.layers[::-1][0](x), self.seq[:2][0](x)


def test_module_list_and_sequential_slices():
    m, x = Stack(), torch.randn(2, 4)
    cnt = CompileCounter()
    c = _compile(m, cnt)
    for n in (2, 1, 3, 2):
        assert _same(c(x, n), m(x, n))
    assert cnt.frame_count == 3  # one per n: the slice bound is a constant


def test_sliced_container_follows_the_parent():
    m, x = Stack(), torch.randn(2, 4)
    c = _compile(m)
    assert _same(c(x, 2), m(x, 2))
    m.layers.append(torch.nn.Linear(4, 4))  # the slices change: recompiled
    assert _same(c(x, 2), m(x, 2))
    with torch.no_grad():
        m.layers[1].weight.add_(1)
    assert _same(c(x, 2), m(x, 2))


def test_sliced_subclass_is_refused_with_a_reason():
    class MyList(torch.nn.ModuleList):
        pass

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = MyList([torch.nn.Linear(2, 2)])

        def forward(self, x):
            return self.layers[:1][0](x)
    m, x = M(), torch.randn(1, 2)
    report = pydynamo.explain(m)(x)
    assert any("slicing MyList" in b.reason for b in report.break_reasons)
    assert torch.equal(pydynamo.compile(m, backend="eager")(x), m(x))


def test_finfo_and_iinfo():
    def f(x):
        return x.clamp(min=torch.finfo(x.dtype).min / 2, max=torch.iinfo(torch.int8).max) + torch.finfo().eps
    c = _compile(f)
    for x in (torch.randn(3) * 1e38, torch.randn(3, dtype=torch.float64)):
        assert torch.equal(c(x), f(x))


def test_slice_builtin():
    def f(x, n):
        return x[slice(-n, None)] + 1, x[slice(2)], x[slice(0, 5, 2)]
    c = _compile(f)
    x = torch.arange(6.0)
    for n in (2, 3):
        assert _same(c(x, n), f(x, n))
    with pytest.raises(TypeError, match="at most 3 arguments"):
        pydynamo.compile(lambda x: slice(1, 2, 3, 4), backend="eager")(x)
    with pytest.raises(TypeError, match="no keyword arguments"):
        pydynamo.compile(lambda x: slice(stop=1), backend="eager")(x)


class Base:
    scale = 2


class Derived(Base):
    pass


TABLE = {Base: 1, Derived: 2, int: 3, typing.Optional: 4}


def test_dict_keyed_by_classes():
    def f(x, cls):
        n = TABLE.get(cls, 0)
        for k, v in TABLE.items():
            if isinstance(k, type) and issubclass(k, Base):
                x = x + k.scale * v
        return x * n, Derived in TABLE, list(TABLE)[0] is Base
    cnt = CompileCounter()
    c = _compile(f, cnt)
    x = torch.ones(2)
    assert _same(c(x, Derived), f(x, Derived))
    Base.scale = 5  # read through a key: guarded
    try:
        assert _same(c(x, Derived), f(x, Derived))
        assert _same(c(x, int), f(x, int))
        TABLE[float] = 7  # the keys are guarded
        assert _same(c(x, float), f(x, float))
    finally:
        Base.scale = 2
        TABLE.pop(float, None)
    assert cnt.frame_count >= 3


def test_dict_keys_made_in_the_trace():
    def f(x):
        d = {int: x + 1, str: x + 2}
        d[float] = x * 3
        return [k.__name__ for k in d], d[float], dict.fromkeys([1]) if False else len(d)
    assert _same(_compile(f)(torch.ones(2)), f(torch.ones(2)))


def test_assume_constant_result():
    calls = []

    @functools.lru_cache
    @pydynamo.assume_constant_result
    def probe(n):
        calls.append(n)
        return n * 3

    @pydynamo.assume_constant_result
    def version():
        calls.append("v")
        return (2, "x")

    def f(x):
        return x + probe(2) + version()[0]
    c = _compile(f)
    x = torch.ones(2)
    assert torch.equal(c(x), f(x))
    assert calls.count("v") == 2  # once in the trace (for real), once by eager f
    assert torch.equal(c(x), f(x))
    assert calls.count("v") == 3  # the compiled code holds the result: no call

    @pydynamo.assume_constant_result
    def not_constant():
        return torch.ones(1)
    with pytest.raises(Exception, match="not a constant"):
        pydynamo.compile(lambda x: x + not_constant(), backend="eager", fullgraph=True)(x)


class Box:
    def __init__(self, tp):
        self.tp = tp


def test_typing_objects_are_read():
    def f(x, box):
        args = typing.get_args(box.tp)
        return x + len(args), int in args, typing.get_origin(box.tp) is not None
    c = _compile(f)
    x = torch.ones(1)
    for tp in (int | None, list[int], typing.Optional[str], int | float | None):
        assert _same(c(x, Box(tp)), f(x, Box(tp)))


class Counter:
    calls = 0

    def get(self):
        return self.calls


class SubCounter(Counter):
    pass


def test_class_attribute_writes_are_replayed():
    def f(x):
        Counter.calls += 1
        Counter.calls += 1
        return x * Counter.calls
    cnt = CompileCounter()
    c = _compile(f, cnt)
    Counter.calls = 0
    got = [c(torch.ones(1)).item() for _ in range(3)], Counter.calls
    Counter.calls = 0
    want = [f(torch.ones(1)).item() for _ in range(3)], Counter.calls
    assert got == want


def test_class_attribute_read_by_another_path_after_a_write_breaks():
    def f(x, o):
        Counter.calls = Counter.calls + 1
        return x * o.get()  # reads SubCounter.calls through the instance: refused, a break
    report = pydynamo.explain(f)(torch.ones(1), SubCounter())
    assert any("after the trace assigned it" in b.reason for b in report.break_reasons)
    c = pydynamo.compile(f, backend="eager")
    Counter.calls = 0
    got = [c(torch.ones(1), SubCounter()).item() for _ in range(3)], Counter.calls
    Counter.calls = 0
    want = [f(torch.ones(1), SubCounter()).item() for _ in range(3)], Counter.calls
    assert got == want
    Counter.calls = 0


def test_class_attribute_write_refusals():
    class Meta(type):
        def __setattr__(cls, name, value):
            super().__setattr__(name, value * 2)

    class WithMeta(metaclass=Meta):
        k = 1

    def f(x):
        WithMeta.k = 3
        return x + WithMeta.k
    report = pydynamo.explain(f)(torch.ones(1))
    assert any("defines __setattr__" in b.reason for b in report.break_reasons)
    assert torch.equal(pydynamo.compile(f, backend="eager")(torch.ones(1)), torch.ones(1) + 6)


class Totals(dict):
    def total(self):
        return sum(self.values())


class Items(list):
    def head(self):
        return self[0]


class Scaled(dict):
    def __setitem__(self, k, v):
        super().__setitem__(k, v * 10)


def test_pre_existing_dict_and_list_subclass_instances():
    def f(x, d, lst, s):
        d["b"] = 2
        d.update(c=3)
        lst.append(4)
        lst[0] = lst[0] + 1
        s["z"] = 1  # through Scaled.__setitem__
        s.update(w=2)  # dict.update stores directly
        return x * d.total() + len(lst) + lst.head() + sum(lst) + ("c" in d) + len(d) + s["z"]
    cnt = CompileCounter()
    c = _compile(f, cnt)

    def make(extra=False):
        d = Totals(a=1)
        if extra:
            d["q"] = 5
        return d, Items([1]), Scaled(a=1)
    for extra in (False, False, True):
        mine, theirs = make(extra), make(extra)
        assert torch.equal(c(torch.ones(1), *mine), f(torch.ones(1), *theirs))
        assert mine == theirs and [type(m) for m in mine] == [type(t) for t in theirs]
    assert cnt.frame_count == 2  # the keys are guarded: a new key recompiles


def test_subclass_changing_item_lookup_is_refused():
    class Lookup(dict):
        def __getitem__(self, k):
            return 7

    def f(x, d):
        d.setdefault("k", 1)
        return x + len(d)
    d1, d2 = Lookup(a=1), Lookup(a=1)
    assert torch.equal(pydynamo.compile(f, backend="eager")(torch.ones(1), d1), f(torch.ones(1), d2))
    assert d1 == d2


class KeysOnly:
    def keys(self):
        return ["p", "q"]

    def __getitem__(self, k):
        return k * 2


def test_dict_from_mappings_that_are_not_dicts():
    def f(x, reg):
        d = {"z": 0}
        d.update(reg)
        return x + 1, dict(reg), {**reg}, d, dict(KeysOnly()), sorted(reg.items())
    c = _compile(f)
    got, want = c(torch.ones(1), Scaled(ab=1)), f(torch.ones(1), Scaled(ab=1))
    assert torch.equal(got[0], want[0]) and got[1:] == want[1:]
    assert got[1] == {"ab": 1}  # the keys of a dict subclass, not its keys unpacked as pairs


def test_unused_pure_results_are_dropped():
    cnt = CompileCounter()

    def f(x):
        unused = torch.arange(4)[:, None] + 1  # noqa: F841 (as transformers' mask helpers do)
        x.add_(1)  # a mutation with no user: kept
        return x * 2
    x, y = torch.ones(2), torch.ones(2)
    assert torch.equal(_compile(f, cnt)(x), f(y)) and torch.equal(x, y)
    assert cnt.op_count == 2
