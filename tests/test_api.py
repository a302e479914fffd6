"""The public API through the real hook: optimize, compile, disable, reset, OptimizedModule,
fullgraph errors, recompiles and the cache-size limit."""
import logging

import pytest
import torch

import pydynamo
from pydynamo import _C, config
from pydynamo.exc import Unsupported
from pydynamo.testing import CompileCounter


def fn(x, y):
    return torch.relu(x) * y + 1


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1 = torch.nn.Linear(4, 8)
        self.lin2 = torch.nn.Linear(8, 2)
        self.scale = 2.0

    def forward(self, x):
        return self.lin2(torch.relu(self.lin1(x))) * self.scale


def test_optimize_decorator_compiles_once_and_serves_hits():
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(fn)
    x = torch.randn(4)
    for _ in range(3):
        assert torch.equal(opt(x, 2.0), fn(x, 2.0))
    assert cnt.frame_count == 1 and cnt.op_count == 3
    assert _C.cache_size(fn) == 1
    assert _C.get_eval_frame() is None  # switched off again after each call


def test_guard_failures_recompile():
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(fn)
    x = torch.randn(4)
    opt(x, 2.0)
    opt(x, 3.0)                               # constant changed
    opt(torch.randn(5), 3.0)                  # size changed
    opt(x.double(), 3.0)                      # dtype changed
    opt(torch.randn(4, requires_grad=True), 3.0)  # requires_grad changed
    with torch.no_grad():
        opt(x, 3.0)                           # grad mode changed
    assert cnt.frame_count == 6
    opt(x, 2.0)
    opt(torch.randn(5), 3.0)
    assert cnt.frame_count == 6  # every earlier entry still serves its inputs


def test_recompile_reasons_are_logged(caplog):
    opt = pydynamo.optimize(CompileCounter())(fn)
    x = torch.randn(4)
    with caplog.at_level(logging.INFO, logger="pydynamo.recompiles"):
        opt(x, 2.0)
        opt(torch.randn(3), 2.0)
    assert "recompiling" in caplog.text and "L['x']" in caplog.text and "(size)" in caplog.text


def test_cache_size_limit_runs_eagerly_with_one_warning(caplog, monkeypatch):
    monkeypatch.setattr(config, "cache_size_limit", 2)
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(fn)
    x = torch.randn(4)
    with caplog.at_level(logging.WARNING, logger="pydynamo.recompiles"):
        for y in range(5):
            assert torch.equal(opt(x, float(y)), fn(x, float(y)))
    assert cnt.frame_count == 2
    assert caplog.text.count("cache_size_limit") == 1
    assert "L['y'] == " in caplog.text


def test_context_manager_compiles_frames_started_inside():
    cnt = CompileCounter()
    x = torch.randn(4)
    with pydynamo.optimize(cnt):
        out = fn(x, 2.0)
    assert torch.equal(out, fn(x, 2.0))
    assert cnt.frame_count == 1
    assert _C.get_eval_frame() is None


def test_calls_are_inlined_not_new_frames():
    def helper(x):
        return x.sin() + 1

    def outer(x):
        return helper(x) * helper(x + 1)

    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(outer)
    x = torch.randn(3)
    assert torch.allclose(opt(x), outer(x))
    assert cnt.frame_count == 1
    assert _C.cache_size(helper) == 0  # never a frame of its own


def test_optimizing_twice_works():
    c1, c2 = CompileCounter(), CompileCounter()
    twice = pydynamo.optimize(c2, fullgraph=True)(pydynamo.optimize(c1, fullgraph=True)(fn))
    x = torch.randn(4)
    assert torch.equal(twice(x, 2.0), fn(x, 2.0))
    assert c1.frame_count + c2.frame_count == 1


def test_torch_nn_modules_given_by_name_are_compiled():
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    cnt = CompileCounter()
    opt = pydynamo.compile(seq, backend=cnt, fullgraph=True)
    x = torch.randn(2, 4)
    assert torch.equal(opt(x), seq(x))
    assert cnt.frame_count == 1 and cnt.op_count == 2


def test_method_and_module():
    m = MLP()
    cnt = CompileCounter()
    om = pydynamo.optimize(cnt)(m)
    x = torch.randn(3, 4)
    assert isinstance(om, pydynamo.OptimizedModule) and om._orig_mod is m
    assert torch.allclose(om(x), m(x))
    assert om(x).shape == (3, 2) and cnt.frame_count == 1
    assert om.lin1 is m.lin1 and om.scale == 2.0  # attributes forwarded
    assert [k for k in om.state_dict()] == ["_orig_mod." + k for k in m.state_dict()]
    assert len(list(om.parameters())) == 4
    m.scale = 3.0  # a module attribute read by the trace is guarded
    assert torch.allclose(om(x), m(x))
    assert cnt.frame_count == 2
    bound = pydynamo.optimize(CompileCounter())(m.forward)
    assert torch.allclose(bound(x), m(x))


def test_module_forward_hooks_run_as_in_eager():
    m = MLP()
    calls = []
    m.register_forward_hook(lambda mod, inp, out: calls.append(out.shape) or out * 0)
    om = pydynamo.compile(m, backend=CompileCounter())
    x = torch.randn(2, 4)
    assert torch.equal(om(x), torch.zeros(2, 2))
    assert calls == [(2, 2)]


def test_training_mode_is_guarded():
    class Drop(torch.nn.Module):
        def forward(self, x):
            return x * 2 if self.training else x * 3

    m = Drop()
    cnt = CompileCounter()
    om = pydynamo.compile(m, backend=cnt)
    x = torch.randn(3)
    assert torch.equal(om(x), x * 2)
    m.eval()
    assert torch.equal(om(x), x * 3)
    assert cnt.frame_count == 2


def test_compile_mirrors_torch_compile():
    cnt = CompileCounter()
    opt = pydynamo.compile(fn, backend=cnt)
    x = torch.randn(4)
    assert torch.equal(opt(x, 2.0), fn(x, 2.0))
    deco = pydynamo.compile(backend=cnt, fullgraph=True)(fn)
    assert torch.equal(deco(x, 2.0), fn(x, 2.0))
    with pytest.raises(RuntimeError, match="mode is for the inductor and triton backends"):
        pydynamo.compile(fn, backend="eager", mode="max-autotune")
    with pytest.raises(ValueError, match="unknown pydynamo backend 'nope'"):
        pydynamo.compile(fn, backend="nope")


def test_disable_runs_eagerly_and_breaks_capture_of_its_caller():
    seen_compiling = []

    @pydynamo.disable
    def eager_only(x):
        seen_compiling.append(torch.compiler.is_compiling())
        return x + 1

    def caller(x):
        return eager_only(x) * 2

    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(caller)
    x = torch.randn(3)
    assert torch.equal(opt(x), (x + 1) * 2)
    assert cnt.frame_count == 1  # a graph break: the call runs natively, `* 2` is a graph
    assert seen_compiling == [False]
    direct = pydynamo.optimize(cnt)(eager_only)
    assert torch.equal(direct(x), x + 1) and cnt.frame_count == 1


def test_fullgraph_error_names_the_users_line():
    def bad(x):
        print("side effect")  # the line the error must point at
        return x + 1

    opt = pydynamo.optimize(CompileCounter(), fullgraph=True)(bad)
    with pytest.raises(Unsupported) as info:
        opt(torch.randn(2))
    msg = str(info.value)
    assert f"{__file__}:{bad.__code__.co_firstlineno + 1}" in msg
    nopython = pydynamo.optimize(CompileCounter(), nopython=True)(bad)
    with pytest.raises(Unsupported):
        nopython(torch.randn(2))


def test_unsupported_without_fullgraph_runs_eagerly(capsys):
    def bad(x):
        print("printed")
        return x + 1

    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(bad)
    x = torch.randn(2)
    assert torch.equal(opt(x), x + 1)
    assert torch.equal(opt(x), x + 1)
    assert capsys.readouterr().out == "printed\nprinted\n"
    assert cnt.frame_count == 1  # print() breaks the graph; `x + 1` is captured after it
    raise_in = pydynamo.optimize(cnt)(lambda x: x.foo)  # breaks; the native LOAD_ATTR raises
    with pytest.raises(AttributeError):
        raise_in(x)


def test_is_compiling_reads_true_while_tracing():
    def f(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1

    opt = pydynamo.optimize(CompileCounter())(f)
    x = torch.randn(2)
    assert torch.equal(opt(x), x + 1)
    assert torch.equal(f(x), x - 1)


def test_reset_forgets_everything():
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(fn)
    x = torch.randn(4)
    opt(x, 2.0)
    pydynamo.reset()
    assert _C.cache_size(fn) == 0
    assert not [k for k in globals() if k.startswith("__compiled_fn")]
    opt(x, 2.0)
    assert cnt.frame_count == 2


def test_function_returning_input_or_no_tensor_work():
    cnt = CompileCounter()
    ident = pydynamo.optimize(cnt)(lambda x: x)
    x = torch.randn(2)
    assert ident(x) is x
    consts = pydynamo.optimize(cnt)(lambda a, b: (a + b, [a, {"k": b}]))
    assert consts(1, 2) == (3, [1, {"k": 2}])
    assert cnt.frame_count == 0  # an empty graph never reaches the backend


def test_list_and_register_backends():
    assert {"eager", "inductor"} <= set(pydynamo.list_backends())

    @pydynamo.register_backend(name="my_backend_for_test")
    def mine(gm, example_inputs):
        mine.graphs = getattr(mine, "graphs", 0) + 1
        return gm.forward

    opt = pydynamo.optimize("my_backend_for_test")(fn)
    x = torch.randn(4)
    assert torch.equal(opt(x, 2.0), fn(x, 2.0)) and mine.graphs == 1


def test_explain_reports_graphs_ops_guards_and_leaves_nothing_behind():
    def f(x):
        return torch.nn.functional.gelu(torch.relu(x).sum() * 2)

    out = pydynamo.explain(f)(torch.randn(3))
    assert out.graph_count == 1 and out.graph_break_count == 0 and out.op_count == 4
    assert out.ops_per_graph == [["torch.relu", "Tensor.sum", "operator.mul", "torch._C._nn.gelu"]]
    assert "L['x']: Tensor(torch.float32, cpu, size=[3], stride=[1], requires_grad=False)" in out.out_guards
    text = str(out)
    assert text.startswith("Graph Count: 1\nGraph Break Count: 0\nOp Count: 4\n")
    assert "Ops 1:\n    torch.relu\n" in text and "<locals>.f: " in text
    assert _C.cache_size(f) == 0 and _C.get_eval_frame() is None


def test_explain_gives_the_reason_and_line_of_what_was_not_captured():
    def g(x):
        y = x + 1
        print("side effect")
        return y

    out = pydynamo.explain(g)(torch.randn(3))
    assert out.graph_count == 1 and out.graph_break_count == 1
    br = out.break_reasons[0]
    assert "print" in br.reason
    assert br.location == f"{__file__}:{g.__code__.co_firstlineno + 2}"
    assert br.source_line == 'print("side effect")'


def helper_with_kw(x, scale=2):
    return x * scale


def test_function_code_and_class_attributes_are_read_while_tracing():
    def f(x):
        names = helper_with_kw.__code__.co_varnames[:helper_with_kw.__code__.co_argcount]
        if "scale" in names and helper_with_kw.__class__ is type(f):
            return helper_with_kw(x, scale=3)
        return x

    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt, fullgraph=True)(f)
    x = torch.randn(3)
    assert torch.equal(opt(x), x * 3) and cnt.frame_count == 1
    assert any("G['helper_with_kw'].__code__ is <code object" in t for t in _C.get_cache_entries(f)[0].guards.texts())


class ScaledLinear(torch.nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


class ScaledTwice(ScaledLinear):
    def forward(self, x):
        return super(ScaledLinear, self).forward(x) + super().forward(x)


@pytest.mark.parametrize("cls", [ScaledLinear, ScaledTwice])
def test_super_in_module_forward_is_one_graph(cls):
    m = cls(3, 3)
    cnt = CompileCounter()
    x = torch.randn(2, 3)
    assert torch.allclose(pydynamo.compile(m, backend=cnt, fullgraph=True)(x), m(x))
    assert cnt.frame_count == 1


class Base:
    def scale(self, x):
        return x * 2


class Child(Base):
    def scale(self, x):
        return super().scale(x) + 1


def test_super_method_is_guarded_by_identity():
    obj = Child()
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt, fullgraph=True)(lambda o, x: o.scale(x))
    x = torch.randn(3)
    assert torch.equal(opt(obj, x), x * 2 + 1)
    original = Base.scale
    try:
        Base.scale = lambda self, x: x * 10  # the parent's method changes: the guard must see it
        assert torch.equal(opt(obj, x), x * 10 + 1)
    finally:
        Base.scale = original
    assert cnt.frame_count == 2


def test_aliased_tensor_arguments_get_their_own_entry():
    def f(a, b):
        a.add_(1)
        return b * 2  # reads the mutation when b is a

    opt = pydynamo.optimize("aot_eager")(f)
    assert torch.equal(opt(torch.ones(3), torch.ones(3)), torch.full((3,), 2.0))
    x = torch.ones(3)
    assert torch.equal(opt(x, x), torch.full((3,), 4.0))  # as eager: a wrong cache hit would give 2
    x = torch.ones(3)
    assert torch.equal(opt(x, x), torch.full((3,), 4.0))
    assert _C.cache_size(f) == 2
