"""Idioms found by the model sweep (tools/bench_real.py --sweep, issue 39), each written from the
Python or PyTorch documentation and compared with eager: the contents of OrderedDict and dict
subclass instances made before the frame (transformers' ModelOutput, ACT2FN's ClassInstantier),
dict's own lookup through ``super()`` past an overriding ``__getitem__``, classmethods read
through a module, ``dtype=int``, NumPy ufuncs of plain numbers, and helpers that capture nothing
called with a new string each time."""
import collections

import numpy as np
import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter, same


class Instantier(collections.OrderedDict):
    """Like transformers' ClassInstantier: item lookup makes an instance of the stored class."""

    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACTS = Instantier({"relu": torch.nn.ReLU, "silu": (torch.nn.SiLU, {}), "elu": (torch.nn.ELU, {"alpha": 2.0})})


class Output(collections.OrderedDict):
    """Like transformers' ModelOutput: items are attributes too, update is forbidden."""

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return tuple(self[name] for name in self.keys())[k]

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def update(self, *args, **kwargs):
        raise RuntimeError("update is forbidden")


def activations(x):
    return ACTS["silu"](x) + ACTS["relu"](x) + ACTS["elu"](x)


def test_dict_lookup_through_super_past_an_overriding_getitem():
    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(activations)
    x = torch.randn(5)
    assert same(f(x), activations(x)) and cnt.frame_count == 1
    y = torch.randn(5)
    assert same(f(y), activations(y)) and cnt.frame_count == 1  # a second call hits the entry
    old = dict.__getitem__(ACTS, "elu")
    try:  # the raw entry is guarded: a new value recompiles and is used
        dict.__setitem__(ACTS, "elu", (torch.nn.ELU, {"alpha": 0.5}))
        assert same(f(x), activations(x)) and cnt.frame_count == 2
    finally:
        dict.__setitem__(ACTS, "elu", old)


def test_dict_getitem_calls_missing_for_an_absent_key():
    class WithDefault(dict):
        def __missing__(self, key):
            return len(key)

    def fn(x, d):
        return x * dict.__getitem__(d, "abc") + d.get("zz", 1) + ("q" in d)

    d = WithDefault(q=3)
    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(fn)
    x = torch.ones(2)
    assert same(f(x, d), fn(x, d))
    d["abc"] = 10  # present now: the absence was guarded
    assert same(f(x, d), fn(x, d)) and cnt.frame_count == 2


def read_output(o, x):
    return o["a"] + o[1] * x, list(o.keys()), len(o)


def write_output(o, x):
    o["c"] = x * 2
    return o["a"] + o[0]


def test_ordered_dict_subclass_input_is_read_in_its_own_order():
    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(read_output)
    x = torch.randn(3)
    o = Output(a=torch.ones(3), b=torch.full((3,), 2.0))
    assert same(f(o, x), read_output(o, x)) and cnt.frame_count == 1
    o.move_to_end("a")  # same keys, another order: o[1] is another item
    assert same(f(o, x), read_output(o, x)) and cnt.frame_count == 2


def test_ordered_dict_subclass_mutation_is_replayed_by_ordered_dicts_own_methods():
    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(write_output)
    x = torch.randn(3)
    got_o, want_o = Output(a=torch.ones(3)), Output(a=torch.ones(3))
    assert same(f(got_o, x), write_output(want_o, x)) and cnt.frame_count == 1
    assert list(got_o.keys()) == list(want_o.keys()) == ["a", "c"]
    assert same(got_o["c"], want_o["c"]) and same(got_o.c, want_o.c)  # __setitem__'s attribute too
    assert list(collections.OrderedDict.__iter__(got_o)) == list(dict.__iter__(got_o))  # order linked


def test_dicts_own_store_on_an_ordered_dict_subclass_is_refused():
    def fn(o, x):
        dict.__setitem__(o, "z", x)
        return x + 1
    with pytest.raises(pydynamo.exc.Unsupported, match="OrderedDict subclass"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(Output(a=torch.ones(1)), torch.ones(1))


class Merger(torch.nn.Module):
    scale = 3

    @classmethod
    def merge(cls, t, n):
        return t.reshape(n, -1) * cls.scale

    def forward(self, x):
        return self.merge(x, 2)


def test_classmethod_through_a_module_instance():
    m = Merger()
    cnt = CompileCounter()
    x = torch.randn(4)
    assert same(pydynamo.optimize(cnt, fullgraph=True)(m)(x), m(x)) and cnt.frame_count == 1


@pytest.mark.parametrize("kind", [int, float, bool, complex])
def test_python_type_as_dtype(kind):
    def fn(x):
        return torch.zeros(2, dtype=kind) + x.to(dtype=kind)
    x = torch.tensor([1.0, 0.0])
    got = pydynamo.optimize("eager", fullgraph=True)(fn)(x)
    assert got.dtype == fn(x).dtype and same(got, fn(x))


def test_numpy_ufunc_of_numbers_is_a_constant():
    def fn(x, d):
        x = x.clone()
        x *= np.sqrt(d)
        return x + np.exp(0.5), type(np.sqrt(d))
    cnt = CompileCounter()
    x = torch.randn(3)
    got = pydynamo.optimize(cnt, fullgraph=True)(fn)(x, 16)
    assert same(got, fn(x, 16)) and got[1] is np.float64 and cnt.frame_count == 1


def test_numpy_ufunc_with_a_floating_point_error_is_not_folded():
    def fn(x):
        return x + float(np.sqrt(-1.0))
    x = torch.ones(2)
    with np.errstate(invalid="raise"):  # NumPy raises at each call: so must the compiled function
        with pytest.raises(FloatingPointError):
            fn(x)
        with pytest.raises(FloatingPointError):
            pydynamo.optimize("eager")(fn)(x)


_HELPER_CALLS = []


def lookup(table, key):
    """A helper with no tensor work, called with a new key each time (like a config's
    __getattribute__ or a library's bookkeeping)."""
    _HELPER_CALLS.append(key)
    return table.get(key, len(key))


def test_helper_that_captures_nothing_does_not_fill_the_cache():
    table = {"a": 1}

    def fn(x):
        return x + 1

    cnt = CompileCounter()
    helper = pydynamo.optimize(cnt)(lookup)
    pydynamo.reset()
    results = [helper(table, f"key{i}") for i in range(3 * pydynamo.config.cache_size_limit)]
    assert results == [lookup(table, f"key{i}") for i in range(3 * pydynamo.config.cache_size_limit)]
    from pydynamo import _C
    assert len(_C.get_cache_entries(lookup.__code__)) == 1  # the first call's entry only
    assert cnt.frame_count == 0
    # with a tensor among the arguments it is compiled again
    assert pydynamo.optimize(cnt)(lambda t: lookup(table, "a") + t)(torch.ones(1)) == 2


class PositionalCache(torch.nn.Module):
    """Like transformers' FastSpeech2 relative positional encoding: a buffer reassigned in
    forward (Module.__setattr__ puts a plain tensor in _buffers)."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Buffer(torch.zeros(1, 2), persistent=False)

    def extend(self, x):
        if self.pos.size(1) >= x.size(1):
            return self.pos
        return torch.arange(x.size(1), dtype=x.dtype).unsqueeze(0)

    def forward(self, x):
        self.pos = self.extend(x)
        return x + self.pos[:, :x.size(1)]


def test_buffer_reassigned_in_forward():
    cnt = CompileCounter()
    got_m, want_m = PositionalCache(), PositionalCache()
    f = pydynamo.optimize(cnt, fullgraph=True)(got_m)
    for n in (1, 4, 3, 6):
        x = torch.randn(2, n)
        assert same(f(x), want_m(x))
        assert "pos" in got_m._buffers and same(got_m.pos, want_m.pos)
    assert "pos" not in got_m.__dict__


def test_buffer_tables_after_a_buffer_store_are_refused():
    class M(PositionalCache):
        def forward(self, x):
            self.pos = x * 2
            return [b for b in self.buffers()][0] + 1

    m = M()
    with pytest.raises(pydynamo.exc.Unsupported, match="reassigned a buffer"):
        pydynamo.optimize("eager", fullgraph=True)(m)(torch.ones(1, 2))
    m2 = M()
    x = torch.ones(1, 2)
    assert same(pydynamo.optimize("eager")(m2)(x), M()(x))  # a break there gives eager's answer


def test_parameter_assigned_to_a_buffer_name_is_refused():
    class M(PositionalCache):
        def forward(self, x):
            self.pos = torch.nn.Parameter(x)
            return x

    with pytest.raises(pydynamo.exc.Unsupported):
        pydynamo.optimize("eager", fullgraph=True)(M())(torch.ones(1, 2))


def tensor_keyed(x, y):
    d = {x: 1, y: 2}
    d[x] = 3
    z = x + 1
    d[z] = 4
    hits = [d[x], d.get(y), d.get(z * 1, -1), x in d, (x * 1) in d, len(d)]
    total = sum(k * v for k, v in d.items())
    d.pop(y)
    return total, hits, list(d.values()), d


def test_tensors_as_dict_keys():
    """torch.Tensor hashes by identity: a dict finds a tensor key only by the same object."""
    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(tensor_keyed)
    x, y = torch.randn(3), torch.randn(3)
    got, want = f(x, y), tensor_keyed(x, y)
    assert same(got[:3], want[:3]) and cnt.frame_count == 1
    assert list(got[3]) [0] is x and same(list(got[3].values()), list(want[3].values()))
    # one tensor passed twice: one key (the aliasing is guarded: a recompile)
    got, want = f(x, x), tensor_keyed(x, x)
    assert same(got[:3], want[:3]) and len(got[3]) == len(want[3]) and cnt.frame_count == 2


def test_tensor_key_of_a_view_is_refused():
    def fn(x):
        d = {x: 1}
        return d.get(x.view(-1), 0)
    with pytest.raises(pydynamo.exc.Unsupported, match="share memory"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


def test_tensor_keys_into_an_input_dict_are_refused():
    def fn(x, d):
        d.update({x: 1})
        return x + 1
    with pytest.raises(pydynamo.exc.Unsupported, match="keyed by tensors"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2), {})
    d = {}
    assert same(pydynamo.optimize("eager")(fn)(torch.ones(2), d), torch.full((2,), 2.0)) and len(d) == 1
