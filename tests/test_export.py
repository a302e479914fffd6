"""pydynamo.export: one whole graph of a function or module, called like it, as torch._dynamo.export;
ATen graphs; torch.export.ExportedProgram round trips through save/load."""
import io
import math
import operator
import os
import tempfile

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.export import Dim

import pydynamo
from pydynamo.exc import DataDependentError, Unsupported
from pydynamo.export import ExportError
from pydynamo.shapes import ConstraintViolationError


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.layers = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 16, 2))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class GPTBlock(nn.Module):
    def __init__(self, d=32, heads=4, block=16):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = [t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class DictModel(nn.Module):
    """A dict input, a tuple output (with a nested dict and a Python int)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 4)

    def forward(self, inputs):
        h = torch.tanh(self.enc(inputs["x"])) * inputs["mask"]
        return h.sum(-1), {"hidden": h, "first": inputs["x"][:, 0]}, 7


def _only_aten(gm):
    """Every call of the graph is an ATen op (or operator.getitem / size arithmetic, as make_fx gives)."""
    for node in gm.graph.nodes:
        if node.op == "call_function":
            assert isinstance(node.target, torch._ops.OpOverload) or node.target.__module__ == "_operator", node.target
        assert node.op not in ("call_method", "call_module"), node


def _save_load(ep):
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf)


def _flat_call(gm, *leaves):
    return torch.fx.Interpreter(gm).run(*leaves, enable_io_processing=False)


def test_resnet_round_trip():
    torch.manual_seed(0)
    model = ResNet().eval()
    gm, guards = pydynamo.export(model)(torch.randn(2, 3, 16, 16))
    for batch in (2, 5):  # sizes are symbolic by default: another batch size is the same graph
        x = torch.randn(batch, 3, 16, 16)
        assert guards.check(x)
        assert torch.equal(gm(x), model(x))
    assert list(gm.state_dict()) == list(model.state_dict())  # parameters and buffers by their own names
    assert not [n for n in gm.graph.nodes if n.op == "placeholder" and n.name != "arg0"]  # one input: x
    assert guards.first_failure(torch.randn(2, 4, 16, 16)) is not None  # 4 channels: not this graph
    ep = pydynamo.export(model)(torch.randn(2, 3, 16, 16)).to_exported_program()
    x = torch.randn(3, 3, 16, 16)
    torch.testing.assert_close(_save_load(ep).module()(x), model(x))


def test_gpt_block_round_trip_aten_and_exported_program():
    torch.manual_seed(0)
    model = GPTBlock().eval()
    example = torch.randn(2, 8, 32)
    result = pydynamo.export(model)(example)
    aten = pydynamo.export(model, aten_graph=True)(example)
    _only_aten(aten.graph_module)
    ep = result.to_exported_program()
    loaded = _save_load(ep)
    for shape in ((2, 8, 32), (4, 8, 32), (3, 12, 32)):
        x = torch.randn(*shape)
        expected = model(x)
        assert torch.equal(result.graph_module(x), expected)
        torch.testing.assert_close(aten.graph_module(x), expected)
        torch.testing.assert_close(loaded.module()(x), expected)
    # T beyond the causal mask's 16 rows specializes nothing: the guard says where the graph stops
    assert not result.guards.check(torch.randn(2, 20, 32))


def test_dict_input_tuple_output():
    torch.manual_seed(0)
    model = DictModel()
    inputs = {"x": torch.randn(3, 6), "mask": torch.ones(3, 4)}
    gm, guards = pydynamo.export(model)(inputs)
    new = {"x": torch.randn(3, 6), "mask": (torch.rand(3, 4) > 0.5).float()}
    got, expected = gm(new), model(new)
    assert type(got) is tuple and type(got[1]) is dict and got[2] == 7
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1]["hidden"], expected[1]["hidden"])
    assert torch.equal(got[1]["first"], expected[1]["first"])
    # the graph itself: flat leaves in, flat leaves out
    flat = _flat_call(gm, new["x"], new["mask"])
    assert len(flat) == 4 and flat[3] == 7 and torch.equal(flat[0], expected[0])
    ep = pydynamo.exported_program(model, (inputs,))
    out = _save_load(ep).module()(new)
    torch.testing.assert_close(out[1]["hidden"], expected[1]["hidden"])
    assert out[2] == 7


def test_function_with_kwargs():
    def fn(x, w, *, bias, scale=2.0):
        return {"out": torch.relu(x @ w + bias) * scale}, [x.sum()]

    x, w, b = torch.randn(4, 3), torch.randn(3, 5), torch.randn(5)
    gm, _ = pydynamo.export(fn)(x, w, bias=b)
    assert [n.name for n in gm.graph.nodes if n.op == "placeholder"] == ["arg0", "arg1", "arg2"]
    x2, w2, b2 = torch.randn(6, 3), torch.randn(3, 5), torch.randn(5)
    got, expected = gm(x2, w2, bias=b2), fn(x2, w2, bias=b2)
    assert torch.equal(got[0]["out"], expected[0]["out"]) and torch.equal(got[1][0], expected[1][0])
    assert len(_flat_call(gm, x2, w2, b2)) == 2
    ep = pydynamo.export(fn)(x, w, bias=b).to_exported_program()
    got = _save_load(ep).module()(x2, w2, bias=b2)
    torch.testing.assert_close(got[0]["out"], expected[0]["out"])


def test_aten_graph_has_only_aten_ops_and_matches():
    model = ResNet().eval()
    x = torch.randn(2, 3, 8, 8)
    gm, _ = pydynamo.export(model, aten_graph=True)(x)
    _only_aten(gm)
    assert any(n.target is torch.ops.aten.convolution.default for n in gm.graph.nodes)
    torch.testing.assert_close(gm(x), model(x))
    decomposed, _ = pydynamo.export(F.gelu, aten_graph=True,
                                    decomposition_table=torch._decomp.get_decompositions([torch.ops.aten.gelu]))(x)
    assert torch.ops.aten.gelu.default not in {n.target for n in decomposed.graph.nodes}
    torch.testing.assert_close(decomposed(x), F.gelu(x))
    with pytest.raises(AssertionError):
        pydynamo.export(F.gelu, pre_dispatch=True)(x)


def test_graph_break_is_an_error_with_location():
    def fn(x):
        y = x * 2
        if y.sum() > 0:  # a branch on a tensor's value
            return y
        return -y

    line = fn.__code__.co_firstlineno + 2
    with pytest.raises(DataDependentError) as info:
        pydynamo.export(fn)(torch.ones(3))
    assert info.value.location == f"{__file__}:{line}"
    assert f"{__file__}:{line}" in str(info.value) and "pydynamo/export.py" not in str(info.value)

    def printing(x):
        print("side effect")
        return x + 1

    with pytest.raises(Unsupported, match="print"):
        pydynamo.export(printing)(torch.ones(3))


def test_exported_program_save_load_temp_file():
    model = GPTBlock().eval()
    ep = pydynamo.export(model)(torch.randn(2, 8, 32)).to_exported_program()
    fd, path = tempfile.mkstemp(suffix=".pt2")
    os.close(fd)
    try:
        torch.export.save(ep, path)
        loaded = torch.export.load(path)
    finally:
        os.remove(path)
    x = torch.randn(5, 8, 32)
    torch.testing.assert_close(loaded.module()(x), model(x))
    assert set(loaded.state_dict) == set(model.state_dict())


def test_dynamic_shapes_dim():
    def fn(a, b):
        return a @ b

    a, b = torch.randn(4, 3), torch.randn(3, 5)
    result = pydynamo.export(fn, assume_static_by_default=True,
                             dynamic_shapes={"a": {0: Dim("n")}, "b": None})(a, b)
    a2 = torch.randn(9, 3)
    assert result.guards.check(a2, b) and not result.guards.check(a, torch.randn(3, 6))
    assert torch.equal(result.graph_module(a2, b), fn(a2, b))
    ep = result.to_exported_program()
    assert len(ep.range_constraints) == 1
    torch.testing.assert_close(_save_load(ep).module()(a2, b), fn(a2, b))
    with pytest.raises(ConstraintViolationError, match=r"L\['a'\]\.size\(\)\[0\]"):
        pydynamo.export(lambda a: a.view(2, 2), dynamic_shapes=({0: Dim("n")},))(torch.randn(4))


def test_static_tracing_mode_guards_sizes():
    gm, guards = pydynamo.export(lambda x: x * 2, tracing_mode="real")(torch.randn(4))
    assert guards.check(torch.randn(4)) and not guards.check(torch.randn(5))
    gm, guards = pydynamo.export(lambda x: x * 2)(torch.randn(4))
    assert guards.check(torch.randn(5))
    assert any("symbolic" in g or "*" in g for g in guards)


TABLE = torch.arange(3.0)


def _uses_global(x):
    return x + TABLE


def test_global_tensor_becomes_a_constant():
    global TABLE
    gm, guards = pydynamo.export(_uses_global)(torch.ones(3))
    assert [n.target for n in gm.graph.nodes if n.op == "get_attr"] == ["_const_TABLE"]
    assert "_const_TABLE" not in gm.state_dict()  # a constant, not state
    assert any("G['TABLE']" in g for g in guards)
    old, TABLE = TABLE, torch.zeros(3)
    try:
        assert torch.equal(gm(torch.ones(3)), torch.ones(3) + old)  # frozen at export
        assert not guards.check(torch.ones(3))
    finally:
        TABLE = old


def test_python_side_effects_are_refused():
    seen = []

    def fn(x):
        seen.append(x)
        return x + 1

    with pytest.raises(ExportError, match="contents of"):
        pydynamo.export(fn)(torch.ones(2))
    assert seen == []

    class Counter(nn.Module):
        def forward(self, x):
            self.calls = getattr(self, "calls", 0) + 1
            return x * 2

    with pytest.raises(ExportError, match=r"L\['self'\]\.calls"):
        pydynamo.export(Counter())(torch.ones(2))


def test_refused_arguments_and_inputs():
    class Box:
        t = torch.ones(2)

    with pytest.raises(ExportError, match="Box"):
        pydynamo.export(lambda b, x: b.t + x)(Box(), torch.ones(2))


def test_aliased_leaves_stay_distinct_inputs():
    def fn(a, b):
        a.add_(1)
        return b * 2

    x = torch.ones(3)
    gm, guards = pydynamo.export(fn)(x.clone(), x.clone())
    p, q = torch.zeros(3), torch.ones(3)
    assert torch.equal(gm(p, q), torch.full((3,), 2.0)) and torch.equal(p, torch.ones(3))
    same = torch.ones(3)
    gm, guards = pydynamo.export(fn)(same, same)
    assert "alias" in guards.first_failure(torch.zeros(3), torch.zeros(3))
    p, q = torch.zeros(3), torch.ones(3)
    assert torch.equal(gm(p, q), fn(torch.zeros(3), torch.ones(3)))  # each leaf is its own input
    with pytest.raises(ExportError, match="several positions"):  # which of the two is returned?
        pydynamo.export(lambda a, b: (a * 2, b))(same, same)


def test_outputs_that_are_inputs_parameters_and_constants():
    lin = nn.Linear(3, 3)

    def fn(x, n):
        return x, n, None, x.view(-1), lin.weight

    x = torch.randn(2, 3)
    gm, _ = pydynamo.export(fn)(x, 4)
    x2 = torch.randn(2, 3)
    out = gm(x2, 4)
    assert out[0] is x2 and out[1] == 4 and out[2] is None and torch.equal(out[3], x2.view(-1))
    assert out[4] is gm.get_parameter("_const_lin_weight") and out[4] is lin.weight
    assert not [n for n in gm.graph.nodes if n.op == "call_function" and n.target is operator.add]


def test_module_hooks_are_captured_and_buffers_updated():
    lin = nn.Linear(3, 3)
    handle = lin.register_forward_hook(lambda mod, inp, out: out * 10)
    x = torch.randn(2, 3)
    gm, _ = pydynamo.export(lin)(x)
    assert torch.equal(gm(x), lin(x))
    handle.remove()

    bn = nn.BatchNorm1d(3).train()
    ref = nn.BatchNorm1d(3).train()
    gm, _ = pydynamo.export(bn)(torch.randn(8, 3))
    ref.load_state_dict(bn.state_dict())
    x = torch.randn(8, 3)
    assert torch.equal(gm(x), ref(x))
    assert torch.equal(bn.running_mean, ref.running_mean)  # the graph module shares fn's buffers
    assert bn.num_batches_tracked == ref.num_batches_tracked


def test_export_leaves_nothing_behind():
    """Export's compile runs on fake outputs: nothing of it may serve a later call."""
    def fn(x):
        return torch.sin(x) + 1

    x = torch.randn(4)
    pydynamo.export(fn)(x)
    import sys
    export_globals = vars(sys.modules["pydynamo.export"])  # (pydynamo.export is the function)
    assert "_call" in export_globals and not [k for k in export_globals if k.startswith("__compiled_fn")]
    got = pydynamo.optimize("eager")(fn)(x)
    assert type(got) is torch.Tensor and torch.equal(got, fn(x))
    model = GPTBlock().eval()
    compiled = pydynamo.compile(model, backend="eager")
    pydynamo.export(compiled)(torch.randn(2, 8, 32))  # the OptimizedModule's original is exported
    y = torch.randn(2, 8, 32)
    assert torch.equal(compiled(y), model(y))


def test_deprecated_call_form_and_unsupported_options():
    with pytest.warns(FutureWarning):
        gm, _ = pydynamo.export(torch.sin, torch.ones(2))
    assert torch.equal(gm(torch.zeros(2)), torch.zeros(2))
    with pytest.raises(NotImplementedError):
        pydynamo.export(torch.sin, same_signature=False)


def test_same_graph_as_torch_dynamo_export():
    """torch._dynamo.export captures these in one graph too; both graphs compute the same."""
    import torch._dynamo
    torch.manual_seed(0)
    model = GPTBlock().eval()
    x = torch.randn(2, 8, 32)
    try:
        theirs, _ = torch._dynamo.export(model)(x)
    finally:
        torch._dynamo.reset()
    ours, _ = pydynamo.export(model)(x)
    y = torch.randn(3, 8, 32)
    assert torch.equal(ours(y), theirs(y))

    def calls(gm):  # the ATen ops, as a multiset (size reads aside: where each graph reads them differs)
        targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        return sorted(t for t in targets if "sym_size" not in t)

    theirs_aten, _ = torch._dynamo.export(model, aten_graph=True)(x)
    torch._dynamo.reset()
    ours_aten, _ = pydynamo.export(model, aten_graph=True)(x)
    assert calls(ours_aten) == calls(theirs_aten)


def test_hf_bert_round_trip():
    """A transformers model: a ModelOutput result (a pytree node), an output collector that sets
    a global's attributes and sets them back (allowed), the ExportedProgram through save/load."""
    pytest.importorskip("transformers")
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    import hf_models
    make, inputs, _ = hf_models.models()["bert"]
    torch.manual_seed(0)
    model = make().eval()
    args, kwargs = inputs(model, "cpu")
    with torch.no_grad():
        result = pydynamo.export(model)(*args, **kwargs)
        expected = model(*args, **kwargs)
        got = result.graph_module(*args, **kwargs)
        assert type(got) is type(expected)
        assert hf_models.max_diff(got, expected) == 0
        loaded = _save_load(result.to_exported_program())
        assert hf_models.max_diff(loaded.module()(*args, **kwargs), expected) <= 1e-5
