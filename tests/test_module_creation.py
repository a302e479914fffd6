"""nn.Modules created inside compiled code (``loss_fct = CrossEntropyLoss(); loss_fct(a, b)``):
built at trace time as their constructor builds them, captured in the graph; refused (a graph
break with a reason) where run time could build them differently; rebuilt when they escape."""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pydynamo
from pydynamo.exc import Unsupported
from pydynamo.testing import CompileCounter, same


def compiled(fn, fullgraph=False):
    cnt = CompileCounter()
    return pydynamo.optimize(cnt, fullgraph=fullgraph)(fn), cnt


def check(fn, *args, fullgraph=True, frames=1, calls=3):
    """Same results as eager on every call; with fullgraph, one graph compiled once."""
    c, cnt = compiled(fn, fullgraph)
    for _ in range(calls):
        expected, got = fn(*args), c(*args)
        assert same(got, expected), (got, expected)
    if frames is not None:
        assert cnt.frame_count == frames
    return c, cnt


def break_reasons(fn, *args):
    return [b.reason for b in pydynamo.explain(fn)(*args).break_reasons]


x = torch.randn(4, 5)
labels = torch.tensor([0, 1, 2, 4])


def test_cross_entropy_loss():
    def fn(logits, labels):
        loss_fct = nn.CrossEntropyLoss()
        return loss_fct(logits.view(-1, 5), labels.view(-1))
    check(fn, x, labels)
    assert break_reasons(fn, x, labels) == []


def test_loss_with_constant_arguments():
    def fn(a):
        return nn.MSELoss(reduction="sum")(a, a * 2), nn.CrossEntropyLoss(ignore_index=1, label_smoothing=0.1)(a, labels)
    check(fn, x)


def test_activations_and_dropout():
    def fn(a):
        return nn.ReLU()(a) + nn.GELU(approximate="tanh")(a) + nn.Dropout(0.0)(a) + nn.Softmax(dim=-1)(a)
    check(fn, x)


def test_dropout_eval_mode():
    def fn(a):
        d = nn.Dropout(0.5).eval()  # a new module trains: eval() is a write the trace keeps
        return d(a), d.training
    check(fn, x)


def test_flatten_identity_unflatten():
    def fn(a):
        return nn.Flatten(0)(a), nn.Identity(3, k=4)(a), nn.Unflatten(1, (1, 5))(a)
    check(fn, x)


def test_constructor_argument_is_guarded():
    def fn(a, p):
        return nn.Dropout(p)(a)
    c, cnt = compiled(fn)
    assert same(c(x, 0.0), x) and same(c(x, 0.0), x)
    assert cnt.frame_count == 1
    torch.manual_seed(0)
    got = c(x, 0.5)
    torch.manual_seed(0)
    assert same(got, fn(x, 0.5))
    assert cnt.frame_count == 2


def test_created_in_a_module_forward():
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(5, 5)

        def forward(self, a, labels):
            logits = self.lin(a)
            return nn.CrossEntropyLoss()(logits, labels), logits
    m = Head()
    c, cnt = compiled(m, fullgraph=True)
    for _ in range(2):
        assert same(c(x, labels), m(x, labels))
    assert cnt.frame_count == 1
    c(x, labels)[0].backward()
    assert m.lin.weight.grad is not None


def test_attributes_and_introspection():
    def fn(a):
        m = nn.ReLU()
        return (type(m)().training, isinstance(m, nn.Module), hasattr(m, "inplace"), hasattr(m, "nope"),
                getattr(m, "nope", 5), len(list(m.parameters())), [n for n, _ in m.named_modules()])
    check(fn, x, frames=0)


def test_missing_attribute_raises_attribute_error():
    def fn(a):
        m = nn.ReLU()
        try:
            return m.nope
        except AttributeError:
            return a + 1
    check(fn, x)


def test_user_subclass_init_is_inlined():
    class Scale(nn.Module):
        def __init__(self, s, name="x"):
            super().__init__()
            self.s = s
            self.name = name

        def forward(self, a):
            return a * self.s

    def fn(a):
        m = Scale(2.0)
        return m(a), m.name
    check(fn, x)


def test_user_subclass_of_a_torch_loss():
    class MyLoss(nn.CrossEntropyLoss):
        def __init__(self):
            super().__init__(reduction="sum")
            self.k = 3

        def forward(self, a, b):
            return super().forward(a, b) * self.k
    check(lambda a, b: MyLoss()(a, b), x, labels)


def test_user_module_with_properties_and_overrides():
    class Frozen(nn.Module):  # nn.Module.__init__ reaches none of these
        @property
        def scale(self):
            return 2.0

        def train(self, mode=True):
            return super().train(False)

        def forward(self, a):
            return a * self.scale, self.training

    def fn(a):
        return Frozen().train()(a)
    check(fn, x)


def test_class_attributes_are_guarded():
    class K(nn.Module):
        factor = 2

        def forward(self, a):
            return a * self.factor

    def fn(a):
        return K()(a)
    c, cnt = compiled(fn)
    assert same(c(x), fn(x))
    K.factor = 3
    assert same(c(x), fn(x))
    K.forward = lambda self, a: a - 1
    assert same(c(x), fn(x))
    assert cnt.frame_count == 3


# ---- escaping the trace: rebuilt by the generated code --------------------------------------


def test_returned_module_is_rebuilt():
    def fn(a):
        m = nn.ReLU()
        m.eval()
        return m(a), m
    c, _ = compiled(fn, fullgraph=True)
    got, expected = c(x), fn(x)
    assert same(got[0], expected[0])
    assert type(got[1]) is nn.ReLU and got[1] is not expected[1]
    assert vars(got[1]) == vars(expected[1]) and got[1].training is False


def test_returned_user_module_keeps_its_attributes_in_order():
    class Scale(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.s = s

        def forward(self, a):
            return a * self.s

    def fn(a):
        return Scale(3.0)

    c, _ = compiled(fn, fullgraph=True)
    got, expected = c(x), fn(x)
    assert type(got) is Scale and list(vars(got)) == list(vars(expected)) and got.s == 3.0
    assert same(got(x), expected(x))


def test_stored_and_returned_module_is_one_object():
    lst = []

    def fn(a):
        m = nn.GELU(approximate="tanh")
        lst.append(m)
        m.training = False
        return m, m(a)
    c, _ = compiled(fn, fullgraph=True)
    got = c(x)
    assert got[0] is lst[-1] and got[0].training is False
    assert same(got[1], fn(x)[1])


def test_module_live_at_a_graph_break():
    def fn(a):
        m = nn.Softmax(dim=-1)
        print("", end="")  # a graph break: m passes to the resume function
        return m(a)
    check(fn, x, fullgraph=False, frames=None)


def test_id_of_a_created_module_is_refused():
    def fn(a):
        return id(nn.ReLU())
    assert any("id() of" in r for r in break_reasons(fn, x))


# ---- refused: a graph break with a reason, never a wrong answer ----------------------------


def test_module_with_parameters_is_refused():
    def fn(a):
        lin = nn.Linear(5, 5)
        return lin(a).shape, lin.weight.shape
    check(fn, x, fullgraph=False, frames=None)
    reasons = break_reasons(fn, x)
    assert any("Linear" in r and "creates parameters (weight, bias)" in r for r in reasons), reasons
    with pytest.raises(Unsupported, match="creates parameters"):
        compiled(fn, fullgraph=True)[0](x)


def test_constructor_that_draws_random_numbers_leaves_the_rng_alone():
    def fn(a):
        nn.Linear(5, 5)
        return torch.rand(3)
    torch.manual_seed(0)
    expected = fn(x)
    c, _ = compiled(fn)
    torch.manual_seed(0)
    assert same(c(x), expected)


def test_user_module_with_parameters_is_refused():
    class WithLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(5, 5)

        def forward(self, a):
            return self.lin(a)

    def fn(a):
        return WithLinear()(a).shape
    check(fn, x, fullgraph=False, frames=None)
    assert any("creates parameters" in r for r in break_reasons(fn, x))


def test_tensor_argument_is_refused():
    def fn(a, b):
        return nn.CrossEntropyLoss(weight=torch.ones(5))(a, b)
    check(fn, x, labels, fullgraph=False, frames=None)
    assert any("is not a constant" in r for r in break_reasons(fn, x, labels))


def test_constructor_that_warns_is_refused():
    def fn(a, b):
        return nn.CrossEntropyLoss(size_average=True)(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(fn, x, labels, fullgraph=False, frames=None)
        assert any("warns" in r for r in break_reasons(fn, x, labels))


def test_constructor_that_raises_raises_at_run_time():
    def fn(a):
        return nn.Dropout(p=2.0)(a)
    c, _ = compiled(fn)
    with pytest.raises(ValueError, match="dropout probability"):
        c(x)


def test_user_override_of_torch_internals_is_refused():
    ran = []

    class OverrideReg(nn.CrossEntropyLoss):
        def register_buffer(self, *args, **kwargs):
            ran.append(1)
            return super().register_buffer(*args, **kwargs)

    def fn(a, b):
        return OverrideReg()(a, b)
    assert any("overrides torch's register_buffer" in r for r in break_reasons(fn, x, labels))
    ran.clear()
    c, _ = compiled(fn)
    assert same(c(x, labels), fn(x, labels)) and len(ran) == 2  # once per real construction


def test_user_property_that_torch_constructor_could_run_is_refused():
    class WithProp(nn.CrossEntropyLoss):
        @property
        def weight_norm(self):
            return 1.0

    def fn(a, b):
        return WithProp()(a, b)
    assert any("WithProp.weight_norm is a property" in r for r in break_reasons(fn, x, labels))
    check(fn, x, labels, fullgraph=False, frames=None)


def test_tensor_attribute_written_in_init_is_refused():
    class WithTensor(nn.Module):
        def __init__(self, t):
            super().__init__()
            self.t = t

        def forward(self, a):
            return a * self.t

    def fn(a):
        return WithTensor(a.sum())(a)
    check(fn, x, fullgraph=False, frames=None)
    assert any("not an immutable constant" in r for r in break_reasons(fn, x))


def test_global_forward_hook_runs():
    def fn(a):
        return nn.ReLU()(a)
    c, _ = compiled(fn)
    c(x)
    calls = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, i, o: calls.append(type(m)))
    try:
        assert same(c(x), F.relu(x))
    finally:
        handle.remove()
    assert calls == [nn.ReLU]
