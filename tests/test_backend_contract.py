"""The context a backend compiles in (issue 42, first part): as under torch.compile, a
TracingContext holding the graph's fake mode is installed while the backend runs, so
``detect_fake_mode(example_inputs)`` and ``TracingContext.try_get()`` find it, and backends built
on torch's helpers (``aot_autograd``) work unchanged."""
import pytest
import torch
from torch._guards import TracingContext, detect_fake_mode

import pydynamo


class Recorder:
    """A backend that records what it finds in its compile context, then runs the graph."""

    def __init__(self):
        self.seen = []

    def __call__(self, gm, example_inputs):
        ctx = TracingContext.try_get()
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        fakes = [n.meta["example_value"] for n in placeholders if isinstance(n.meta.get("example_value"), torch.Tensor)]
        self.seen.append({
            "context": ctx,
            "mode": detect_fake_mode(example_inputs),
            "fake_modes": {id(f.fake_mode) for f in fakes},
        })
        return gm.forward


def _checks(seen):
    assert seen, "the backend was not called"
    for entry in seen:
        assert entry["context"] is not None
        assert entry["mode"] is not None and entry["context"].fake_mode is entry["mode"]
        assert entry["fake_modes"] <= {id(entry["mode"])}  # the graph's own fakes are that mode's


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_backend_finds_the_graphs_fake_mode(dynamic):
    def f(x, y):
        return (x @ y).relu().sum(0)
    rec = Recorder()
    pydynamo.reset()
    compiled = pydynamo.optimize(rec, dynamic=dynamic)(f)
    for n in (3, 5):
        x, y = torch.randn(n, 4), torch.randn(4, 2)
        assert torch.allclose(compiled(x, y), f(x, y))
    _checks(rec.seen)


def test_a_module_and_a_graph_break():
    lin = torch.nn.Linear(4, 4)

    def f(x):
        y = lin(x).sin()
        print("", end="")  # a break: two graphs, each compiled in its own context
        return lin(y).cos()
    rec = Recorder()
    pydynamo.reset()
    x = torch.randn(2, 4)
    assert torch.allclose(pydynamo.optimize(rec)(f)(x), f(x))
    assert len(rec.seen) == 2
    _checks(rec.seen)
    assert rec.seen[0]["mode"] is not rec.seen[1]["mode"]


def test_torchs_aot_autograd_helper_as_a_user_backend():
    """``torch._dynamo.backends.common.aot_autograd`` (the helper third-party backends build on)
    reads the compile context; training through it equals eager."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    compiled_graphs = []

    def compiler(gm, example_inputs):
        compiled_graphs.append(gm)
        return make_boxed_func(gm.forward)
    backend = aot_autograd(fw_compiler=compiler, bw_compiler=compiler)
    w = torch.randn(4, 3, requires_grad=True)

    def f(x):
        return (x @ w).tanh().sum()
    pydynamo.reset()
    x = torch.randn(5, 4)
    out = pydynamo.optimize(backend)(f)(x)
    out.backward()
    got = w.grad.clone()
    w.grad = None
    f(x).backward()
    assert torch.allclose(got, w.grad)
    assert len(compiled_graphs) == 2  # forward and backward


# ---- the graph as torch.compile hands it: the same programs, pydynamo's and torch.compile's ---

class Shapes:
    """A backend that records, per graph, its placeholders (kind, symbolic sizes), the example
    inputs' types and the node metadata keys."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.graphs.append({
            "placeholders": [_describe(n.meta["example_value"]) for n in phs],
            "names": [n.name for n in phs],
            "inputs": [type(a).__name__ for a in example_inputs],
            "meta": [sorted(k for k in n.meta if k in _META) for n in gm.graph.nodes if n.op == "call_function"],
            "modules": [[v[1] for v in n.meta.get("nn_module_stack", {}).values()]
                        for n in gm.graph.nodes if n.op == "call_function"],
            "gm": gm,
        })
        return gm.forward


_META = ("example_value", "stack_trace", "source_fn_stack", "nn_module_stack")


def _describe(v):
    """A placeholder's value with the symbols' names left out (each compiler numbers its own)."""
    if isinstance(v, torch.SymInt):
        return "SymInt"
    sizes = ["s" if isinstance(s, torch.SymInt) else int(s) for s in v.size()]
    return (type(v).__name__, tuple(sizes))


def _both(fn, calls, **kw):
    """Shapes records of pydynamo's graphs and torch.compile's for the same calls."""
    import torch._dynamo
    out = []
    for opt in (lambda b: pydynamo.optimize(b, **kw), lambda b: torch.compile(backend=b, **kw)):
        pydynamo.reset()
        torch._dynamo.reset()
        rec = Shapes()
        compiled = opt(rec)(fn)
        for args in calls:
            torch.testing.assert_close(compiled(*args), fn(*args))
        out.append(rec.graphs)
    torch._dynamo.reset()
    return out


def _sizes_only(x, y, z):
    return (x * 2).sum(0) + y.size(0) + z.shape[0]


def test_static_graph_inputs_used_only_for_sizes_are_not_placeholders():
    pd, tc = _both(_sizes_only, [(torch.randn(3, 4), torch.randn(4), torch.randn(2, 3))])
    assert [g["placeholders"] for g in pd] == [g["placeholders"] for g in tc] == [[("FakeTensor", (3, 4))]]
    assert [g["names"] for g in pd] == [g["names"] for g in tc] == [["l_x_"]]


def test_dynamic_sizes_are_symint_placeholders_in_torch_compiles_order():
    calls = [(torch.randn(n, 4), torch.randn(n + 1), torch.randn(2, n)) for n in (3, 5, 7)]
    pd, tc = _both(_sizes_only, calls)
    assert len(pd) == len(tc) == 2  # static, then one recompile to symbolic sizes, then none
    for key in ("placeholders", "inputs"):
        assert pd[1][key] == tc[1][key], key
    assert pd[1]["placeholders"] == ["SymInt", ("FakeTensor", ("s", 4)), "SymInt"]
    assert pd[1]["inputs"] == ["SymInt", "Tensor", "SymInt"]
    code = pd[1]["gm"].code  # the graph reads the size from its symbol, not from a dropped tensor
    assert ".size(" not in code


def _reshaped(x, y):
    return x.view(-1, x.size(0) * 2) + y.size(0)


def test_size_arithmetic_reads_the_symbols():
    calls = [(torch.randn(n, 2), torch.randn(n, n + 1).t()) for n in (4, 6, 8)]
    pd, tc = _both(_reshaped, calls, dynamic=True)
    assert [g["placeholders"] for g in pd] == [g["placeholders"] for g in tc]
    assert [g["inputs"] for g in pd] == [g["inputs"] for g in tc]


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4, bias=False)
        self.b = torch.nn.Linear(4, 4, bias=False)
        self.b.weight = self.a.weight  # GPT-2's lm_head.weight is wte.weight

    def forward(self, x):
        return self.b(self.a(x).relu())


def test_a_tied_parameter_is_one_placeholder_and_untying_recompiles():
    torch.manual_seed(0)
    m = Tied()
    x = torch.randn(2, 4)
    pd, tc = _both(m, [(x,)])
    assert sorted(pd[0]["placeholders"]) == sorted(tc[0]["placeholders"])  # x and one weight
    assert len(pd[0]["placeholders"]) == 2
    rec = Shapes()
    pydynamo.reset()
    compiled = pydynamo.optimize(rec)(m)
    compiled(x)
    m.b.weight = torch.nn.Parameter(torch.randn(4, 4))  # untied: the entry's guard fails
    torch.testing.assert_close(compiled(x), m(x))
    assert len(rec.graphs) == 2 and len(rec.graphs[1]["placeholders"]) == 3


def test_a_tensor_passed_twice_is_one_placeholder():
    def f(a, b):
        return a * b + a
    x = torch.randn(3)
    pd, tc = _both(f, [(x, x)])
    assert pd[0]["placeholders"] == tc[0]["placeholders"] == [("FakeTensor", (3,))]
    rec = Shapes()
    pydynamo.reset()
    compiled = pydynamo.optimize(rec)(f)
    compiled(x, x)
    y = torch.randn(3)
    torch.testing.assert_close(compiled(x, y), f(x, y))  # two objects now: another entry
    assert len(rec.graphs) == 2


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x).sum()


def test_node_metadata_as_torch_compile_fills_it():
    torch.manual_seed(0)
    net = Net()
    pd, tc = _both(net, [(torch.randn(2, 4),)])
    assert pd[0]["meta"] == tc[0]["meta"]
    assert pd[0]["modules"] == tc[0]["modules"] == [[Block, torch.nn.Linear], [Block], [Block]]
    gm = pd[0]["gm"]
    linear = next(n for n in gm.graph.nodes if n.op == "call_function" and "linear" in n.name)
    assert linear.meta["source_fn_stack"][-1][1] is torch.nn.Linear
    relu = next(n for n in gm.graph.nodes if n.name.startswith("relu"))
    assert "test_backend_contract.py" in relu.meta["stack_trace"] and "torch.relu(self.lin(x))" in relu.meta["stack_trace"]
    assert sorted(gm.meta["dynamo_flat_name_to_original_fqn"].values()) == ["block.lin.bias", "block.lin.weight"]


def test_a_backend_grouping_ops_by_module_path():
    """A backend that reads nn_module_stack to group the ops of each block (as partitioners
    and profilers do) finds every block's ops under its path."""
    groups = {}

    def backend(gm, example_inputs):
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.meta.get("nn_module_stack"):
                path = list(n.meta["nn_module_stack"].values())[0][0]
                groups.setdefault(path, []).append(n.name)
        return gm.forward

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
    pydynamo.reset()
    m = Two()
    x = torch.randn(2, 4)
    torch.testing.assert_close(pydynamo.optimize(backend)(m)(x), m(x))
    assert len(groups) == 2 and all(len(v) == 3 for v in groups.values())


class SplitterBackend:
    """A Thunder-style splitter (ThunderFX's does this; lightning-thunder itself does not import
    beside torch 2.13): ``torch.fx.passes.split_module`` cuts the graph at each activation and
    each piece is compiled on its own. split_module threads every free symbol of a value crossing
    pieces into the piece as an input, looked up among the graph's SymInt placeholders: a symbol
    without one is a KeyError, and the splitter would fall back to a static compile per size."""

    def __init__(self):
        self.graphs, self.pieces = 0, []

    def __call__(self, gm, example_inputs):
        from torch.fx.passes.split_module import split_module
        self.graphs += 1
        part = [0]

        def callback(node):
            if node.op == "call_function" and node.target in (torch.relu, torch.nn.functional.relu):
                part[0] += 1
            return part[0]
        split = split_module(gm, None, callback, keep_original_order=True, keep_original_node_name=True)
        self.pieces.append([n for n, _ in split.named_children()])
        return split


def test_a_thunder_style_splitter_with_changing_sizes():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 4))

    def f(x):
        h = mlp(x)
        return h.reshape(x.size(0), -1, 2).sum(1) * x.size(0)
    backend = SplitterBackend()
    pydynamo.reset()
    compiled = pydynamo.optimize(backend)(f)
    for n in (2, 3, 5, 7, 11):
        x = torch.randn(n, 8)
        torch.testing.assert_close(compiled(x), f(x))
    assert backend.graphs == 2  # static, then one recompile with symbolic sizes, then none
    assert all(len(p) == 3 for p in backend.pieces)


def test_inductors_compile_fx_called_directly_as_a_user_backend():
    """torch._inductor.compile_fx as the backend itself (no pydynamo wrapper): it reads the
    tracing context, the SymInt placeholders and their example SymInts."""
    from torch._inductor.compile_fx import compile_fx
    calls = []

    def backend(gm, example_inputs):
        calls.append([type(a).__name__ for a in example_inputs])
        return compile_fx(gm, example_inputs)

    def f(x):
        return (x.sin() * x.size(0)).sum(-1)
    pydynamo.reset()
    compiled = pydynamo.optimize(backend)(f)
    for n in (3, 5, 8):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), f(x))
    assert calls == [["Tensor"], ["SymInt", "Tensor"]]


def test_a_torch_function_subclass_keeps_its_sizes_in_the_graph():
    """A ``__torch_function__`` subclass may answer ``size()`` otherwise than its C sizes: its
    symbols are not read by the generated code (no SymInt placeholder for them), and results
    equal eager's at new sizes."""
    class Odd(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs or {})

    def f(x):
        return (x * x.size(0)).sum(0)
    rec = Shapes()
    pydynamo.reset()
    compiled = pydynamo.optimize(rec)(f)
    for n in (3, 5, 7):
        x = torch.randn(n, 4).as_subclass(Odd)
        torch.testing.assert_close(compiled(x).as_subclass(torch.Tensor), f(x).as_subclass(torch.Tensor))
    assert all("SymInt" not in g["placeholders"] for g in rec.graphs)
