"""One compiled function called with several instances of a module class that differ in what
identity used to pin: training flag, hooks, tied weights, aliasing between submodules, instance
attributes shadowing class ones, parameters against buffers, submodule types, attributes
present or not, dtypes. Every call must equal eager. Modules are guarded by class, not identity,
so instances whose reads agree share an entry (one graph for a model's blocks, as torch.compile);
where they differ, the guards at each read send them to entries of their own."""
import pytest
import torch
import torch.nn as nn

import pydynamo
from pydynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset():
    pydynamo.reset()
    yield
    pydynamo.reset()


def run_all(instances, x):
    """Each instance through one compiled ``run(m, x)``, twice (a compile, then a hit), against
    eager; the backend counts graphs."""
    cnt = CompileCounter()

    def run(m, x):
        return m(x)
    compiled = pydynamo.optimize(cnt)(run)
    for _ in range(2):
        for m in instances:
            torch.testing.assert_close(compiled(m, x), m(x), rtol=1e-6, atol=1e-6)
    return cnt


class Normed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.bn = nn.Linear(4, 4), nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.lin(x))


def test_training_flag():
    torch.manual_seed(0)
    a, b = Normed(), Normed()
    b.eval()
    a.bn.running_mean.fill_(0.5)
    b.bn.running_mean.fill_(0.5)
    with torch.no_grad():
        run_all([a, b], torch.randn(8, 4))


def test_a_hook_on_one_instance():
    torch.manual_seed(0)
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b.register_forward_hook(lambda mod, args, out: out + 1)
    run_all([a, b], torch.randn(2, 4))


class Two(nn.Module):
    def __init__(self, tie):
        super().__init__()
        self.l1, self.l2 = nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)
        if tie:
            self.l2.weight = self.l1.weight

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


def test_tied_and_untied_weights_train_as_eager():
    torch.manual_seed(0)
    instances = [Two(tie=True), Two(tie=False)]
    refs = [Two(tie=True), Two(tie=False)]
    for m, r in zip(instances, refs):
        r.load_state_dict(m.state_dict())
    x = torch.randn(3, 4)
    compiled = pydynamo.optimize("eager")(lambda m, x: m(x).square().sum())
    for m, r in zip(instances, refs):
        compiled(m, x).backward()
        r(x).square().sum().backward()
        for p, q in zip(m.parameters(), r.parameters()):
            torch.testing.assert_close(p.grad, q.grad)


class Shared(nn.Module):
    def __init__(self, same):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a if same else nn.Linear(4, 4)

    def forward(self, x):
        if self.a is self.b:
            return self.a(x) * 3  # (not a(x) + b(x), which tied modules would give too)
        return self.a(x) + self.b(x)


def test_identity_between_submodules():
    torch.manual_seed(0)
    run_all([Shared(True), Shared(False)], torch.randn(2, 4))
    run_all([Shared(False), Shared(True)], torch.randn(2, 4))


class Scaled(nn.Module):
    scale = 2.0

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * self.scale


def test_an_instance_attribute_shadowing_the_class_one():
    torch.manual_seed(0)
    a, b = Scaled(), Scaled()
    b.scale = 3.0
    run_all([a, b], torch.randn(2, 4))
    run_all([b, a], torch.randn(2, 4))


class Weighted(nn.Module):
    def __init__(self, as_buffer):
        super().__init__()
        w = torch.randn(4)
        if as_buffer:
            self.register_buffer("w", w)
        else:
            self.w = nn.Parameter(w)

    def forward(self, x):
        return x * self.w


def test_a_parameter_and_a_buffer_of_one_name():
    torch.manual_seed(0)
    run_all([Weighted(False), Weighted(True)], torch.randn(2, 4))


class Activated(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.lin, self.act = nn.Linear(4, 4), act

    def forward(self, x):
        return self.act(self.lin(x))


def test_submodules_of_other_types():
    torch.manual_seed(0)
    run_all([Activated(nn.ReLU()), Activated(nn.Tanh()), Activated(nn.Identity())], torch.randn(2, 4))


class Optional(nn.Module):
    def __init__(self, extra):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        if extra:
            self.extra = 1.5

    def forward(self, x):
        y = self.lin(x)
        if hasattr(self, "extra"):
            y = y + self.extra
        return y


def test_an_attribute_present_on_one_instance_only():
    torch.manual_seed(0)
    run_all([Optional(True), Optional(False)], torch.randn(2, 4))
    run_all([Optional(False), Optional(True)], torch.randn(2, 4))


def test_instances_of_other_dtypes():
    torch.manual_seed(0)
    a, b = nn.Linear(4, 4), nn.Linear(4, 4).double()
    x = torch.randn(2, 4)
    compiled = pydynamo.optimize("eager")(lambda m, x: m(x))
    for _ in range(2):
        torch.testing.assert_close(compiled(a, x), a(x))
        torch.testing.assert_close(compiled(b, x.double()), b(x.double()))


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.calls = getattr(self, "calls", 0) + 1  # a store into the module: pins its identity
        return self.lin(x) + id(self) % 7  # id() of the module: pins it too


def test_identity_read_or_written_is_pinned():
    torch.manual_seed(0)
    a, b = Counting(), Counting()
    ra, rb = Counting(), Counting()
    ra.load_state_dict(a.state_dict())
    rb.load_state_dict(b.state_dict())
    compiled = pydynamo.optimize("eager")(lambda m, x: m(x))
    x = torch.randn(2, 4)
    for _ in range(2):
        for m, r in ((a, ra), (b, rb)):
            torch.testing.assert_close(compiled(m, x) - id(m) % 7, r(x) - id(r) % 7)
    assert a.calls == b.calls == 2


def test_blocks_of_one_class_share_one_graph():
    """Blocks compiled one by one (FSDP2's way) or called by one compiled function: one graph
    for every instance of the class, as torch.compile (modules are guarded by class)."""
    torch.manual_seed(0)
    cnt = CompileCounter()
    blocks = [pydynamo.optimize(cnt)(nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4))) for _ in range(4)]
    x = torch.randn(2, 4)
    for _ in range(2):
        for b in blocks:
            torch.testing.assert_close(b(x), b._orig_mod(x))
    assert cnt.frame_count == 1
    assert run_all([nn.Linear(4, 4) for _ in range(3)], x).frame_count == 1


class Walked(nn.Module):
    """A tree walk's result depends on which submodules are the same object (torch lists each
    module and parameter once)."""

    def __init__(self, same):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a if same else nn.Linear(4, 4)

    def forward(self, x):
        n = len(list(self.children())) + 10 * len(list(self.modules())) + 100 * len(list(self.parameters()))
        return self.a(x) + n + (self.b in list(self.children()))


def test_tree_walks_over_shared_and_distinct_submodules():
    torch.manual_seed(0)
    run_all([Walked(True), Walked(False)], torch.randn(2, 4))
    run_all([Walked(False), Walked(True)], torch.randn(2, 4))


class Frozen(nn.Module):
    """``a`` and ``b`` are one BatchNorm or two: what the store through ``a`` changes is what the
    call through ``b`` reads only where they are the same module."""

    def __init__(self, same):
        super().__init__()
        self.a = nn.BatchNorm1d(4)
        self.b = self.a if same else nn.BatchNorm1d(4)
        self.b.running_mean.fill_(0.5)

    def forward(self, x):
        self.a.training = False
        return self.b(x)


def test_a_store_read_back_through_another_path():
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    for order in ((True, False, True), (False, True, False)):
        instances = [Frozen(same) for same in order]
        refs = [Frozen(same) for same in order]
        compiled = pydynamo.optimize("eager")(lambda m, x: m(x))
        for m, r in zip(instances, refs):
            torch.testing.assert_close(compiled(m, x), r(x))
            assert not r.a.training and m.b.training == r.b.training
        m, r = Frozen(False), Frozen(False)  # one instance whose submodules alias later
        compiled(m, x)
        for mod in (m, r):
            mod.b = mod.a
            mod.a.training = True
        torch.testing.assert_close(compiled(m, x), r(x))
        pydynamo.reset()


class Shadowed(nn.Module):
    @property
    def scale(self):
        return 2.0

    def forward(self, x):
        return x * self.scale


def test_an_instance_dict_entry_under_a_property():
    a, b = Shadowed(), Shadowed()
    b.__dict__["scale"] = 5.0  # object.__getattribute__: the property wins
    run_all([b, a], torch.randn(2, 4))


def test_an_instance_dict_entry_over_a_parameter():
    """``m.weight`` finds an instance-dict entry before nn.Module.__getattr__ looks in
    ``_parameters``: an entry compiled for an instance without one must not serve one with."""
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b.__dict__["weight"] = torch.zeros(4, 4)

    def reads_the_weight(m, x):
        return x @ m.weight.t() + m.bias

    x = torch.randn(2, 4)
    for order in ([a, b, a, b], [b, a, b, a]):
        pydynamo.reset()
        f = pydynamo.optimize("eager")(reads_the_weight)
        for m in order:
            assert torch.equal(f(m, x), reads_the_weight(m, x))


def test_an_instance_dict_call_impl():
    """``module(x)`` calls ``self._call_impl``, which an instance-dict entry overrides: an entry
    compiled for an instance without one must not serve one with (that one runs as eager does)."""
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b._call_impl = lambda x: x * 0 - 1

    def calls(m, x):
        return m(x) + 1

    x = torch.randn(2, 4)
    f = pydynamo.optimize("eager")(calls)
    for m in (a, b, a, b):
        assert torch.equal(f(m, x), calls(m, x))
