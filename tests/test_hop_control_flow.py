"""torch.cond, while_loop, scan, associative_scan and control_flow.map captured as
torch.compile captures them: bodies traced into subgraphs of torch's higher-order nodes."""
import pytest
import torch
from functorch.experimental import control_flow
from torch._higher_order_ops.associative_scan import associative_scan
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import pydynamo
from pydynamo.exc import Unsupported
from pydynamo.testing import CompileCounter, same

from functional_support import compare, raises_like_eager, targets

W = torch.randn(3, 3)
LIN = torch.nn.Linear(3, 3)
SCALE = 2.0


def cond_lambda(x):
    return torch.cond(x.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), (x,))


def cond_closure(x):
    y = x * 2
    return torch.cond(x.sum() > 0, lambda a: a.sin() + y, lambda a: a.cos() - W[0], (x,)) + 1


def cond_module(x):
    return torch.cond(x.sum() > 0, LIN, lambda a: LIN(a) * 2, [x])


def cond_nested(x):
    def t(a):
        return torch.cond(a.mean() > 0, lambda b: b + 1, lambda b: b - 1, (a,))
    return torch.cond(x.sum() > 0, t, lambda a: a * 3, (x,))


def cond_tuple_operands(x):
    a, b = torch.cond(x[0, 0] > 0, lambda p, q: (p + q, p - q), lambda p, q: (p * q, p / 2), (x, x.cos()))
    return a.sum() + b


def cond_known_pred(x):
    return torch.cond(x.shape[0] > 2, lambda a: a + 1, lambda a: a - 1, (x,))


def while_counter(i, x):
    return while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2), (i, x))


def while_closure(i, x):
    return while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, a @ W), (i, x))


def scan_cumsum(xs):
    def f(c, x):
        n = c + x
        return n, n * 2
    return scan(f, torch.zeros(3), xs)


def scan_reverse_dim(xs):
    def f(c, x):
        n = c * 0.5 + x
        return n, n.sin()
    return scan(f, torch.zeros(5), xs, dim=1, reverse=True)


def assoc_generic(xs):
    return associative_scan(lambda a, b: a + b, xs, dim=0, combine_mode="generic")


def assoc_tree(xs):
    return associative_scan(lambda a, b: (a[0] * b[0], a[1] + b[1]), (xs, xs.cos()), dim=0, combine_mode="generic")


def cmap(xs):
    return control_flow.map(lambda a, w: a @ w, xs, W)


CASES = [(cond_lambda, (torch.randn(4, 3),)), (cond_closure, (torch.randn(4, 3),)),
         (cond_module, (torch.randn(4, 3),)), (cond_nested, (torch.randn(4, 3),)),
         (cond_tuple_operands, (torch.randn(4, 3),)), (cond_known_pred, (torch.randn(4, 3),)),
         (while_counter, (torch.tensor(0), torch.randn(3))), (while_closure, (torch.tensor(0), torch.randn(2, 3))),
         (scan_cumsum, (torch.randn(5, 3),)), (scan_reverse_dim, (torch.randn(5, 4),)),
         (assoc_generic, (torch.randn(6, 3),)), (assoc_tree, (torch.randn(6, 3),)), (cmap, (torch.randn(5, 3),))]


_OLD_SCAN = tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 13)


@pytest.mark.parametrize("fn,args", CASES, ids=[c[0].__name__ for c in CASES])
def test_captured_like_torch_compile(fn, args):
    if fn is scan_reverse_dim and _OLD_SCAN:
        pytest.skip("scan over dim != 0 runs natively before torch 2.13 (its ys layout differs)")
    compare(fn, *args)


@pytest.mark.parametrize("fn,args", [c for c in CASES if c[0] is not cond_known_pred],
                         ids=[c[0].__name__ for c in CASES if c[0] is not cond_known_pred])
def test_one_graph_with_the_higher_order_node(fn, args):
    if fn is scan_reverse_dim and _OLD_SCAN:
        pytest.skip("scan over dim != 0 runs natively before torch 2.13")
    pydynamo.reset()
    cnt = CompileCounter()
    pydynamo.optimize(cnt, fullgraph=True)(fn)(*args)
    assert cnt.frame_count == 1
    hops = {t for t in targets(cnt) if isinstance(t, torch._ops.HigherOrderOperator) or
            getattr(t, "__name__", "") == "generic_associative_scan"}
    assert hops, targets(cnt)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn,args", [(cond_closure, (torch.randn(4, 3),)), (while_closure, (torch.tensor(0), torch.randn(2, 3))),
                                     (scan_cumsum, (torch.randn(5, 3),)), (cmap, (torch.randn(5, 3),))],
                         ids=["cond", "while_loop", "scan", "map"])
def test_backends_lower_the_node(fn, args, backend):
    expected = fn(*args)
    pydynamo.reset()
    assert same(expected, pydynamo.optimize(backend, fullgraph=True)(fn)(*args), exact=False, atol=1e-5)
    pydynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_backward_through_cond(backend):
    def g(x, w):
        return torch.cond(x.sum() > 0, lambda a: (a * w).sin(), lambda a: a.cos() * w, (x,)).sum()
    for sign in (1, -1):
        x = (torch.rand(4, 3) * sign).requires_grad_()
        w = torch.randn(3, requires_grad=True)
        g(x, w).backward()
        expected = (x.grad.clone(), w.grad.clone())
        x.grad = w.grad = None
        pydynamo.reset()
        pydynamo.optimize(backend, fullgraph=True)(g)(x, w).backward()
        assert same(expected, (x.grad, w.grad), exact=False, atol=1e-6)
    pydynamo.reset()


def test_ops_before_and_after_in_one_graph():
    def f(x):
        y = x.relu() * 3
        z = torch.cond(y.sum() > 1, lambda a: a + 1, lambda a: a - 1, (y,))
        return z.softmax(-1)
    cnt = compare(f, torch.randn(4, 3))
    assert cnt.frame_count == 1


def test_what_a_body_reads_is_guarded():
    global SCALE

    def f(x):
        return torch.cond(x.sum() > -100, lambda a: a * SCALE, lambda a: a + 0, (x,))
    x = torch.randn(3)
    pydynamo.reset()
    c = pydynamo.optimize("eager")(f)
    try:
        SCALE = 2.0
        assert torch.equal(c(x), x * 2.0)
        SCALE = 3.0  # a global only the true branch reads: the entry must not be reused
        assert torch.equal(c(x), x * 3.0)
    finally:
        SCALE = 2.0
        pydynamo.reset()


def test_both_branches_guarded():
    flag = {"neg": 1.0}

    def f(x):
        return torch.cond(x.sum() > 0, lambda a: a + 0, lambda a: a * flag["neg"], (x,))
    pydynamo.reset()
    c = pydynamo.optimize("eager")(f)
    x = torch.ones(3)
    assert torch.equal(c(x), x)
    flag["neg"] = -5.0  # read only by the branch not taken at the first call
    assert torch.equal(c(-x), -x * -5.0)
    pydynamo.reset()


def test_dynamic_sizes():
    pydynamo.reset()
    c = pydynamo.optimize("eager", fullgraph=True, dynamic=True)(cond_closure)
    for n in (4, 6, 9):
        x = torch.randn(n, 3)
        assert same(cond_closure(x), c(x), exact=False)
    pydynamo.reset()


def test_body_that_breaks_is_an_error_naming_it_under_fullgraph():
    def bad_branch(a):
        print("side effect")
        return a + 1

    def f(x):
        return torch.cond(x.sum() > 0, bad_branch, lambda a: a - 1, (x,))
    pydynamo.reset()
    with pytest.raises(Unsupported, match="true_fn"):
        pydynamo.optimize("eager", fullgraph=True)(f)(torch.randn(3))
    pydynamo.reset()


def test_body_that_cannot_be_captured_runs_the_call_natively():
    log = []

    def branch(a):
        log.append(1)  # a side effect: no subgraph can replay it
        return a + 1

    def f(x):
        return torch.cond(x.sum() > -100, branch, lambda a: a - 1, (x,)) * 2
    x = torch.randn(3)
    try:
        expected = ("ok", f(x))
    except Exception as e:  # noqa: BLE001 - eager torch.cond may refuse the body itself
        expected = ("raise", type(e))
    pydynamo.reset()
    try:
        got = ("ok", pydynamo.optimize("eager")(f)(x))
    except Exception as e:  # noqa: BLE001
        got = ("raise", type(e))
    assert got[0] == expected[0]
    if got[0] == "ok":
        assert torch.equal(got[1], expected[1])
    pydynamo.reset()


def test_a_branch_returning_its_input_raises_like_eager():
    def f(x):  # torch refuses the aliasing ("return a clone")
        return torch.cond(x.sum() > 0, lambda a: a, lambda a: a + 1, (x,))
    x = torch.randn(3)
    raises_like_eager(f, x)


def test_mismatched_branches_raise_like_eager():
    def f(x):
        return torch.cond(x.sum() > 0, lambda a: a.sum(), lambda a: a, (x,))
    x = torch.randn(3)
    raises_like_eager(f, x)


def test_recognising_the_operators_runs_no_user_code():
    calls = []

    class Vec:
        def __init__(self):
            self.k = 2

        def __hash__(self):  # looking an object up in a table would run this
            calls.append("hash")
            return hash(self.vals)

        def __eq__(self, other):
            calls.append("eq")
            return self is other

    def f(x, v):
        return x * v.k
    pydynamo.reset()
    cnt = CompileCounter()
    x, v = torch.randn(3), Vec()
    assert torch.equal(pydynamo.optimize(cnt, fullgraph=True)(f)(x, v), x * 2)
    assert calls == [] and cnt.frame_count == 1
    pydynamo.reset()
