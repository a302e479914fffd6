"""Graph breaks seen from outside: the tutorial's graph counts (also against torch.compile),
stable resume functions, side-effect replay, explain(), fullgraph messages and logs."""
import logging

import pytest
import torch

import pydynamo
from pydynamo import _C, resume
from pydynamo.exc import (DataDependentError, DisabledFunctionError, SideEffectError,
                          UnmodelledCallError, Unsupported, UnsupportedOpcodeError)
from pydynamo.testing import CompileCounter, same


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def loop_print(x):
    for i in range(3):
        x = x + i
        print(i)
    return x


@pydynamo.disable
def eager_helper(x):
    return x * 2


def inner_item(y):
    return y.item()


def calls_inner(x):
    y = x * 2
    return inner_item(y.sum())


def test_tutorial_three_graphs_over_both_branches():
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(bar)
    a, b = torch.randn(10), torch.randn(10).abs() + 0.1
    for sign in (1, -1, 1, -1):
        assert same(opt(a, b * sign), bar(a, b * sign))
    assert cnt.frame_count == 3


def test_tutorial_graph_counts_match_torch_compile():
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter as TorchCounter
    torch._dynamo.reset()
    theirs, ours = TorchCounter(), CompileCounter()
    t_opt, o_opt = torch.compile(bar, backend=theirs), pydynamo.optimize(ours)(bar)
    a, b = torch.randn(10), torch.randn(10).abs() + 0.1
    for sign in (1, -1):
        assert same(o_opt(a, b * sign), t_opt(a, b * sign))
    torch._dynamo.reset()
    assert ours.frame_count == theirs.frame_count == 3


def test_resume_functions_are_memoised_and_never_recompile(capsys):
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(bar)
    a, b = torch.randn(4), -torch.randn(4).abs() - 0.1
    opt(a, b)
    codes = {k: v[0] for k, v in resume._memo[bar.__code__].items()}
    assert len(codes) == 2  # one per branch target
    for _ in range(5):
        opt(a, b)
        opt(a, -b)
    assert cnt.frame_count == 3
    assert {k: v[0] for k, v in resume._memo[bar.__code__].items()} == codes
    assert all(c1 is c2 for c1, c2 in zip(codes.values(), (v[0] for v in resume._memo[bar.__code__].values())))
    for code in codes.values():
        assert code.co_filename == __file__ and _C.cache_size(code) == 1
    pydynamo.reset()
    assert bar.__code__ not in resume._memo


def test_resume_function_keeps_the_users_lines_in_tracebacks():
    def fails(x):
        y = x + 1
        print("before")
        return y.reshape(7)  # the error comes from here
    opt = pydynamo.optimize(CompileCounter())(fails)
    with pytest.raises(RuntimeError) as info:
        opt(torch.randn(4))
    frames = [(tb.tb_frame.f_code.co_name, tb.tb_lineno) for tb in _walk_tb(info.value.__traceback__)]
    first = fails.__code__.co_firstlineno
    assert frames[-2:] == [("fails", first + 2), ("resume_in_fails_at_88", first + 3)]


# ---- side effects -----------------------------------------------------------------------------

class Counter:
    def __init__(self):
        self.count = 0
        self.cache = []


def test_side_effects_replayed_before_break_and_at_return():
    obj, seen = Counter(), []

    @pydynamo.disable
    def look(o):
        seen.append((o.count, len(o.cache)))

    def fn(x, d):
        obj.count += 1
        obj.cache.append(x)
        d["k"] = x + 1
        look(obj)  # runs natively: must see the mutations above
        obj.count += 10
        d["j"] = 2
        return x * 2

    d = {"a": 1}
    cnt = CompileCounter()
    out = pydynamo.optimize(cnt)(fn)(torch.ones(2), d)
    assert same(out, torch.ones(2) * 2)
    assert seen == [(1, 1)] and obj.count == 11 and len(obj.cache) == 1
    assert list(d) == ["a", "k", "j"] and same(d["k"], torch.ones(2) + 1)
    assert cnt.frame_count == 2


GLOBAL_STATE = 0


def test_global_assignment_is_replayed_and_read_back():
    def fn(x):
        global GLOBAL_STATE
        GLOBAL_STATE = GLOBAL_STATE + 1
        y = x + GLOBAL_STATE
        print("g")
        return y
    global GLOBAL_STATE
    GLOBAL_STATE = 0
    opt = pydynamo.optimize(CompileCounter())(fn)
    assert same(opt(torch.zeros(2)), torch.ones(2)) and GLOBAL_STATE == 1
    assert same(opt(torch.zeros(2)), torch.ones(2) * 2) and GLOBAL_STATE == 2


def test_module_attribute_counter():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x * self.calls

    m = M()
    cnt = CompileCounter()
    om = pydynamo.optimize(cnt)(m)
    assert same(om(torch.ones(2)), torch.ones(2)) and m.calls == 1
    assert same(om(torch.ones(2)), torch.ones(2) * 2) and m.calls == 2


# ---- explain -----------------------------------------------------------------------------------

def test_explain_fields_for_the_tutorial():
    out = pydynamo.explain(bar)(torch.randn(4), -torch.ones(4))
    assert out.graph_count == 2 and out.graph_break_count == 1
    assert out.ops_per_graph[0] == ["torch.abs", "operator.add", "operator.truediv", "Tensor.sum", "operator.lt"]
    assert out.op_count == 7 and len(out.graphs) == 2
    br = out.break_reasons[0]
    assert br.kind == "DataDependentError" and "branching on the value of a tensor" in br.reason
    assert br.location == f"{__file__}:{bar.__code__.co_firstlineno + 2}"
    assert br.source_line == "if b.sum() < 0:"
    assert [name for _, _, name in br.user_stack] == ["bar"]
    assert [name for name, _ in out.compile_times] == ["bar", "resume_in_bar_at_18"]
    assert "L['b']: Tensor(torch.float32, cpu, size=[4], stride=[1], requires_grad=False)" in out.out_guards
    text = str(out)
    assert text.startswith("Graph Count: 2\nGraph Break Count: 1\nOp Count: 7\nBreak Reasons:\n"
                           "  Break Reason 1:\n    Reason [PD101]: data-dependent control flow")
    assert f"    User Stack:\n      {__file__}:{bar.__code__.co_firstlineno + 2} in bar: if b.sum() < 0:" in text
    assert "Hint: use torch.where" in text and "Guard 1: " in text
    assert _C.get_eval_frame() is None and _C.cache_size(bar) == 0 and bar.__code__ not in resume._memo


def test_explain_break_inside_an_inlined_call_has_the_call_stack():
    out = pydynamo.explain(calls_inner)(torch.randn(3))
    first = out.break_reasons[0]
    assert [name for _, _, name in first.user_stack] == ["inner_item", "calls_inner"]
    assert first.source_line == "return y.item()"
    # the caller broke at the call; the callee's own frame was compiled and broke at .item()
    assert out.graph_break_count == 2 and out.graph_count == 1


def test_explain_loop_breaks_once_per_iteration():
    out = pydynamo.explain(loop_print)(torch.zeros(2))
    assert out.graph_count == 3 and out.graph_break_count == 3
    assert {br.source_line for br in out.break_reasons} == {"print(i)"}


# ---- fullgraph --------------------------------------------------------------------------------

def _fullgraph_error(fn, *args):
    opt = pydynamo.optimize(CompileCounter(), fullgraph=True)(fn)
    with pytest.raises(Unsupported) as info:
        opt(*args)
    # no frame of the compiler in the way: only the caller and pydynamo's call wrapper
    files = [tb.tb_frame.f_code.co_filename for tb in _walk_tb(info.value.__traceback__)]
    assert not [f for f in files if "/pydynamo/" in f and not f.endswith("eval_frame.py")], files
    return info.value


def _walk_tb(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_fullgraph_item_message():
    err = _fullgraph_error(calls_inner, torch.randn(3))
    line = inner_item.__code__.co_firstlineno + 1
    assert isinstance(err, DataDependentError)
    assert str(err) == (
        "Tensor.item() needs the tensor's data (data-dependent)\n"
        f"  at {__file__}:{line} in inner_item\n"
        "      return y.item()\n"
        f"  called from {__file__}:{calls_inner.__code__.co_firstlineno + 2} in calls_inner\n"
        "      return inner_item(y.sum())\n"
        "id: PD102 (docs/graph-breaks.md)\n"
        "hint: move .item() out of the compiled region, or keep the value a tensor")


def test_fullgraph_branch_message():
    err = _fullgraph_error(bar, torch.randn(3), torch.randn(3))
    assert isinstance(err, DataDependentError)
    assert str(err) == (
        "data-dependent control flow: branching on the value of a tensor\n"
        f"  at {__file__}:{bar.__code__.co_firstlineno + 2} in bar\n"
        "      if b.sum() < 0:\n"
        "id: PD101 (docs/graph-breaks.md)\n"
        "hint: use torch.where(cond, a, b) to select values instead of branching")


def test_fullgraph_print_disabled_unmodelled_and_opcode_messages():
    def p(x):
        print("x")
        return x
    err = _fullgraph_error(p, torch.randn(2))
    assert isinstance(err, SideEffectError) and str(err).startswith("print() is I/O (a side effect)\n")
    assert str(err).endswith("hint: move print() and other I/O out of the compiled region")

    err = _fullgraph_error(lambda x: eager_helper(x) + 1, torch.randn(2))
    assert isinstance(err, DisabledFunctionError)
    assert "call to eager_helper, which is decorated with pydynamo.disable" in str(err)
    assert "hint: the function is decorated with pydynamo.disable" in str(err)

    import time
    err = _fullgraph_error(lambda x: x + time.time(), torch.randn(2))
    assert isinstance(err, UnmodelledCallError)
    assert str(err).startswith("call to time.time, a C or library function pydynamo does not model")

    def del_closure(x):
        y = x * 2

        def read():
            return y
        del y
        return x
    err = _fullgraph_error(del_closure, torch.randn(2))
    assert isinstance(err, UnsupportedOpcodeError)
    assert str(err).startswith("DELETE_DEREF: deleting a closure variable\n")


def test_nopython_is_fullgraph():
    opt = pydynamo.optimize(CompileCounter(), nopython=True)(bar)
    with pytest.raises(DataDependentError):
        opt(torch.randn(3), torch.randn(3))


# ---- what cannot break runs eagerly, with a reason --------------------------------------------

def test_live_closure_cell_is_shared_with_the_resume_function(capsys):
    """A cell of the frame holding a value at a break: the resume function gets the frame's
    own cells (free variables of its code), and the function made before the break is made
    again by its prologue over them, so the second call compiles nothing."""
    def clos(x):
        k = x + 1

        def g():
            return k * 2
        print("c")
        return g()
    cnt = CompileCounter()
    x = torch.ones(2)
    opt = pydynamo.optimize(cnt)(clos)
    assert same(opt(x), clos(x))
    assert cnt.frame_count == 2  # k = x + 1; then g() inlined in the resume function
    assert same(opt(x + 1), clos(x + 1))
    assert cnt.frame_count == 2


def test_nonlocal_store_after_a_break_reaches_the_closure(capsys):
    def counter(x):
        n = 0

        def bump():
            nonlocal n
            n += 1
            return n
        bump()
        print("b")
        bump()
        return x * n, bump
    cnt = CompileCounter()
    out, fn = pydynamo.optimize(cnt)(counter)(torch.ones(2))
    ref, ref_fn = counter(torch.ones(2))
    assert same(out, ref)
    assert fn() == ref_fn() == 3  # the returned closure shares the frame's (real) cell


def test_graph_break_log_once_per_location(caplog):
    opt = pydynamo.optimize(CompileCounter())(loop_print)
    with caplog.at_level(logging.INFO, logger="pydynamo.graph_breaks"):
        opt(torch.zeros(2))
        opt(torch.zeros(2))
    records = [r for r in caplog.records if r.name == "pydynamo.graph_breaks"]
    assert len(records) == 1
    assert "print() is I/O" in records[0].getMessage()
    assert f"{__file__}:{loop_print.__code__.co_firstlineno + 3}" in records[0].getMessage()


def test_persistent_set_grad_enabled_survives_the_break():
    def fn(x):
        torch.set_grad_enabled(False)
        y = x * 2
        print("sge")
        return y + 1
    x = torch.ones(2, requires_grad=True)
    try:
        out = pydynamo.optimize(CompileCounter())(fn)(x)
        assert not out.requires_grad and not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
