"""Regression tests for issue 37 (soundness, part three) that are not about one modelled API:

- replay order: the objects side effects write into are read (by their Sources) before any
  write, so a write into a container on the path to another target cannot redirect it
  (transformers' ``deprecate_kwarg``: ``kwargs[new] = kwargs.pop(old)``, then a KV cache
  update through ``kwargs[old]``);
- who asked: cache entries are keyed by the backend and the options that change what is
  compiled (fullgraph, dynamic, mode), as torch.compile's are;
- torch's own code: frames of torch's package, of code its compilers generate, and of the
  import system are never compiled as entries.
"""
import dataclasses
import functools

import pytest
import torch

import pydynamo
from pydynamo import convert_frame
from pydynamo.testing import CompileCounter, CompiledCodes


@pytest.fixture(autouse=True)
def _reset():
    pydynamo.reset()
    yield
    pydynamo.reset()


# ---- replay order ----------------------------------------------------------------------------

class _Layer:
    def __init__(self):
        self.keys = None


class _Cache:
    def __init__(self):
        self.layers = [_Layer()]


def test_store_through_a_key_the_replay_removed():
    def step(x, **kwargs):
        kwargs["cache"] = kwargs.pop("old")
        kwargs["cache"].layers[0].keys = x * 2
        return kwargs

    def run(f):
        c, x = _Cache(), torch.ones(2)
        kw = f(x, old=c, m=1)
        return sorted(kw), kw["cache"] is c, c.layers[0].keys

    eager, comp = run(step), run(pydynamo.optimize("eager")(step))
    assert eager[:2] == comp[:2] and torch.equal(eager[2], comp[2])


def test_store_through_a_key_removed_before_a_graph_break():
    def step(x, **kwargs):
        kwargs["cache"] = kwargs.pop("old")
        kwargs["cache"].layers[0].keys = x * 2
        pydynamo.graph_break()
        return kwargs["cache"].layers[0].keys + 1

    c = _Cache()
    out = pydynamo.optimize("eager")(step)(torch.ones(2), old=c)
    assert torch.equal(out, torch.full((2,), 3.0)) and torch.equal(c.layers[0].keys, torch.full((2,), 2.0))


def test_transformers_decode_step_with_an_eager_cache():
    """One step of generate(): the cache of an eager call passed back in (issue 37 item 6)."""
    transformers = pytest.importorskip("transformers")
    import copy
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    m = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 5))
    with torch.no_grad():
        pkv = m(ids, use_cache=True).past_key_values
        step = dict(attention_mask=torch.ones(1, 6, dtype=torch.long), cache_position=torch.tensor([5]),
                    use_cache=True)
        nxt = torch.randint(0, 64, (1, 1))
        pkv2 = copy.deepcopy(pkv)
        ref = m(nxt, past_key_values=pkv, **step).logits
        got = pydynamo.optimize("eager")(m)(nxt, past_key_values=pkv2, **step).logits
    torch.testing.assert_close(got, ref)


# ---- torch's own code ------------------------------------------------------------------------

class _Entries(CompiledCodes):
    """Records the code of every entry compiled."""

    def foreign(self):
        return [f"{c.co_filename}:{c.co_firstlineno} {c.co_qualname}" for c in self.codes if c.co_filename != __file__]


def _cond(y):
    return torch.cond(y.sum() > 0, lambda a: a + 1, lambda a: a - 1, (y,))


def _map(y):
    from functorch.experimental import control_flow
    return control_flow.map(lambda a: a * 2, y)


def _while(y):
    from torch._higher_order_ops.while_loop import while_loop
    return while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2), (torch.tensor(0), y))[1]


def _flex(y):
    from torch.nn.attention.flex_attention import flex_attention
    q = y.reshape(1, 1, *y.shape)
    return flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s + (qi - ki))


@pytest.mark.parametrize("api", [_cond, _map, _while, _flex], ids=lambda f: f.__name__[1:])
def test_eager_torch_compiler_apis_compile_no_frame_of_torch(api):
    """torch.cond & co. called eagerly from compiled code run torch's own compiler: none of its
    frames (torch's, dataclass __init__s it generates, import hooks, sympy) become entries."""
    import warnings

    def f(x):
        y = x.sin()
        pydynamo.graph_break()
        return api(y)

    x = torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = f(x)
        with _Entries() as seen:
            got = pydynamo.optimize("eager")(f)(x)
    torch.testing.assert_close(got, expected)
    assert seen.codes and not seen.foreign(), seen.foreign()


@dataclasses.dataclass(frozen=True)
class _Point:
    a: int
    b: int


def test_dataclass_methods_of_torch_are_not_entries_but_the_users_are():
    """Generated code belongs to the module whose globals it runs in."""
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not built")
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    init = DTensorSpec.__init__
    assert init.__code__.co_filename == "<string>"
    assert convert_frame.skip_reason(init.__code__, init.__globals__, None) is not None
    mine = _Point.__init__
    assert mine.__code__.co_filename == "<string>"
    assert convert_frame.skip_reason(mine.__code__, mine.__globals__, None) is None

    def f(x):
        y = x + 1
        pydynamo.graph_break()
        return y + _Point(1, 2).b + hash(_Point(3, 4)) % 5

    x = torch.ones(2)
    with _Entries() as seen:
        torch.testing.assert_close(pydynamo.optimize("eager")(f)(x), f(x))
    assert not seen.foreign(), seen.foreign()


def test_hash_of_an_object_with_a_python_hash():
    """hash(obj) is what __hash__ returned where it fits a Py_ssize_t (CPython's slot_tp_hash),
    not hash() of that int (reduced modulo 2**61 - 1): a frozen dataclass's hash was wrong."""
    class Big:
        def __hash__(self):
            return -3550055125485641917

    class Minus:
        def __hash__(self):
            return -1

    class Huge:
        def __hash__(self):
            return 2 ** 70

    def f(x):
        return x + 1, hash(_Point(1, 2)), hash(Big()), hash(Minus()), hash(Huge())

    x = torch.ones(2)
    assert pydynamo.optimize("eager")(f)(x)[1:] == f(x)[1:]


def test_import_hooks_are_not_entries():
    import importlib.abc
    import sys

    class Finder(importlib.abc.MetaPathFinder):
        calls = 0

        def find_spec(self, name, path=None, target=None):
            Finder.calls += 1
            return None

    def f(x):
        y = x + 1
        pydynamo.graph_break()
        import json.tool  # noqa: F401  (imported here: the finder runs)
        return y

    sys.modules.pop("json.tool", None)
    finder = Finder()
    sys.meta_path.insert(0, finder)
    try:
        with _Entries() as seen:
            pydynamo.optimize("eager")(f)(torch.ones(2))
    finally:
        sys.meta_path.remove(finder)
    assert Finder.calls and not [c for c in seen.codes if c.co_name == "find_spec"]


def test_user_forward_called_by_torch_is_still_an_entry():
    class M(torch.nn.Module):
        def forward(self, x):
            return x * 2

    counter = CompileCounter()
    m = M()

    def f(x):
        y = x + 1
        pydynamo.graph_break()
        return m(y)  # Module.__call__ (torch) calls M.forward (the user's)

    with _Entries() as seen:
        pydynamo.optimize(counter)(f)(torch.ones(2))
    assert any(c is M.forward.__code__ or c.co_name.startswith("resume") for c in seen.codes)
    assert not seen.foreign()


_DTENSOR_SCRIPT = r"""
import torch, torch.distributed as dist, pydynamo
from pydynamo import convert_frame
seen = []
class Obs:
    def on_entry(self, code, guards, seconds): seen.append(code)
    def on_break(self, exc): pass
convert_frame.observers.append(Obs())
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
from torch.distributed.tensor import DeviceMesh, Shard, distribute_tensor
d = distribute_tensor(torch.randn(4, 4), DeviceMesh("cpu", [0]), [Shard(0)])
def f(d):
    y = d * 2
    return (y @ y).sum()
out = pydynamo.optimize("eager")(f)(d)
assert torch.allclose(out.full_tensor(), f(d).full_tensor())
foreign = [f"{c.co_filename}:{c.co_qualname}" for c in seen if c.co_filename != "<stdin>"]
assert not foreign, foreign
dist.destroy_process_group()
print("OK")
"""


def test_dtensor_dispatch_run_eagerly_compiles_no_frame_of_torch():
    """A DTensor's __torch_dispatch__ (and the dataclasses and namedtuples it builds) running
    eagerly under a compiled frame: nothing of it becomes an entry."""
    import subprocess
    import sys
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not built")
    r = subprocess.run([sys.executable, "-"], input=_DTENSOR_SCRIPT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


# ---- who asked -------------------------------------------------------------------------------

def _recording(name, log):
    def backend(gm, example_inputs):
        log.append(name)
        return gm.forward
    return backend


def test_two_backends_on_one_function_each_compile():
    log = []

    def g(x):
        return x * 2

    a, b = pydynamo.optimize(_recording("a", log))(g), pydynamo.optimize(_recording("b", log))(g)
    x = torch.ones(2)
    a(x), b(x), a(x), b(x)
    assert log == ["a", "b"]


def test_two_instances_of_a_module_class_with_two_backends():
    log = []

    class M(torch.nn.Module):
        def forward(self, x):
            return x + 1

    ma = pydynamo.optimize(_recording("a", log))(M())
    mb = pydynamo.optimize(_recording("b", log))(M())
    x = torch.ones(2)
    ma(x), mb(x), ma(x), mb(x)
    assert log == ["a", "b"]


def _with_a_break(x):
    x = x + 1
    pydynamo.graph_break()
    return x


def _unsupported_everywhere(x):
    try:  # a break inside a user's try/except: the whole frame runs eagerly (non-strict)
        y = x + 1
        pydynamo.graph_break()
    except ValueError:
        y = x
    return y


@pytest.mark.parametrize("fn", [_with_a_break, _unsupported_everywhere], ids=["break", "eager_frame"])
def test_fullgraph_after_a_non_strict_compile_raises(fn):
    x = torch.ones(2)
    pydynamo.optimize("eager")(fn)(x)
    with pytest.raises(pydynamo.exc.Unsupported):
        pydynamo.optimize("eager", fullgraph=True)(fn)(x)
    torch.testing.assert_close(pydynamo.optimize("eager")(fn)(x), fn(x))  # the non-strict entries still serve


def test_same_backend_and_options_share_entries():
    counter = CompileCounter()

    def g(x):
        return x - 1

    x = torch.ones(2)
    pydynamo.optimize(counter)(g)(x)
    pydynamo.optimize(counter)(g)(x)
    with pydynamo.optimize(counter):
        g(x)
    assert counter.frame_count == 1
    pydynamo.optimize(counter, dynamic=True)(g)(x)  # another option: compiled again
    assert counter.frame_count == 2
    # compile(mode=...) builds a new partial each time: equal modes share a key
    k1 = convert_frame.cache_key(functools.partial(counter, mode="x"), False, None)
    k2 = convert_frame.cache_key(functools.partial(counter, mode="x"), False, None)
    k3 = convert_frame.cache_key(functools.partial(counter, mode="y"), False, None)
    assert k1 is k2 and k1 is not k3


def test_run_only_serves_any_backends_entries():
    log = []

    def g(x):
        return x * 3

    x = torch.ones(2)
    pydynamo.optimize(_recording("a", log))(g)(x)
    before = pydynamo._C.get_cache_entries(g.__code__)[0].hits
    pydynamo.run(g)(x)
    assert pydynamo._C.get_cache_entries(g.__code__)[0].hits == before + 1 and log == ["a"]


def test_torch_compile_called_inside_a_compiled_frame():
    """torch.compile's eval function sits above ours and chains to it: neither capturer compiles
    the other's code (pydynamo compiled dynamo's compiled lambda, dynamo the result, and so on:
    a RecursionError), nor pydynamo's own compiler frames."""
    import torch._dynamo
    torch._dynamo.reset()

    def f(x):
        g = torch.compile(lambda a: a * 2, backend="eager")
        return g(x) + 1

    x = torch.randn(3)
    with _Entries() as seen:
        got = pydynamo.optimize("eager")(f)(x)
    torch._dynamo.reset()
    torch.testing.assert_close(got, x * 2 + 1)
    assert not [c for c in seen.codes if any(n.startswith("__compiled_fn_") for n in c.co_names)]


# ---- an unused op that raises in eager ---------------------------------------------------------

def _neg_bool(x, i):
    y = -(x > 0)  # noqa: F841  (negation of a bool tensor: the real kernel refuses)
    return x + 1


def _sub_bool(x, i):
    y = (x > 0) - 1  # noqa: F841
    return x + 1


def _and_float(x, i):
    y = x & 1  # noqa: F841  (bitwise and of floats)
    return x + 1


def _index_out_of_bounds(x, i):
    y = x[i]  # noqa: F841  (whether a tensor index is in bounds is data)
    return x + 1


@pytest.mark.parametrize("fn", [_neg_bool, _sub_bool, _and_float, _index_out_of_bounds], ids=lambda f: f.__name__[1:])
def test_unused_op_that_raises_in_eager_still_raises(fn):
    """Unused pure ops are dropped from the graph, but not one whose real kernel would raise where
    the fake tensor did not (a dtype check, a tensor index out of bounds)."""
    x, i = torch.ones(3), torch.tensor([5])
    with pytest.raises(Exception) as eager:
        fn(x, i)
    with pytest.raises(type(eager.value)):
        pydynamo.optimize("eager")(fn)(x, i)


def test_unused_pure_ops_are_still_dropped():
    counter = CompileCounter()

    def f(x):
        mask = torch.arange(4) < 2  # noqa: F841  (unused: dropped)
        return x * 2

    pydynamo.optimize(counter)(f)(torch.ones(4))
    assert counter.op_count == 1


def test_size_of_numpy_ints_keeps_its_items_across_a_break():
    """torch.Size keeps the numpy ints it is given; rebuilt after a break (or read back as an
    input of the resume function) its items must stay numpy ints (fuzzer, seeds 7 and 13)."""
    import numpy as np

    def fn(x):
        out = [torch.Size([np.int64(2)])]
        if x.sum() > 0:
            out.append(1)
        return out

    x = torch.ones(2)
    got = pydynamo.optimize("eager")(fn)(x)
    assert got == fn(x) and type(got[0][0]) is np.int64


def test_the_grad_of_a_symbolic_input_is_guarded():
    """A tensor input's ``.grad``, read after the tensor got symbolic sizes, is fakified with it
    (the fake mode's memo gives it the tensor's symbols): it is still guarded, so an entry
    traced with a gradient is not served when the gradient is gone (the fuzzer's seed 65,
    program 191)."""
    import pydynamo
    state = {}

    def fn(x, c):
        if c["v"].grad is not None:
            return c["v"].grad.sum() + x.sum()
        return x * 2

    compiled = pydynamo.optimize("eager")(fn)
    pydynamo.reset()
    x = torch.randn(2)
    steps = [(3, False), (2, True), (2, False), (5, True), (4, False), (6, True)]
    for n, with_grad in steps:
        state["v"] = torch.zeros(n).requires_grad_()
        if with_grad:
            state["v"].grad = torch.ones(n)
        torch.testing.assert_close(compiled(x, state), fn(x, state))
    pydynamo.reset()
