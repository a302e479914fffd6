"""The bundled triton backend on CUDA (run on the GPU machine): results, and the direct launch
path of later calls (runtime.Launch) against misaligned inputs."""
import pytest
import torch

import pydynamo

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _f(x, w):
    return torch.relu(torch.nn.functional.layer_norm(x, (x.size(-1),), w)) + x * 2


def test_later_calls_launch_directly_and_stay_correct(monkeypatch):
    from triton.runtime.jit import JITFunction
    jit_runs = []
    orig_run = JITFunction.run

    def counting_run(self, *args, **kwargs):
        jit_runs.append(self)
        return orig_run(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "run", counting_run)
    pydynamo.reset()
    opt = pydynamo.optimize("triton", dynamic=False)(_f)
    w = torch.randn(256, device="cuda")
    flat = torch.randn(64 * 256 + 1, device="cuda")
    x = flat[:-1].view(64, 256)
    torch.testing.assert_close(opt(x, w), _f(x, w))
    first = len(jit_runs)  # (0 where the kernel cache and the static launcher serve the first call)
    for _ in range(3):
        x = torch.randn(64, 256, device="cuda")
        torch.testing.assert_close(opt(x, w), _f(x, w))
    assert len(jit_runs) == first  # later calls launched the compiled kernels directly
    # same sizes and strides, but the data starts 4 bytes past a 16-byte boundary: the kernel
    # was specialized on aligned pointers, so this launch must go through the JIT again
    x = flat[1:].view(64, 256)
    assert x.data_ptr() % 16 != 0
    torch.testing.assert_close(opt(x, w), _f(x, w))
    assert len(jit_runs) > first
    # a launch hook (a profiler's) sees every launch: the JIT path again
    from triton import knobs
    seen = []
    hook = lambda metadata: seen.append(metadata)  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        x = torch.randn(64, 256, device="cuda")
        torch.testing.assert_close(opt(x, w), _f(x, w))
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert seen


def test_training_step_matches_eager():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                            torch.nn.Linear(256, 10)).cuda()
    ref = [p.detach().clone() for p in m.parameters()]
    x, y = torch.randn(32, 128, device="cuda"), torch.randint(0, 10, (32,), device="cuda")
    opt = pydynamo.optimize("triton")(m)
    for compiled in (False, True, True):
        for p, r in zip(m.parameters(), ref):
            p.grad = None
        loss = torch.nn.functional.cross_entropy((opt if compiled else m)(x), y)
        loss.backward()
        grads = [p.grad.clone() for p in m.parameters()]
        if not compiled:
            want_loss, want = loss.detach(), grads
        else:
            torch.testing.assert_close(loss.detach(), want_loss, rtol=1e-5, atol=1e-5)
            for g, e in zip(grads, want):
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def test_cnn_training_step_with_pooling_gradients_matches_eager():
    """Conv, batch norm, ReLU, max-pool and avg-pool: their backwards are triton kernels (the
    pooling ones gather from the windows over each input position), on the GPU."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(3, 2, 1), torch.nn.Conv2d(16, 16, 3, padding=1),
                            torch.nn.AvgPool2d(2, ceil_mode=True), torch.nn.Flatten(),
                            torch.nn.Linear(16 * 8 * 8, 10)).cuda()
    x, y = torch.randn(8, 3, 31, 31, device="cuda"), torch.randint(0, 10, (8,), device="cuda")
    want = torch.nn.functional.cross_entropy(m(x), y)
    want.backward()
    want_grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    loss = torch.nn.functional.cross_entropy(pydynamo.optimize("triton")(m)(x), y)
    loss.backward()
    torch.testing.assert_close(loss.detach(), want.detach(), rtol=1e-4, atol=1e-4)
    for p, e in zip(m.parameters(), want_grads):
        torch.testing.assert_close(p.grad, e, rtol=1e-3, atol=1e-4)


def test_kernels_compile_in_parallel_before_the_first_launch(monkeypatch):
    from triton.runtime.jit import JITFunction
    compiles = []
    orig = JITFunction._do_compile

    def recording(self, *args, **kwargs):
        compiles.append(args[-1] if args else kwargs.get("warmup"))  # the warmup flag
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "_do_compile", recording)
    pydynamo.reset()

    def g(x, y):  # several kernels: a reduction, a matmul between, pointwise after
        a = torch.softmax(x * 3.0, dim=-1)
        return torch.tanh(a @ y) + a.sum(-1, keepdim=True) * 1.5

    opt = pydynamo.optimize("triton")(g)
    x, y = torch.randn(128, 96, device="cuda"), torch.randn(96, 96, device="cuda")
    torch.testing.assert_close(opt(x, y), g(x, y))
    assert all(compiles), compiles  # whatever was compiled was compiled ahead, by warmup


@pytest.mark.parametrize("static", ["1", "0"])
def test_launchers_are_built_ahead_in_worker_threads_or_not_at_all(monkeypatch, tmp_path, static):
    """With torch's static launcher, no C launcher is built at all; without it, Triton's C
    launchers (a gcc build per argument-list shape) are built by precompile's threads, beside the
    kernels' compiles, and not by each kernel's first launch."""
    import threading

    from pydynamo.backends.triton.runtime import static_launcher
    monkeypatch.setenv("PYDYNAMO_TRITON_STATIC_LAUNCH", static)

    import triton.runtime.build as build
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # nothing built yet
    real = build._build
    builds = []

    def recording(name, *args, **kwargs):
        builds.append((name, threading.current_thread() is threading.main_thread()))
        return real(name, *args, **kwargs)

    monkeypatch.setattr(build, "_build", recording)
    pydynamo.reset()

    def g(x, y):
        a = torch.softmax(x * 3.0, dim=-1)
        return torch.tanh(a @ y) + a.sum(-1, keepdim=True) * 1.5

    opt = pydynamo.optimize("triton")(g)
    x, y = torch.randn(64, 80, device="cuda"), torch.randn(80, 80, device="cuda")
    torch.testing.assert_close(opt(x, y), g(x, y))
    launchers = [in_main for name, in_main in builds if name == "__triton_launcher"]
    if static_launcher():
        assert not launchers, builds
    else:
        assert launchers and not any(launchers), builds
    x, y = torch.randn(64, 80, device="cuda"), torch.randn(80, 80, device="cuda")
    torch.testing.assert_close(opt(x, y), g(x, y))  # later calls too


def test_an_out_of_range_index_fails_like_eager():
    """An embedding index out of range is a CUDA device assert (eager's kernels assert too).
    The CUDA context is unusable afterwards, so it runs in a child process."""
    import subprocess
    import sys
    code = """if 1:
        import torch, pydynamo
        import torch.nn.functional as F
        w = torch.randn(10, 4, device="cuda")
        f = pydynamo.optimize("triton")(lambda i: F.embedding(i, w) * 2)
        good = torch.tensor([[1, 2], [3, 9]], device="cuda")
        torch.testing.assert_close(f(good), F.embedding(good, w) * 2)
        print("good ok", flush=True)
        f(torch.tensor([[1, 2], [3, 10]], device="cuda"))
        torch.cuda.synchronize()
        print("no error")
    """
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "good ok" in p.stdout, p.stderr[-3000:]
    assert "no error" not in p.stdout and p.returncode != 0
    assert "index out of bounds" in p.stderr or "device-side assert" in p.stderr, p.stderr[-3000:]


def test_kernels_compile_in_worker_processes_once_they_are_ready(monkeypatch, tmp_path):
    """With compile workers ready, the parent compiles nothing itself: its warmup of each kernel
    finds what a worker put in Triton's disk cache."""
    import time

    import triton.compiler.compiler as tc

    from pydynamo.backends.triton import compile_worker
    monkeypatch.setenv("PYDYNAMO_TRITON_COMPILE_WORKERS", "4")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path / "pydynamo"))
    from triton.runtime.driver import driver

    from pydynamo.backends.triton import runtime
    monkeypatch.setattr(compile_worker, "_workers", None)
    monkeypatch.setattr(runtime, "_modules", {})  # no module (nor kernel) compiled before
    w = compile_worker.workers(driver.active.get_current_target())
    start = time.time()
    while w.ready < 4 and time.time() - start < 120:
        time.sleep(0.05)
    assert w.ready == 4
    made_here = []
    orig = tc.ASTSource.make_ir

    def recording(self, *args, **kwargs):
        made_here.append(self.fn.__name__)
        return orig(self, *args, **kwargs)
    monkeypatch.setattr(tc.ASTSource, "make_ir", recording)
    pydynamo.reset()

    def g(x, y):
        a = torch.softmax(x * 3.0, dim=-1)
        return torch.tanh(a @ y) + a.sum(-1, keepdim=True) * 1.5 + torch.erf(x).mean()

    opt = pydynamo.optimize("triton")(g)
    x, y = torch.randn(64, 72, device="cuda"), torch.randn(72, 72, device="cuda")
    torch.testing.assert_close(opt(x, y), g(x, y))
    assert not made_here, made_here
    x, y = torch.randn(64, 72, device="cuda"), torch.randn(72, 72, device="cuda")
    torch.testing.assert_close(opt(x, y), g(x, y))
