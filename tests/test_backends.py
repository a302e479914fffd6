"""Backends: the registry, aot_eager training parity with eager, inductor on CPU, failures."""
import copy
import logging

import pytest
import torch

import pydynamo
from pydynamo import config
from pydynamo.backends import _BACKENDS
from pydynamo.exc import BackendCompilerFailed
from pydynamo.testing import CompileCounter


def fn(x, y):
    return torch.sin(x) * y + 1


def test_registry_forms_and_unknown_names():
    def b1(gm, ex):
        return gm.forward

    try:
        assert pydynamo.register_backend(b1) is b1
        pydynamo.register_backend("b2")(b1)
        pydynamo.register_backend(name="b3")(b1)
        pydynamo.register_backend(b1, "b4")
        assert {"b1", "b2", "b3", "b4", "eager", "aot_eager", "inductor"} <= set(pydynamo.list_backends())
        with pytest.raises(ValueError, match=r"unknown pydynamo backend 'nope'; known backends: .*aot_eager.*eager"):
            pydynamo.optimize("nope")
        with pytest.raises(TypeError, match="must be callable"):
            pydynamo.register_backend(3, "x")
    finally:
        for n in ("b1", "b2", "b3", "b4"):
            _BACKENDS.pop(n, None)


def test_entry_point_backends_are_found(monkeypatch, tmp_path):
    import pydynamo.backends as reg

    class EP:
        name, group = "from_entry_point", reg.ENTRY_POINT_GROUP

        def load(self):
            return lambda gm, ex: gm.forward

    monkeypatch.setattr(reg, "entry_points", lambda group: [EP()] if group == reg.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(reg, "_entry_points_loaded", False)
    try:
        assert "from_entry_point" in pydynamo.list_backends()
        opt = pydynamo.optimize("from_entry_point")(fn)
        x = torch.randn(3)
        assert torch.equal(opt(x, 2.0), fn(x, 2.0))
    finally:
        _BACKENDS.pop("from_entry_point", None)


def test_torch_compile_backend_callables_work_unchanged():
    from torch._dynamo.backends.debugging import aot_eager as torch_aot_eager  # a torch.compile backend
    opt = pydynamo.optimize(torch_aot_eager)(fn)
    x = torch.randn(3)
    assert torch.equal(opt(x, 2.0), fn(x, 2.0))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x):
        h = self.drop(torch.relu(self.bn(self.conv(x))))
        return self.fc(h.flatten(1)) * self.scale


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.LayerNorm(12), torch.nn.Linear(12, 2))


@pytest.mark.parametrize("make,shape", [(Net, (2, 3, 8, 8)), (_mlp, (5, 6))])
@pytest.mark.parametrize("input_grad", [False, True])
def test_aot_eager_training_matches_eager(make, shape, input_grad):
    torch.manual_seed(0)
    model = make()
    ref = copy.deepcopy(model)
    cnt = CompileCounter()

    def counting_aot(gm, ex):
        cnt(gm, ex)
        return pydynamo.lookup_backend("aot_eager")(gm, ex)

    compiled = pydynamo.compile(model, backend=counting_aot)
    x = torch.randn(*shape)
    for step in range(2):
        xa, xb = x.clone().requires_grad_(input_grad), x.clone().requires_grad_(input_grad)
        torch.manual_seed(step)
        loss = compiled(xa).pow(2).mean()
        loss.backward()
        torch.manual_seed(step)
        ref_loss = ref(xb).pow(2).mean()
        ref_loss.backward()
        torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7, msg=lambda m: f"{name}: {m}")
        if input_grad:
            torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-6, atol=1e-7)
        for b, rb in zip(model.buffers(), ref.buffers()):
            torch.testing.assert_close(b, rb)  # batch-norm running stats updated alike
    assert cnt.frame_count == 1


def test_inductor_on_cpu_small_graphs():
    def f(x, y):
        return torch.nn.functional.gelu(x @ y + 1).sum(dim=-1)

    from pydynamo import _C
    opt = pydynamo.optimize("inductor")(f)
    x, y = torch.randn(4, 8), torch.randn(8, 3)
    torch.testing.assert_close(opt(x, y), f(x, y))
    before = _C.debug_counters()
    torch.testing.assert_close(opt(x, y), f(x, y))
    after = _C.debug_counters()
    # Inductor's own use of torch._dynamo while compiling did not disturb our hook or cache
    assert after["hits"] == before["hits"] + 1 and after["reinstalls"] == before["reinstalls"]
    mlp = _mlp()
    ref = copy.deepcopy(mlp)
    compiled = pydynamo.compile(mlp, mode="default")
    inp = torch.randn(3, 6)
    loss, ref_loss = compiled(inp).sum(), ref(inp).sum()
    loss.backward(), ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss)
    for p, q in zip(mlp.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def _broken_backend(gm, example_inputs):
    raise RuntimeError("kernel generator exploded")


def test_failing_backend_raises_backend_compiler_failed():
    opt = pydynamo.optimize(_broken_backend)(fn)
    with pytest.raises(BackendCompilerFailed, match="_broken_backend.*kernel generator exploded") as info:
        opt(torch.randn(3), 2.0)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_suppress_errors_runs_eagerly_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(config, "suppress_errors", True)
    opt = pydynamo.optimize(_broken_backend)(fn)
    x = torch.randn(3)
    with caplog.at_level(logging.WARNING, logger="pydynamo.errors"):
        assert torch.equal(opt(x, 2.0), fn(x, 2.0))
    assert "kernel generator exploded" in caplog.text and "runs eagerly" in caplog.text


def test_compiled_graph_runtime_is_never_intercepted():
    from pydynamo import _C

    def runtime_helper(x):  # stands for a backend's Python runtime (launchers, wrappers)
        return x + 0

    def backend_fn(gm, example_inputs):
        return lambda *args: (runtime_helper(gm.forward(*args)[0]),)

    opt = pydynamo.optimize(backend_fn)(fn)
    x = torch.randn(3)
    for _ in range(2):
        assert torch.equal(opt(x, 2.0), fn(x, 2.0))
    assert _C.cache_size(runtime_helper) == 0 and not _C.is_skipped(runtime_helper)  # never seen by the hook


def test_torch_machinery_is_not_put_in_graphs():
    def f(x):
        torch.cuda.synchronize() if torch.cuda.is_available() else torch.utils.checkpoint.detach_variable((x,))
        return x + 1

    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(f)
    x = torch.randn(2)
    assert torch.equal(opt(x), x + 1)
    targets = [getattr(n.target, "__module__", "") or "" for g in cnt.graphs for n in g.graph.nodes]
    assert not [t for t in targets if t.startswith(("torch.utils", "torch.cuda"))]  # ran outside any graph


def test_torchs_in_tree_backend_names_say_how_to_use_them():
    with pytest.raises(ValueError, match=r"'tvm' is one of torch.compile's own backends.*pass the backend's callable itself"):
        pydynamo.lookup_backend("tvm")
