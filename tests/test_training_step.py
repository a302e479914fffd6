"""The training step in graphs (issue 40): ``optimizer.step()`` compiled on its own and inside a
compiled step function, LR schedulers, gradient clipping and ``zero_grad``. Parameters,
optimizer state and losses are compared with eager after 3 steps; graph and compile counts
with torch.compile's on the same programs."""
import functools

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter

OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum_nesterov_wd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                                          weight_decay=0.01),
    "sgd_foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adam_foreach": lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),
    "adam_tensor_lr": lambda p: torch.optim.Adam(p, lr=torch.tensor(0.01)),
    "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True, weight_decay=0.1),
    "adamw_amsgrad": lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5),
}


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


_X = [torch.randn(5, 4, generator=torch.Generator().manual_seed(i)) for i in range(3)]


def _close(a, b):
    # (compiling, torch's optimizers compute step sizes as float32 tensors, eagerly as Python
    # floats: torch.compile's results differ from eager's alike)
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    return a == b


def _same_training(m1, o1, m2, o2):
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert _close(p1, p2)
        s1, s2 = o1.state[p1], o2.state[p2]
        assert set(s1) == set(s2)
        for k in s1:
            assert _close(s1[k], s2[k]), k


def _opt_steps(name, compile_fn):
    m = _model()
    opt = OPTIMIZERS[name](m.parameters())

    def step():
        opt.step()
    f = compile_fn(step)
    for x in _X:
        opt.zero_grad()
        (m(x) ** 2).sum().backward()
        f()
    return m, opt


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_step_in_one_graph(name):
    pydynamo.reset()
    m1, o1 = _opt_steps(name, lambda f: f)
    cnt = CompileCounter()
    m2, o2 = _opt_steps(name, pydynamo.optimize(cnt))
    _same_training(m1, o1, m2, o2)
    # the lazily made state is made for real while tracing the first step: one compile, then
    # hits; but SGD's momentum buffer is a clone of the first gradient, made by the step itself,
    # so its first step compiles apart (torch.compile: the same counts)
    assert cnt.frame_count == (2 if name in ("sgd_momentum_nesterov_wd", "sgd_foreach") else 1)
    explained = pydynamo.explain(lambda: o2.step())()
    assert explained.graph_count == 1 and explained.graph_break_count == 0


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("name", ["sgd_momentum_nesterov_wd", "adamw_foreach", "adam"])
def test_optimizer_step_with_backends(name, backend):
    pydynamo.reset()
    m1, o1 = _opt_steps(name, lambda f: f)
    m2, o2 = _opt_steps(name, pydynamo.optimize(backend))
    _same_training(m1, o1, m2, o2)


_TORCH_CASES = [(None, False), (None, True), ("step", False), ("cosine", True), ("lambda", False),
                ("onecycle", False), ("sequential", False)]


def _torch_frames_here():
    """torch.compile's frame counts for the whole-step programs (run in a child process:
    torch.compile patches the optimizer classes' step for good once it compiled one)."""
    import torch._dynamo
    import torch._dynamo.testing
    out = {}
    for sched_name, clip in _TORCH_CASES:
        torch._dynamo.reset()
        cnt = torch._dynamo.testing.CompileCounter()
        _train(lambda f: torch.compile(f, backend=cnt), sched_name, clip, True)
        out[f"{sched_name}-{clip}"] = cnt.frame_count
    return out


@functools.lru_cache(None)
def _torch_counts():
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import json, sys; sys.path.insert(0, %r); import test_training_step as t; "
            "print(json.dumps(t._torch_frames_here()))" % here)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _torch_frames(sched_name, clip):
    return _torch_counts()[f"{sched_name}-{clip}"]


SCHEDULERS = {
    None: None,
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5),
    "lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (e + 1)),
    "onecycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=10),
    "sequential": lambda o: torch.optim.lr_scheduler.SequentialLR(
        o, [torch.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=1),
            torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)], milestones=[1]),
}


def _train(compile_fn, sched_name, clip, tensor_lr=False, set_to_none=True):
    m = _model()
    lr = torch.tensor(0.01) if tensor_lr else 0.01
    opt = torch.optim.AdamW(m.parameters(), lr=lr, foreach=not tensor_lr)
    make = SCHEDULERS[sched_name]
    sched = make(opt) if make else None

    def step(x):
        loss = (m(x) ** 2).mean()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        if sched is not None:
            sched.step()
        return loss.detach()
    f = compile_fn(step)
    losses = [f(x) for x in _X + _X]
    _train.last = f
    return m, opt, losses


@pytest.mark.parametrize("sched_name,clip", _TORCH_CASES)
def test_whole_training_step(sched_name, clip):
    """The recipe: the LR a tensor, so a scheduler changing it changes no guarded constant."""
    pydynamo.reset()
    m1, o1, l1 = _train(lambda f: f, sched_name, clip, tensor_lr=True)
    cnt = CompileCounter()
    m2, o2, l2 = _train(pydynamo.optimize(cnt), sched_name, clip, tensor_lr=True)
    _same_training(m1, o1, m2, o2)
    assert all(_close(a, b) for a, b in zip(l1, l2))
    torch_frames = _torch_frames(sched_name, clip)
    steps = 2 * len(_X)
    if sched_name in ("cosine", "onecycle"):
        # cosine divides by 1 + cos(step): a float divisor pydynamo guards nonzero only by
        # recompiling with static values; onecycle also cycles the betas (float constants): the
        # scheduler's frame compiles anew per step (torch.compile skips torch's lr_scheduler.py,
        # running the scheduler, and the optimizer step it wraps, eagerly; docs/performance.md)
        assert cnt.frame_count <= torch_frames + 2 + 2 * steps
    elif sched_name is None or sched_name == "sequential":
        assert cnt.frame_count <= torch_frames
    else:
        # + 1: LRScheduler.step() branches on `_step_count == 1`: the scheduler's frame compiles
        # for the first step and for the later ones (torch.compile runs it eagerly, see above)
        assert cnt.frame_count <= torch_frames + 1


@pytest.mark.parametrize("sched_name", ["step", "cosine"])
def test_float_lr_changed_by_a_scheduler(sched_name):
    """A float LR is a constant of the graph (guarded): each new value compiles anew (where
    torch.compile makes floats symbolic), and every step is right."""
    pydynamo.reset()
    m1, o1, l1 = _train(lambda f: f, sched_name, True)
    m2, o2, l2 = _train(pydynamo.optimize("eager"), sched_name, True)
    _same_training(m1, o1, m2, o2)
    assert all(_close(a, b) for a, b in zip(l1, l2))


def test_tensor_lr_with_a_scheduler_does_not_recompile():
    pydynamo.reset()
    m1, o1, l1 = _train(lambda f: f, "step", False, tensor_lr=True)
    cnt = CompileCounter()
    m2, o2, l2 = _train(pydynamo.optimize(cnt), "step", False, tensor_lr=True)
    _same_training(m1, o1, m2, o2)
    frames = cnt.frame_count
    for x in _X:  # more steps, the LR changing at every one: no new compile
        _train.last(x)
    assert cnt.frame_count == frames


def test_zero_grad_keeping_tensors():
    pydynamo.reset()
    m1, o1, l1 = _train(lambda f: f, None, False, set_to_none=False)
    m2, o2, l2 = _train(pydynamo.optimize("eager"), None, False, set_to_none=False)
    _same_training(m1, o1, m2, o2)
    assert all(_close(a, b) for a, b in zip(l1, l2))


def test_clip_grad_norm_in_one_graph():
    m = _model()
    (m(_X[0]) ** 2).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]

    def clip():
        return torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
    expected = clip()
    clipped = [p.grad.clone() for p in m.parameters()]
    for p, g in zip(m.parameters(), grads):
        p.grad = g.clone()
    pydynamo.reset()
    got = pydynamo.optimize("eager", fullgraph=True)(clip)()
    assert _close(got, expected)
    assert all(_close(p.grad, c) for p, c in zip(m.parameters(), clipped))


def test_another_optimizer_or_a_changed_state_recompiles():
    pydynamo.reset()
    cnt = CompileCounter()
    holder = {}

    def step():
        holder["opt"].step()
    f = pydynamo.optimize(cnt)(step)
    results = []
    for _ in range(2):  # two optimizers over two models: guarded by the parameters' identity
        m = _model()
        holder["opt"] = opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        ref_m = _model()
        ref = torch.optim.SGD(ref_m.parameters(), lr=0.1, momentum=0.9)
        for x in _X:
            for model, o, fn in ((m, opt, f), (ref_m, ref, ref.step)):
                o.zero_grad()
                (model(x) ** 2).sum().backward()
                fn()
        _same_training(ref_m, ref, m, opt)
        results.append(cnt.frame_count)
    assert results[1] > results[0]  # the second optimizer's step compiled anew
    # a state tensor replaced by one of another shape: the guard fails, the new state is used
    p = next(iter(opt.state))
    opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
    before = [q.clone() for q in m.parameters()]
    (m(_X[0]) ** 2).sum().backward()
    f()
    assert not torch.equal(before[0], next(m.parameters()))


def test_optimizer_hooks_are_guarded():
    pydynamo.reset()
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    calls = []
    f = pydynamo.optimize("eager")(lambda: opt.step())
    (m(_X[0]) ** 2).sum().backward()
    f()
    from torch.optim.optimizer import register_optimizer_step_pre_hook
    handle = register_optimizer_step_pre_hook(lambda o, a, k: calls.append(1))
    try:
        f()
        assert calls == [1]  # the global hook table is read by the trace and guarded
    finally:
        handle.remove()


def test_optimizer_step_after_torch_compile_ran_in_the_process():
    """Once torch.compile has run, it wraps every optimizer's _init_group in
    torch._dynamo.disable (its own tracing policy); pydynamo still captures the step whole."""
    torch.compile(lambda t: t + 1, backend="eager")(torch.ones(1))
    assert getattr(torch.optim.Adam._init_group, "_torchdynamo_disable", False)
    pydynamo.reset()
    m1, o1 = _opt_steps("adam_foreach", lambda f: f)
    m2, o2 = _opt_steps("adam_foreach", pydynamo.optimize("eager"))
    _same_training(m1, o1, m2, o2)
    explained = pydynamo.explain(lambda: o2.step())()
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def _train_scaled(compile_fn, clip):
    m = _model()
    opt = torch.optim.AdamW(m.parameters(), lr=0.01, foreach=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)

    def step(x):
        loss = (m(x) ** 2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        if clip:
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        scaler.step(opt)  # reads found_inf with .item(): a break, as under torch.compile
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    f = compile_fn(step)
    return m, opt, [f(x) for x in _X + _X], scaler


@pytest.mark.parametrize("clip", [False, True])
def test_grad_scaler_step(clip):
    pydynamo.reset()
    m1, o1, l1, s1 = _train_scaled(lambda f: f, clip)
    cnt = CompileCounter()
    m2, o2, l2, s2 = _train_scaled(pydynamo.optimize(cnt), clip)
    _same_training(m1, o1, m2, o2)
    assert all(_close(a, b) for a, b in zip(l1, l2)) and s1.get_scale() == s2.get_scale()
    # forward, unscale (+ clip), the optimizer step, the update: breaks at backward(), at the
    # scaler's found_inf.item() and at zero_grad()
    assert cnt.frame_count <= 5


def test_lazy_state_is_traced_when_the_trace_changed_a_group_first():
    """The state is made for real before the traced first step only where nothing the trace did
    could change it: a group flag written by the trace first leaves it to the traced code."""
    def run(compile_fn):
        m = _model()
        opt = torch.optim.Adam(m.parameters(), lr=0.01, foreach=True)

        def step():
            opt.param_groups[0]["amsgrad"] = True  # makes max_exp_avg_sq in the state
            opt.step()
        f = compile_fn(step)
        for x in _X:
            opt.zero_grad()
            (m(x) ** 2).sum().backward()
            f()
        return m, opt
    pydynamo.reset()
    m1, o1 = run(lambda f: f)
    m2, o2 = run(pydynamo.optimize("eager"))
    _same_training(m1, o1, m2, o2)
    assert all("max_exp_avg_sq" in o2.state[p] for p in m2.parameters())


def test_lazy_state_only_for_parameters_with_gradients():
    pydynamo.reset()
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    first = next(m.parameters())
    (m(_X[0]) ** 2).sum().backward()
    first.grad = None
    pydynamo.optimize("eager")(lambda: opt.step())()
    assert first not in opt.state and all("momentum_buffer" in opt.state[p]
                                          for p in list(m.parameters())[1:])


def _lbfgs_run(compile_fn):
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.LBFGS(m.parameters(), lr=0.1, max_iter=4)

    def closure():
        opt.zero_grad()
        loss = (m(x) ** 2).mean()
        loss.backward()
        return loss

    def step():
        return opt.step(closure)
    f = compile_fn(step)
    return [f() for _ in range(2)], m


def test_lbfgs_closure_step_breaks_with_its_reason():
    pydynamo.reset()
    l1, m1 = _lbfgs_run(lambda f: f)
    l2, m2 = _lbfgs_run(pydynamo.optimize("eager"))
    assert all(_close(a, b) for a, b in zip(l1, l2))
    assert all(_close(p, q) for p, q in zip(m1.parameters(), m2.parameters()))
    pydynamo.reset()
    m = torch.nn.Linear(4, 1)
    opt = torch.optim.LBFGS(m.parameters())

    def closure():
        loss = (m(torch.ones(1, 4)) ** 2).sum()
        loss.backward()
        return loss
    explained = pydynamo.explain(lambda: opt.step(closure))()
    assert str(explained.break_reasons[0].reason).startswith("LBFGS.step(closure): the closure runs")


def test_adafactor_step_equals_eager():
    """Adafactor reads its step count with .item() where torch compiles it without capturable:
    a break there, as under torch.compile; parameters and state stay equal to eager's."""
    if not hasattr(torch.optim, "Adafactor"):
        pytest.skip("torch has no Adafactor")
    def run(compile_fn):
        m = _model()
        opt = torch.optim.Adafactor(m.parameters(), lr=0.01)
        f = compile_fn(lambda: opt.step())
        for x in _X:
            opt.zero_grad()
            (m(x) ** 2).sum().backward()
            f()
        return m, opt
    pydynamo.reset()
    m1, o1 = run(lambda f: f)
    m2, o2 = run(pydynamo.optimize("eager"))
    _same_training(m1, o1, m2, o2)
