"""torch.func transforms, functional_call and torch.autograd.grad in compiled functions: one
graph each (as torch.compile makes, or fewer), results equal eager's."""
import copy

import pytest
import torch
from torch.func import (functional_call, grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize,
                        stack_module_state, vjp, vmap)

import pydynamo
from pydynamo.testing import same

from functional_support import compare, raises_like_eager

W = torch.randn(3, 3)
LIN = torch.nn.Linear(3, 3)
MODELS = [torch.nn.Linear(3, 2) for _ in range(4)]
PARAMS, BUFFERS = stack_module_state(MODELS)
BASE = copy.deepcopy(MODELS[0]).to("meta")
TIED = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
TIED[1].weight = TIED[0].weight


def vmap_basic(xs):
    return vmap(lambda a: a.sum() * a)(xs)


def vmap_in_dims(x, y):
    return vmap(lambda a, b: a * b.sum(), in_dims=(0, 1))(x, y)


def vmap_nested(x):
    return vmap(vmap(lambda a: a.sin() @ W))(x)


def vmap_out_dims(x):
    return vmap(lambda a: (a * 2, a.sum()), out_dims=(1, 0))(x)


def vmap_random_same(x):
    return vmap(lambda a: a + torch.rand(()), randomness="same")(x).shape


def grad_basic(x):
    return grad(lambda a: (a.sin() ** 2).sum())(x)


def grad_aux(x):
    return grad(lambda a: ((a ** 2).sum(), a.cos()), has_aux=True)(x)


def grad_and_value_argnums(x, y):
    return grad_and_value(lambda a, b: (a * b).sum() * W.sum(), argnums=(0, 1))(x, y)


def jacrev_basic(x):
    return jacrev(lambda a: a.sin() * 2)(x)


def jacfwd_basic(x):
    return jacfwd(lambda a: a.sin() * 2)(x)


def hessian_basic(x):
    return hessian(lambda a: a.sin().sum())(x)


def vjp_basic(x):
    out, fn = vjp(torch.sin, x)
    return out, fn(torch.ones(3))


def jvp_basic(x):
    return jvp(torch.sin, (x,), (torch.ones(3),))


def linearize_basic(x):
    out, fn = linearize(torch.sin, x)
    return out, fn(torch.ones(3))


def fcall_params(x):
    params = {k: v * 2 for k, v in LIN.named_parameters()}
    return functional_call(LIN, params, (x,))


def fcall_tied(x):
    return functional_call(TIED, {"0.weight": torch.ones(3, 3), "0.bias": torch.zeros(3)}, (x,))


def fcall_untied(x):
    return functional_call(TIED, {"0.weight": torch.ones(3, 3)}, (x,), tie_weights=False)


def ensemble(x):
    return vmap(lambda p, b, x: functional_call(BASE, (p, b), (x,)), in_dims=(0, 0, None))(PARAMS, BUFFERS, x)


def per_sample_grads(x):
    p = {k: v.detach() for k, v in LIN.named_parameters()}

    def loss(p, xi):
        return functional_call(LIN, p, (xi.unsqueeze(0),)).pow(2).sum()
    return vmap(grad(loss), in_dims=(None, 0))(p, x)


def autograd_grad(x):
    x = x.detach().requires_grad_()
    y = (x.sin() ** 2).sum()
    return torch.autograd.grad(y, x)


CASES = [(vmap_basic, (torch.randn(5, 3),)), (vmap_in_dims, (torch.randn(5, 3), torch.randn(3, 5))),
         (vmap_nested, (torch.randn(2, 5, 3),)), (vmap_out_dims, (torch.randn(5, 3),)),
         (vmap_random_same, (torch.randn(5, 3),)),
         (grad_basic, (torch.randn(3),)), (grad_aux, (torch.randn(3),)),
         (grad_and_value_argnums, (torch.randn(3), torch.randn(3))), (jacrev_basic, (torch.randn(3),)),
         (jacfwd_basic, (torch.randn(3),)), (hessian_basic, (torch.randn(3),)), (vjp_basic, (torch.randn(3),)),
         (jvp_basic, (torch.randn(3),)), (linearize_basic, (torch.randn(3),)),
         (fcall_params, (torch.randn(2, 3),)), (fcall_tied, (torch.randn(2, 3),)), (fcall_untied, (torch.randn(2, 3),)),
         (ensemble, (torch.randn(6, 3),)), (per_sample_grads, (torch.randn(4, 3),)), (autograd_grad, (torch.randn(3),))]


@pytest.mark.parametrize("fn,args", CASES, ids=[c[0].__name__ for c in CASES])
def test_captured_like_torch_compile(fn, args):
    compare(fn, *args)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn,args", [(vmap_nested, (torch.randn(2, 5, 3),)), (grad_aux, (torch.randn(3),)),
                                     (jacrev_basic, (torch.randn(3),)), (linearize_basic, (torch.randn(3),)),
                                     (ensemble, (torch.randn(6, 3),)), (per_sample_grads, (torch.randn(4, 3),))],
                         ids=["vmap_nested", "grad_aux", "jacrev", "linearize", "ensemble", "per_sample_grads"])
def test_backends(fn, args, backend):
    expected = fn(*args)
    pydynamo.reset()
    assert same(expected, pydynamo.optimize(backend, fullgraph=True)(fn)(*args), exact=False, atol=1e-5)
    pydynamo.reset()


def test_functional_call_does_not_touch_the_module():
    before = {k: v.clone() for k, v in LIN.state_dict().items()}
    pydynamo.reset()
    out = pydynamo.optimize("eager", fullgraph=True)(fcall_params)(torch.ones(1, 3))
    assert same(out, fcall_params(torch.ones(1, 3)), exact=False)
    assert all(torch.equal(before[k], v) for k, v in LIN.state_dict().items())
    # the module's own parameters are still read by a plain call in the same graph
    def both(x):
        return fcall_params(x) + LIN(x)
    assert same(pydynamo.optimize("eager", fullgraph=True)(both)(torch.ones(1, 3)), both(torch.ones(1, 3)), exact=False)
    pydynamo.reset()


def test_functional_call_strict_missing_runs_natively():
    def f(x):
        return functional_call(LIN, {"weight": torch.ones(3, 3)}, (x,), strict=True)
    x = torch.randn(2, 3)
    raises_like_eager(f, x)


def test_transformed_body_reads_are_guarded():
    state = {"k": 2.0}

    def f(x):
        return vmap(lambda a: a * state["k"])(x)
    pydynamo.reset()
    c = pydynamo.optimize("eager")(f)
    x = torch.randn(4, 3)
    assert torch.equal(c(x), x * 2.0)
    state["k"] = 5.0
    assert torch.equal(c(x), x * 5.0)
    pydynamo.reset()


def test_vmap_of_random_without_randomness_raises_like_eager():
    def f(x):
        return vmap(lambda a: a + torch.rand(()))(x)
    x = torch.randn(3, 2)
    raises_like_eager(f, x, expected=RuntimeError)


def test_vjp_function_of_a_random_body_is_refused():
    def f(x):
        out, fn = vjp(lambda a: torch.nn.functional.dropout(a, 0.5), x)
        return fn(torch.ones(3))
    pydynamo.reset()
    explained = pydynamo.explain(f)(torch.randn(3))
    assert any("random" in str(r) for r in explained.break_reasons), explained.break_reasons
    pydynamo.reset()


def test_functional_call_after_untying_recompiles():
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    m[1].weight = m[0].weight

    def f(x):
        return functional_call(m, {"0.weight": torch.ones(3, 3), "0.bias": torch.zeros(3)}, (x,))
    x = torch.randn(2, 3)
    pydynamo.reset()
    c = pydynamo.optimize("eager")(f)
    assert same(c(x), f(x), exact=False)
    m[1].weight = torch.nn.Parameter(torch.randn(3, 3))  # untied: layer 1 keeps its own weight now
    assert same(c(x), f(x), exact=False)
    pydynamo.reset()
