"""Graph-break programs through the real hook, compared with eager, with exact graph counts.

Each CASE is (function, input maker, graphs): the function runs once eagerly and once under
pydynamo.optimize(CompileCounter()) on the same fresh inputs; the results must be the same and
the counter must have seen exactly ``graphs`` graphs; a second call must compile nothing.
"""
import math
import os
import sys
import time

import numpy as np
import pytest

import torch

import pydynamo
from pydynamo.testing import CompileCounter, same


def t(*shape, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).requires_grad_(requires_grad)


def pos(n=4):
    return t(n).abs() + 0.5


def neg(n=4):
    return -pos(n)


@pydynamo.disable
def disabled_double(x):
    return x * 2


def prints(x):
    print("prints", x.shape)
    return x + 1


def helper_item(x):
    return x * x.sum().item()


def helper_branch(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


class Box:
    def __init__(self, x):
        self.x = x
        self.n = 3

    def __eq__(self, other):
        return type(other) is Box and self.n == other.n and torch.equal(self.x, other.x)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        print("net")
        return torch.relu(y)


NET = Net()


# ---- the programs -----------------------------------------------------------------------------

def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def if_else(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    else:
        y = y - 1
    return y * 3


def if_return_early(x):
    if x.max() > 100:
        return x
    return x.cos()


def if_not_any(x):
    if not (x > 10).any():
        x = x + 1
    return x


def nested_ifs(x):
    if x.sum() > 0:
        if x.mean() > 100:
            return x * 2
        return x * 3
    return x * 4


def ternary(x, y):
    z = x if x.sum() > y.sum() else y
    return z + 1


def and_value(x, y):
    z = (x.sum() > 0) and y
    return z


def or_value(x, y):
    z = (x.sum() > 0) or y
    return z


def two_branches(x):
    if x.sum() > 0:
        x = x + 1
    x = x * 2
    if x.mean() > 0:
        x = x - 1
    return x


def while_tensor(x):
    while x.sum() < 100:
        x = x * 2
    return x


def bool_call(x):
    b = bool(x.sum() > 0)
    return x + b


def branch_after_work(x, y):
    z = x @ y
    if z.sum() > 0:
        return z.relu()
    return z


def assert_tensor(x):
    assert x.sum() > 0
    return x + 1


def item_arith(x):
    return x * x.sum().item()


def item_branch(x):
    if x.sum().item() > 0:
        return x + 1
    return x - 1


def tolist_len(x):
    v = x.tolist()
    return x * len(v)


def int_of_tensor(x):
    n = int(x.sum())
    return x + n


def float_of_tensor(x):
    f = float(x.mean())
    return x * f


def numpy_call(x):
    a = x.numpy()
    return x + float(a.sum())


def item_twice(x):
    a = x.sum().item()
    b = x.mean().item()
    return x * a + b


def print_start(x):
    print("start")
    return x + 1


def print_middle(x):
    y = x + 1
    print("middle", y.shape)
    return y * 2


def print_end(x):
    y = x * 2
    print("end")
    return y


def print_two(x):
    x = x + 1
    print("one")
    x = x * 2
    print("two")
    return x - 1


def stdout_write(x):
    import sys
    sys.stdout.write("w\n")
    return x + 1


def time_call(x):
    time.time()
    return x * 2


def getpid_call(x):
    return x + (os.getpid() > 0)


def numpy_fn(x):
    y = x + 1
    s = np.sqrt(4.0)
    return y * s


def disabled_call(x):
    return disabled_double(x) + 1


def disabled_in_expr(x, y):
    return x * 3 + disabled_double(y)


def inlined_prints(x):
    y = x.sin()
    return prints(y) * 2


def inlined_item(x):
    return helper_item(x + 1) - 1


def inlined_branch(x):
    return helper_branch(x.cos()) * 2


def module_with_print(x):
    return NET(x) + 1


def raise_const(x, flag):
    y = x + 1
    if flag:
        raise ValueError("bad flag")
    return y


def import_inside(x):
    import math as m
    return x * m.pi


def set_literal(x):
    s = {1, 2}
    return x + len(s)


def attr_on_tensor(x):
    y = x + 1
    y.tag = "t"
    return y * 2, y.tag


def a_plus_f_b(a, b):
    return a + prints(b)


def g_of_f(a, b):
    return torch.add(a, prints(b))


def cat_list(x, y):
    return torch.cat([x, prints(y), x])


def tuple_middle(x, y):
    return (x + 1, print("tuple"), y * 2)


def dict_middle(x, y):
    return {"a": x + 1, "b": prints(y), "c": 3}


def method_arg(x, y):
    return x.add(prints(y))


def compare_chain(x):
    return (x + 1).sum() < prints(x).sum()


def kwargs_call(x):
    print("kw", end="\n", sep=" ")
    return x + 1


def star_call(x):
    args = ("star", 1)
    print(*args)
    return x * 2


def for_range(x):
    for i in range(3):
        x = x + i
        print(i)
        x = x * 2
    return x


def for_tensors(xs):
    out = 0
    for x in xs:
        out = out + x
        print("item")
    return out


def for_enumerate(xs):
    acc = xs[0] * 0
    for i, x in enumerate(xs):
        acc = acc + x * i
        print(i)
    return acc


def for_zip(xs, ys):
    acc = 0
    for x, y in zip(xs, ys):
        print("zip")
        acc = acc + x * y
    return acc


def while_counter(x):
    i = 0
    while i < 3:
        x = x + 1
        print(i)
        i += 1
    return x


def for_branch(x):
    for _ in range(3):
        if x.sum() > 0:
            x = x - 1
    return x


def nested_loops(x):
    for i in range(2):
        for j in range(2):
            x = x + i * j
            print(i, j)
    return x


def for_break_stmt(x):
    for i in range(5):
        x = x + 1
        print(i)
        if i == 1:
            break
    return x


def for_item(x):
    total = 0.0
    for i in range(2):
        total += (x * i).sum().item()
    return x + total


def no_grad_print(x):
    with torch.no_grad():
        y = x * 2
        print("in no_grad")
        z = y + 1
    return z, z.requires_grad, torch.is_grad_enabled()


def enable_in_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
            print("nested")
            c = b + 1
        d = a + 1
    return c, d, c.requires_grad, d.requires_grad


def set_grad_with(x):
    with torch.set_grad_enabled(False):
        y = x + 1
        print("set_grad")
        y = y * 2
    return y, y.requires_grad


def break_after_no_grad(x):
    with torch.no_grad():
        y = x * 2
    print("after")
    return y + x, torch.is_grad_enabled()


def branch_in_no_grad(x):
    with torch.no_grad():
        if x.sum() > 0:
            x = x * 2
        y = x + 1
    return y, y.requires_grad


def item_in_no_grad(x):
    with torch.no_grad():
        s = x.sum().item()
    return x * s


def live_kinds(x, box):
    lst = [x, 1]
    d = {"a": x + 1, "b": "s"}
    tup = (x, 2.5)
    n, s, none = 3, "str", None
    print("live")
    return lst[0] + d["a"] + tup[0] * tup[1] + n + box.n, s, none, d["b"]


def live_list_mutated_after(x):
    acc = [x]
    print("mut")
    acc.append(x * 2)
    acc.append(x * 3)
    return torch.stack(acc).sum(0)


def aliased_locals(x):
    a = [x]
    b = a
    print("alias")
    b.append(x + 1)
    return len(a), a[1]


def user_object_local(x):
    box = Box(5)
    print("box")
    return x + box.n


def module_local(x):
    m = NET.lin
    print("mod")
    return m(x)


def dead_tensor_not_passed(x, y):
    z = y * 2
    print(z.shape)
    return x + 1


def closure_user(x):
    k = 3

    def inner(v):
        return v * k
    print("closure")
    return inner(x)


def break_in_lambda_call(x):
    f = lambda v: v + 1  # noqa: E731
    print("lambda")
    return f(x)


def list_arg_mutated(xs):
    xs.append(xs[0] * 2)
    print("list arg")
    return len(xs)


def dict_arg_set(d, x):
    d["new"] = x + 1
    print("dict arg")
    return d["new"] * 2


def returns_after_two_items(x):
    a = x.sum().item()
    if a > 0:
        return x * 2
    return x * 3


def generator_loop(x):
    gen = (i for i in range(2))
    for i in gen:
        x = x + i
    print("gen")
    return x


def str_format(x):
    y = x.sum()
    msg = f"value {y.item():.2f}"
    return x + 1, msg


def sorted_of_tensors(x):
    vals = [x.sum(), x.mean()]
    m = max(vals)
    return x + m


def inline_two_levels(x):
    return inlined_prints(x) + 1


def mixed_everything(x, y):
    acc = []
    for i in range(2):
        with torch.no_grad():
            z = x * i
        acc.append(z + y)
        if z.sum() >= 0:
            print("mixed", i)
    return torch.stack(acc).sum(0)


# 3.13's bytecode around breaks: COMPARE_OP's bool bit and TO_BOOL, f-string opcodes, pairs of
# locals, SET_FUNCTION_ATTRIBUTE, CALL_KW, a comprehension borrowing a cell's slot

def not_of_tensor(x):
    y = x * 2
    flag = not (y.sum() > 0)
    return y + flag


def if_not_compare(x):
    y = x * 2
    if not y.sum() > 0:
        y = y + 1
    return y - 1


def fstring_of_items(x):
    s = f"{x.sum().item():.2f}|{x.shape[0]!r}|{x.dtype!s}"
    return x + len(s)


def swap_around_break(x, y):
    a, b = x + 1, y * 2
    print("swap")
    a, b = b, a
    return a - b


def lambda_defaults_around_break(x):
    k = x.sum()
    f = lambda t, s=2, *, u=3: t * s + u + k  # noqa: E731
    print("lambda")
    return f(x, u=1)


def method_kw_break(x):
    y = x + 1
    print("kw", y.shape, sep="|")
    return y.sum(dim=0, keepdim=True)


def cell_comprehension_break(x):
    k = 1
    fns = [lambda: k * x for k in range(2)]
    print("cells")
    return [f() for f in fns], x * k



CASES = [
    (bar, lambda: (t(4), pos()), 2),
    (bar, lambda: (t(4), neg()), 2),
    (if_else, lambda: (pos(),), 2),
    (if_else, lambda: (neg(),), 2),
    (if_return_early, lambda: (t(4),), 2),
    (if_not_any, lambda: (t(4),), 2),
    (nested_ifs, lambda: (pos(),), 3),
    (nested_ifs, lambda: (neg(),), 2),
    (ternary, lambda: (t(3), t(3, seed=1)), 2),
    (and_value, lambda: (pos(), t(4)), 1),
    (and_value, lambda: (neg(), t(4)), 1),
    (or_value, lambda: (neg(), t(4)), 1),
    (two_branches, lambda: (pos(),), 3),
    # the loop's resume function serves every iteration; 3.12 repeats the loop test at the loop's
    # end (loop inversion), which is one more break site
    (while_tensor, lambda: (pos(),), 2 if sys.version_info < (3, 12) else 3),
    (bool_call, lambda: (t(4),), 2),
    (branch_after_work, lambda: (t(3, 3), t(3, 3, seed=2)), 1),  # z.sum() <= 0: z as is
    (assert_tensor, lambda: (pos(),), 2),
    (item_arith, lambda: (t(4),), 2),
    (item_branch, lambda: (pos(),), 2),
    (item_branch, lambda: (neg(),), 2),
    (tolist_len, lambda: (t(4),), 1),
    (int_of_tensor, lambda: (pos(),), 2),
    (float_of_tensor, lambda: (t(4),), 2),
    (numpy_call, lambda: (t(4),), 2),  # x.numpy() and the sum captured; float() of it breaks
    (item_twice, lambda: (t(4),), 3),
    (print_start, lambda: (t(4),), 1),
    (print_middle, lambda: (t(4),), 2),
    (print_end, lambda: (t(4),), 1),
    (print_two, lambda: (t(4),), 3),
    (stdout_write, lambda: (t(4),), 1),
    (time_call, lambda: (t(4),), 1),
    (getpid_call, lambda: (t(4),), 1),
    (numpy_fn, lambda: (t(4),), 1),  # numpy.sqrt of a constant is a graph node (ndarray.py)
    (disabled_call, lambda: (t(4),), 1),
    (disabled_in_expr, lambda: (t(4), t(4, seed=1)), 2),
    (inlined_prints, lambda: (t(4),), 3),
    (inlined_item, lambda: (t(4),), 4),
    (inlined_branch, lambda: (t(4),), 4),
    (module_with_print, lambda: (t(2, 4),), 3),
    (raise_const, lambda: (t(4), False), 1),
    (import_inside, lambda: (t(4),), 1),
    (set_literal, lambda: (t(4),), 1),
    (attr_on_tensor, lambda: (t(4),), 1),  # the attribute lives in the trace, set after the graph
    (a_plus_f_b, lambda: (t(4), t(4, seed=1)), 2),
    (g_of_f, lambda: (t(4), t(4, seed=1)), 2),
    (cat_list, lambda: (t(4), t(4, seed=1)), 2),
    (tuple_middle, lambda: (t(4), t(4, seed=1)), 2),
    (dict_middle, lambda: (t(4), t(4, seed=1)), 2),
    (method_arg, lambda: (t(4), t(4, seed=1)), 2),
    (compare_chain, lambda: (t(4),), 3),
    (kwargs_call, lambda: (t(4),), 1),
    (star_call, lambda: (t(4),), 1),
    (for_range, lambda: (t(4),), 4),
    (for_tensors, lambda: ([t(2), t(2, seed=1), t(2, seed=2)],), 3),
    (for_enumerate, lambda: ([t(2), t(2, seed=1)],), 2),
    (for_zip, lambda: ([t(2), t(2, seed=1)], [t(2, seed=3), t(2, seed=4)]), 2),
    (while_counter, lambda: (t(4),), 3),
    (for_branch, lambda: (pos() + 5,), 4),
    (nested_loops, lambda: (t(4),), 4),
    (for_break_stmt, lambda: (t(4),), 2),
    (for_item, lambda: (t(4),), 3),
    (no_grad_print, lambda: (t(4, requires_grad=True),), 2),
    (enable_in_no_grad, lambda: (t(4, requires_grad=True),), 2),
    (set_grad_with, lambda: (t(4, requires_grad=True),), 2),
    (break_after_no_grad, lambda: (t(4, requires_grad=True),), 2),
    (branch_in_no_grad, lambda: (pos(4).requires_grad_(),), 2),
    (item_in_no_grad, lambda: (t(4, requires_grad=True),), 2),
    (live_kinds, lambda: (t(4), Box(t(4))), 2),
    (live_list_mutated_after, lambda: (t(4),), 1),
    (aliased_locals, lambda: (t(4),), 1),
    (module_local, lambda: (t(2, 4),), 1),
    (dead_tensor_not_passed, lambda: (t(4), t(4, seed=1)), 2),
    (list_arg_mutated, lambda: ([t(2)],), 1),
    (dict_arg_set, lambda: ({"k": 1}, t(2)), 2),
    (returns_after_two_items, lambda: (pos(),), 2),
    (generator_loop, lambda: (t(4),), 1),
    (str_format, lambda: (t(4),), 2),
    (sorted_of_tensors, lambda: (t(4),), 2),
    (inline_two_levels, lambda: (t(4),), 4),
    (mixed_everything, lambda: (t(4), t(4, seed=1)), 3),
    (not_of_tensor, lambda: (t(4),), 2),
    (not_of_tensor, lambda: (neg(),), 2),
    (if_not_compare, lambda: (t(4),), 2),
    (fstring_of_items, lambda: (t(4),), 2),
    (swap_around_break, lambda: (t(4), t(4, seed=1)), 2),
    (lambda_defaults_around_break, lambda: (t(4),), 2),  # k, a cell holding a value: the frame's own cell
    (method_kw_break, lambda: (t(2, 3),), 2),
    (cell_comprehension_break, lambda: (t(4),), 1),
]


def _fresh(make):
    """The same inputs twice (lists, dicts and tensors are mutable)."""
    return make(), make()


@pytest.mark.parametrize("fn,make,graphs", CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_graph_break_program(fn, make, graphs, capsys):
    pydynamo.reset()
    eager_args, compiled_args = _fresh(make)
    grad = torch.is_grad_enabled()
    expected = fn(*eager_args)
    eager_out = capsys.readouterr().out
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(fn)
    got = opt(*compiled_args)
    assert torch.is_grad_enabled() == grad
    assert same(got, expected), f"{got} != {expected}"
    assert same(list(compiled_args), list(eager_args)), "inputs were mutated differently"
    assert capsys.readouterr().out == eager_out
    assert cnt.frame_count == graphs
    again = opt(*make())
    assert same(again, fn(*make()))
    assert cnt.frame_count == graphs, "a second call with the same inputs recompiled"
