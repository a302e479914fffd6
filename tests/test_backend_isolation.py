"""Compilers never run under the hook (DESIGN.md, invariant 6): a training step that calls
``loss.backward()`` inside the optimized function, with every backend, including a user backend
that calls AOTAutograd itself. AOTAutograd compiles the backward lazily, at the first backward,
from the autograd engine; nothing it or the backend runs there may be compiled by pydynamo.
Each test matches eager (loss, every gradient, BatchNorm's buffers) over steps that recompile,
and fails if pydynamo tried to compile any code but the user's step function and its resumes."""
import copy
import dataclasses
import os
import threading

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import pydynamo  # noqa: E402
from pydynamo import convert_frame  # noqa: E402

try:
    import triton  # noqa: F401
    HAVE_TRITON = True
except ImportError:
    HAVE_TRITON = False


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def step(model, x):
    loss = model(x).square().mean()
    loss.backward()
    return loss


@pytest.fixture
def compile_attempts(monkeypatch):
    """Every code pydynamo tried to compile (a trace started), in order."""
    attempts = []
    original = convert_frame.ConvertFrame._compile

    def spy(self, frame, code):
        attempts.append(code)
        return original(self, frame, code)

    monkeypatch.setattr(convert_frame.ConvertFrame, "_compile", spy)
    yield attempts
    pydynamo.reset()


def assert_only_user_code(attempts, name="step", compiles=1):
    """Only ``name`` and its resume functions were compiled, ``name`` at least ``compiles`` times."""
    assert sum(c.co_name == name for c in attempts) >= compiles, [c.co_qualname for c in attempts]
    others = [f"{c.co_filename}:{c.co_firstlineno} {c.co_qualname}" for c in attempts
              if c.co_filename != __file__ or not (c.co_name == name or c.co_name.startswith(f"resume_in_{name}"))]
    assert not others, f"pydynamo tried to compile code that is not the user's step: {others}"


def run_steps(backend, atol=1e-5, batches=(3, 3, 5)):
    """Steps of the optimized ``step`` and of eager ``step`` on a copy of the model; the last
    batch size differs (a recompile). Returns nothing; asserts they match."""
    ref = make_model()
    model = copy.deepcopy(ref)
    opt = pydynamo.optimize(backend)(step)
    exact = backend == "eager"
    for i, batch in enumerate(batches):
        x = torch.randn(batch, 4, generator=torch.Generator().manual_seed(i))
        expected = step(ref, x)
        got = opt(model, x)
        close = torch.equal if exact else (lambda a, b: torch.allclose(a, b, atol=atol, rtol=1e-4))
        assert close(got.detach(), expected.detach()), (i, got, expected)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert p.grad is not None and close(p.grad, q.grad), (i, name, p.grad, q.grad)
        for (name, b), c in zip(model.named_buffers(), ref.buffers()):
            assert close(b, c), (i, name, b, c)
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
    assert int(model[1].num_batches_tracked) == len(batches)


@dataclasses.dataclass
class CompileRecord:  # its __init__ is exec'd code ("<string>"), as Inductor's IR dataclasses are
    kind: str
    n_nodes: int


def count_nodes(gm):
    return sum(1 for _ in gm.graph.nodes)


def make_user_aot_backend(records):
    """A torch.compile-style user backend that calls AOTAutograd itself, with forward and
    backward compilers written in this file (the backward one runs at the first backward)."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    def fw_compiler(gm, example_inputs):
        records.append(CompileRecord("fw", count_nodes(gm)))
        return make_boxed_func(gm.forward)

    def bw_compiler(gm, example_inputs):
        records.append(CompileRecord("bw", count_nodes(gm)))
        return make_boxed_func(gm.forward)

    def user_backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler, bw_compiler=bw_compiler)
    return user_backend


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_training_step_with_backward_inside(backend, compile_attempts):
    run_steps(backend)
    assert_only_user_code(compile_attempts, compiles=2)


def test_training_step_user_aot_backend(compile_attempts):
    records = []
    run_steps(make_user_aot_backend(records))
    assert_only_user_code(compile_attempts, compiles=2)
    kinds = [r.kind for r in records]
    assert kinds.count("fw") >= 2 and kinds.count("bw") >= 2, kinds  # a recompile, lazy backwards


def test_training_step_inductor(compile_attempts):
    run_steps("inductor", batches=(3, 5))  # C++ compiles are slow: one recompile, no third step
    assert_only_user_code(compile_attempts, compiles=2)


@pytest.mark.skipif(not HAVE_TRITON, reason="needs triton")
def test_training_step_triton(compile_attempts, monkeypatch):
    monkeypatch.setenv("PYDYNAMO_TRITON_STRICT", "1")  # a graph it cannot generate fails the test
    run_steps("triton")
    assert_only_user_code(compile_attempts, compiles=2)


def test_user_backward_hooks_run_eagerly_in_backward(compile_attempts):
    """User code that the autograd engine calls (a tensor hook, an autograd.Function.backward,
    a helper they call) runs, eagerly, and is not compiled; the forward still is."""
    seen = []

    def double(g):
        seen.append("hook")
        return g * 2

    def scale(g):
        return g * 3

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            seen.append("Function.backward")
            (x,) = ctx.saved_tensors
            return scale(g) * x ** 2

    def step(w, x):
        y = (w * x).sin()
        y.register_hook(double)
        loss = Cube.apply(y).sum()
        loss.backward()
        return loss

    w = torch.randn(5, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    x = torch.randn(5)
    expected = step(w_ref, x)
    seen.clear()
    got = pydynamo.optimize("aot_eager")(step)(w, x)
    assert torch.allclose(got, expected) and torch.allclose(w.grad, w_ref.grad)
    assert seen == ["Function.backward", "hook"]
    # the forward's frames compile (Cube.forward too, if apply breaks the graph); no backward one
    names = {c.co_name for c in compile_attempts}
    assert "step" in names and not names & {"double", "scale", "backward"}, names
    assert all(c.co_filename == __file__ for c in compile_attempts)


def step_backward_on_a_thread(model, x):
    loss = model(x).square().mean()
    t = threading.Thread(target=loss.backward)
    t.start()
    t.join()
    return loss


def test_backward_on_another_thread(compile_attempts):
    """The hook is per thread: a backward (and its lazy compile) run by a thread that never
    turned it on, as the autograd engine's CUDA device threads, is not intercepted at all,
    while the thread that waits for it has the hook on."""
    records = []
    model, ref = make_model(), make_model()
    opt = pydynamo.optimize(make_user_aot_backend(records))(step_backward_on_a_thread)
    x = torch.randn(3, 4)
    loss = opt(model, x)
    expected = step_backward_on_a_thread(ref, x)
    assert torch.allclose(loss, expected)
    assert [r.kind for r in records] == ["fw", "bw"]
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.grad is not None and torch.allclose(p.grad, q.grad, atol=1e-6)
    assert_only_user_code(compile_attempts, "step_backward_on_a_thread")
