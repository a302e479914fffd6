"""Small programs run eagerly and through translator.convert, compared bit for bit."""
import math
import operator

import pytest
import torch
import torch.nn.functional as F

from _compile import compile_fn
from pydynamo.testing import CompileCounter, same


def run(fn, *args, frames=1, ops=None, **kwargs):
    """Compile ``fn``, compare with eager twice (the second call must hit the cache)."""
    c = compile_fn(fn)
    expected = fn(*args, **kwargs)
    got = c(*args, **kwargs)
    assert same(got, expected), (got, expected)
    assert same(c(*args, **kwargs), fn(*args, **kwargs))
    assert c.compiles == 1, "second call recompiled"
    assert c.backend.frame_count == frames
    if ops is not None:
        assert c.backend.op_count == ops
    return c


x3 = torch.randn(3)
m34 = torch.randn(3, 4)
m43 = torch.randn(4, 3)

GLOBAL_SCALE = 3.0


# ---- arithmetic and torch functions --------------------------------------------------------

def test_sin_plus_cos_three_nodes():
    c = run(lambda x, y: torch.sin(x) + torch.cos(y), x3, x3 + 1, ops=3)
    targets = [n.target for n in c.backend.graphs[0].graph.nodes if n.op == "call_function"]
    assert targets == [torch.sin, torch.cos, operator.add]


def test_binary_ops_with_python_numbers():
    def fn(x):
        return (x + 1) * 2 - 3 / (x.abs() + 1) ** 2 // 1 % 5
    run(fn, x3)


def test_unary_ops():
    run(lambda x: (-x, +x, abs(x)), x3, ops=3)


def test_bitwise_on_bool_tensors():
    a, b = torch.tensor([True, False, True]), torch.tensor([False, False, True])
    run(lambda a, b: (a & b, a | b, a ^ b, ~a), a, b, ops=4)


def test_matmul_operator():
    run(lambda a, b: a @ b, m34, m43, ops=1)


def test_comparison_ops_on_tensors():
    run(lambda x, y: (x < y, x <= y, x == y, x != y, x > y, x >= y), x3, x3.flip(0), ops=6)


def test_inplace_binary_op_on_new_tensor():
    def fn(x):
        y = x.clone()
        y += 1
        y *= 2
        return y
    run(fn, x3, ops=3)


def test_inplace_on_input_mutates_it():
    def fn(x):
        x.add_(1)
        return x
    a, b = x3.clone(), x3.clone()
    c = compile_fn(fn)
    out = c(a)
    assert out is a and torch.equal(a, fn(b))


def test_functional_ops():
    def fn(x):
        return F.relu(x) + F.gelu(x) + F.softmax(x, dim=-1) + torch.tanh(x).sigmoid()
    run(fn, m34)


def test_tensor_methods():
    def fn(x):
        return x.view(4, 3).t().contiguous().sum(dim=0, keepdim=True).exp()
    run(fn, m34)


def test_python_scalar_math_folds():
    def fn(x):
        k = math.sqrt(16) + GLOBAL_SCALE * 2
        return x * k
    run(fn, x3, ops=1)


def test_torch_factories_and_kwargs():
    def fn(x):
        return x + torch.ones(3, dtype=x.dtype) * torch.arange(3, dtype=torch.float32)
    run(fn, x3)


def test_torch_max_with_dim_returns_named_tuple():
    def fn(x):
        r = torch.max(x, dim=1)
        return r.values + 1, r.indices
    run(fn, m34)


def test_split_and_chunk_unpacking():
    def fn(x):
        a, b = x.chunk(2, dim=1)
        c, d = torch.split(x, 2, dim=1)
        return a * d + b * c
    run(fn, m34)


def test_unpack_tensor_rows():
    def fn(x):
        a, b, c = x
        return a + b + c
    run(fn, m34)


# ---- metadata known at trace time ----------------------------------------------------------

def test_shape_dtype_device_ndim():
    def fn(x):
        b, n = x.shape
        assert x.ndim == 2 and x.dim() == 2
        if x.dtype == torch.float32 and x.device.type == "cpu":
            return x.reshape(n, b) * x.size(0) + x.size()[1] + x.numel()
        return x
    run(fn, m34)


def test_transpose_attribute():
    run(lambda x: x.T @ x, m34, ops=2)


def test_len_of_tensor_and_shape_arithmetic():
    def fn(x):
        return x.new_zeros(len(x), x.shape[-1] * 2) + 1
    run(fn, m34)


def test_view_with_shape_tuple():
    def fn(x):
        s = x.shape
        return x.flatten().view(s)
    run(fn, m34)


# ---- control flow on trace-time values -----------------------------------------------------

def test_if_on_constant_argument():
    def fn(x, flag):
        if flag:
            return x + 1
        return x - 1
    run(fn, x3, True)
    run(fn, x3, False)


def test_if_is_none():
    def fn(x, bias=None):
        y = x * 2
        if bias is not None:
            y = y + bias
        return y
    run(fn, x3, ops=1)
    run(fn, x3, x3, ops=2)


def test_while_loop_on_counter():
    def fn(x):
        i = 0
        while i < 4:
            x = x * 2
            i += 1
        return x
    run(fn, x3, ops=4)


def test_for_range():
    def fn(x):
        for i in range(3):
            x = x + i
        return x
    run(fn, x3, ops=3)


def test_for_over_list_and_tuple():
    def fn(xs, ws):
        total = 0
        for x in xs:
            total = total + x
        for w in ws:
            total = total * w
        return total
    run(fn, [x3, x3 * 2], (2.0, 3.0))


def test_for_enumerate_zip():
    def fn(xs, ys):
        out = []
        for i, (a, b) in enumerate(zip(xs, ys)):
            out.append(a * b + i)
        return out
    run(fn, [x3, x3 + 1], [x3 - 1, x3 * 3])


def test_for_dict_items_keys_values():
    def fn(d):
        acc = 0
        for k, v in d.items():
            acc = acc + v * len(k)
        for k in d:
            acc = acc + d[k]
        for v in d.values():
            acc = acc - v
        return acc
    run(fn, {"a": x3, "bb": x3 * 2})


def test_break_and_continue():
    def fn(x):
        for i in range(10):
            if i % 2:
                continue
            if i > 5:
                break
            x = x + i
        return x
    run(fn, x3, ops=3)


def test_boolean_short_circuit():
    def fn(x, a, b):
        if a and not b or x is None:
            return x + 1
        return x - 1
    run(fn, x3, True, False)
    run(fn, x3, 0, 1)


def test_ternary_and_chained_compare():
    def fn(x, n):
        y = x * 2 if 0 < n < 10 else x * 3
        return y
    run(fn, x3, 5)
    run(fn, x3, 50)


def test_assert_that_holds():
    def fn(x):
        assert x.shape[0] == 3, "bad shape"
        return x + 1
    run(fn, x3)


def test_isinstance_checks():
    def fn(x, y):
        if isinstance(x, torch.Tensor) and isinstance(y, (int, float)):
            return x * y
        return x
    run(fn, x3, 2)


def test_compiling_flag_reads_true():
    def fn(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1
    c = compile_fn(fn)
    assert torch.equal(c(x3), x3 + 1)


# ---- containers ----------------------------------------------------------------------------

def test_return_tuple_list_dict_nesting():
    def fn(x):
        return {"a": [x + 1, (x * 2, 3)], "b": None, "c": "s"}
    run(fn, x3, ops=2)


def test_list_methods():
    def fn(x):
        out = [x]
        out.append(x + 1)
        out.extend([x * 2, x * 3])
        out.insert(0, x - 1)
        last = out.pop()
        out.reverse()
        return out, last, len(out)
    run(fn, x3)


def test_list_index_slice_and_setitem():
    def fn(x):
        xs = [x, x + 1, x + 2, x + 3]
        xs[1] = xs[0] * 5
        return xs[1:3], xs[-1], xs[::2]
    run(fn, x3)


def test_unpack_ex():
    def fn(xs):
        a, *rest, b = xs
        return a + b, rest
    run(fn, [x3, x3 * 2, x3 * 3, x3 * 4])


def test_dict_methods():
    def fn(x):
        d = {"a": x}
        d["b"] = x + 1
        d.update({"c": x * 2})
        v = d.pop("a")
        return d.get("b"), d.get("zz", 7), "c" in d, list(d.keys()), v, d.setdefault("e", 5)
    run(fn, x3)


def test_dict_comprehension_and_merge():
    def fn(x):
        d = {k: x * i for i, k in enumerate("abc")}
        return {**d, "z": x}
    run(fn, x3)


def test_list_comprehension():
    def fn(xs):
        return [x * 2 for x in xs if x.shape[0] == 3]
    run(fn, [x3, x3 + 1])


def test_nested_comprehension_with_closure_var():
    def fn(x, n):
        return [[x * (i + j + n) for j in range(2)] for i in range(2)]
    run(fn, x3, 1)


def test_tuple_concat_and_repeat():
    def fn(x):
        t = (x,) + (x + 1,)
        l = [1] * 3 + [2]
        return t * 2, l
    run(fn, x3)


def test_mutating_input_list_is_replayed():
    def fn(xs):
        xs.append(xs[0] + 1)
        return len(xs)
    a, b = [x3], [x3]
    c = compile_fn(fn)
    assert c(a) == fn(b) == 2
    assert len(a) == 2 and torch.equal(a[1], b[1])


def test_mutating_input_dict_is_replayed():
    def fn(d):
        d["y"] = d["x"] * 2
        del d["x"]
        return d
    a, b = {"x": x3}, {"x": x3}
    c = compile_fn(fn)
    out = c(a)
    assert out is a and list(a) == ["y"] and same(a, fn(b))


def test_returned_list_identity_preserved():
    def fn(x):
        l = [x + 1]
        return l, l
    c = compile_fn(fn)
    a, b = c(x3)
    assert a is b


def test_sum_min_max_any_all_sorted():
    def fn(xs, ns):
        return sum(xs), min(ns), max(ns), any(ns), all(ns), sorted(ns), max(3, len(ns))
    run(fn, [x3, x3 * 2], [3, 1, 2])


def test_string_formatting_on_constants():
    def fn(x, name):
        key = f"{name}_{x.shape[0]:03d}"
        return {key: x + 1, "k" + str(2): x}
    run(fn, x3, "w")


def test_slice_object_on_tensor():
    def fn(x):
        return x[1:, :2], x[..., 0], x[None, :, 1]
    run(fn, m34)


def test_tensor_setitem():
    def fn(x):
        y = x.clone()
        y[0] = 5.0
        y[:, 1] = y[:, 2]
        return y
    run(fn, m34)


def test_dict_get_keys_views_in_result():
    def fn(d):
        return list(d.values()), tuple(d.keys())
    run(fn, {"a": x3, "b": 2}, frames=0)


# ---- functions -----------------------------------------------------------------------------

def helper_add(a, b=2, *, scale=1.0):
    return (a + b) * scale


def test_inline_global_function_with_defaults_and_kwargs():
    def fn(x):
        return helper_add(x) + helper_add(x, 3, scale=0.5)
    run(fn, x3)


def test_star_args_and_kwargs_call():
    def inner(*args, **kwargs):
        return args[0] * kwargs["k"] + len(args)

    def fn(x):
        args = (x, 1)
        kw = {"k": 3}
        return inner(*args, **kw) + inner(x, k=2)
    run(fn, x3)


def test_varargs_in_compiled_function():
    def fn(*xs, **opts):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out * opts.get("scale", 1)
    run(fn, x3, x3, x3, scale=2)


def test_closure_reads_outer_tensor_and_constant():
    w = torch.randn(3)
    k = 4

    def fn(x):
        return x * w + k
    c = run(fn, x3)
    assert "C['w']: Tensor(torch.float32, cpu, size=[3], stride=[1], requires_grad=False)" in c.guard_texts()
    assert "C['k'] == 4" in c.guard_texts()


def test_inner_function_and_lambda():
    def fn(x, n):
        def scale(t):
            return t * n

        sq = lambda t: t * t  # noqa: E731
        return sq(scale(x))
    run(fn, x3, 2)


def test_nonlocal_counter_in_inner_function():
    def fn(x):
        count = 0

        def bump(t):
            nonlocal count
            count += 1
            return t + count
        x = bump(x)
        x = bump(x)
        return x, count
    run(fn, x3)


def test_recursive_helper_inlined():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    def fn(x):
        return x * fact(4)
    run(fn, x3, ops=1)


def test_operator_module_functions():
    def fn(x):
        return operator.add(x, 1), operator.getitem([x, 2], 1), operator.mul(2, 3)
    run(fn, x3)


def test_getattr_hasattr_builtins():
    class Cfg:
        scale = 2.0

    cfg = Cfg()

    def fn(x):
        s = getattr(cfg, "scale", 1.0) + getattr(cfg, "missing", 10.0)
        return x * s if hasattr(cfg, "scale") else x
    run(fn, x3, ops=1)


def test_user_object_attributes_and_methods():
    class Scaler:
        def __init__(self, k):
            self.k = k

        def apply(self, t):
            return t * self.k

        @property
        def double(self):
            return self.k * 2

    def fn(s, x):
        return s.apply(x) + s.double
    run(fn, Scaler(3), x3)


# ---- outputs and empty graphs --------------------------------------------------------------

def test_returns_input_unchanged_no_graph():
    c = run(lambda x: x, x3, frames=0)
    assert c(x3) is x3


def test_constant_only_function_no_graph():
    def fn(a, b):
        return a * b + 1, "s", None
    run(fn, 2, 3, frames=0)


def test_returns_same_tensor_twice():
    def fn(x):
        y = x + 1
        return y, y
    c = compile_fn(fn)
    a, b = c(x3)
    assert a is b


def test_returns_input_and_result():
    def fn(x):
        return x, x.sin()
    c = run(fn, x3, ops=1)
    assert c(x3)[0] is x3


def test_graph_input_names_follow_sources():
    def fn(x, ys):
        return x + ys[0]
    c = run(fn, x3, [x3.clone()])
    names = [n.target for n in c.backend.graphs[0].graph.nodes if n.op == "placeholder"]
    assert names == ["L_x_", "L_ys_0_"]
    c = run(fn, x3, [x3])  # one tensor by two paths: one placeholder, as torch.compile's
    assert [n.target for n in c.backend.graphs[0].graph.nodes if n.op == "placeholder"] == ["L_x_"]


def test_grad_mode_context_manager():
    w = torch.randn(3, requires_grad=True)

    def fn(x):
        with torch.no_grad():
            y = x * w
        z = x * w
        return y, z
    c = compile_fn(fn)
    y, z = c(x3)
    assert not y.requires_grad and z.requires_grad
    assert torch.is_grad_enabled()
    assert same((y, z), fn(x3))


def test_autograd_through_compiled_graph():
    w = torch.randn(3, requires_grad=True)

    def fn(x):
        return (x * w).sin().sum()
    c = compile_fn(fn)
    c(x3).backward()
    g = w.grad.clone()
    w.grad = None
    fn(x3).backward()
    assert torch.equal(g, w.grad)


# ---- more programs -------------------------------------------------------------------------

def test_cell_argument_returned_and_used():
    def fn(x):
        g = lambda: x * 2  # noqa: E731  (x becomes a cell variable)
        return x, g()
    c = run(fn, x3, ops=1)
    assert c(x3)[0] is x3


def test_no_grad_around_no_tensor_work_is_empty():
    def fn(x):
        with torch.no_grad():
            n = x.shape[0]
        return n
    run(fn, x3, frames=0)


def test_set_grad_enabled_call_without_with():
    def fn(x):
        torch.set_grad_enabled(False)
        return x * 2
    c = compile_fn(fn)
    try:
        y = c(x3.clone().requires_grad_())
        assert not torch.is_grad_enabled() and not y.requires_grad
    finally:
        torch.set_grad_enabled(True)


def test_dtype_membership_and_methods_on_constants():
    def fn(x, name):
        if x.dtype in (torch.float16, torch.float32) and name.upper().startswith("A"):
            return x.to(torch.float64)
        return x
    run(fn, x3, "abc", ops=1)


def test_nan_float_constant_guard_holds():
    c = run(lambda x, f: x * f, x3, float("nan"))
    assert c.compiles == 1


def test_reversed_range_step_and_zip3():
    def fn(xs):
        out = 0
        for i in range(len(xs) - 1, -1, -2):
            out = out + xs[i]
        for a, b, k in zip(xs, reversed(xs), [1, 2, 3]):
            out = out + a * b * k
        return out
    run(fn, [x3, x3 + 1, x3 + 2])


def test_enumerate_with_start_and_list_of_tuples():
    def fn(x):
        pairs = list(enumerate([x, x * 2], start=1))
        return [i * t for i, t in pairs]
    run(fn, x3)


def test_size_comparisons_and_tuple_compare():
    def fn(x):
        if x.shape == (3, 4) and x.size() != torch.Size([1]) and (1, 2) < (1, 3):
            return x.sum()
        return x
    run(fn, m34, ops=1)


def test_kwargs_only_and_default_arguments_of_compiled_fn():
    def fn(x, *, scale=2, shift=None):
        y = x * scale
        return y if shift is None else y + shift
    run(fn, x3, ops=1)
    run(fn, x3, scale=3, shift=1, ops=2)


def test_type_and_is_on_classes():
    def fn(x):
        if type(x) is torch.Tensor and type(3) == int:
            return x + 1
        return x
    run(fn, x3, ops=1)


def test_while_over_list_pop():
    def fn(x):
        todo = [1, 2, 3]
        while todo:
            x = x * todo.pop()
        return x
    run(fn, x3, ops=3)


def test_global_tensor_is_a_graph_input():
    c = run(lambda x: x + GLOBAL_W, x3, ops=1)
    names = [n.target for n in c.backend.graphs[0].graph.nodes if n.op == "placeholder"]
    assert names == ["L_x_", "G_GLOBAL_W_"]


GLOBAL_W = torch.randn(3)


def test_tensor_iteration_in_for_loop():
    def fn(x):
        total = 0
        for row in x:
            total = total + row.max()
        return total
    run(fn, m34)


def test_dict_input_values_and_items_returned():
    def fn(d):
        return {k: v * 2 for k, v in d.items()}, len(d)
    run(fn, {"p": x3, "q": x3 + 1})


def test_torch_device_constant():
    def fn(x):
        return x.to(torch.device("cpu")) + 1, x.device == torch.device("cpu")
    run(fn, x3)


GLOBAL_LIST = []


def test_global_list_mutation_seen_by_later_reads_and_replayed():
    def fn(x):
        GLOBAL_LIST.append(x + 1)
        return len(GLOBAL_LIST), GLOBAL_LIST[-1]
    c = compile_fn(fn)
    GLOBAL_LIST.clear()
    n, last = c(x3)
    assert n == 1 and len(GLOBAL_LIST) == 1 and last is GLOBAL_LIST[0]
    assert torch.equal(last, x3 + 1)
    n, _ = c(x3)  # the list's length changed: recompiled, and right again
    assert n == 2 and len(GLOBAL_LIST) == 2 and c.compiles == 2
    GLOBAL_LIST.clear()


def test_same_input_read_twice_is_one_graph_input():
    def fn(xs):
        return xs[0] + xs[0]
    c = run(fn, [x3], ops=1)
    assert sum(n.op == "placeholder" for n in c.backend.graphs[0].graph.nodes) == 1


# ---- generators ----------------------------------------------------------------------------

def test_generator_expression_in_sum_and_tuple():
    def fn(xs):
        return sum(x * 2 for x in xs), tuple(x.shape[0] for x in xs)
    run(fn, [x3, x3 + 1])


def test_generator_is_lazy():
    def fn(x):
        g = (t.sin() for t in (x, x * 2))
        return next(g)  # the second sin() is never recorded (x * 2 is, then dropped: unused)
    run(fn, x3, ops=1)


def test_any_short_circuits_generator():
    def fn(x, flags):
        def check():
            yield flags[0]
            yield x.tolist()  # never reached: any() stops at the first True
        return x + 1 if any(check()) else x
    run(fn, x3, [True], ops=1)


def test_user_generator_function():
    def pairs(xs):
        for i in range(0, len(xs), 2):
            yield xs[i], xs[i + 1]

    def fn(xs):
        return [a * b for a, b in pairs(xs)]
    run(fn, [x3, x3 + 1, x3 + 2, x3 + 3], ops=2)


# ---- bytecode that differs between versions (3.13: pairs of locals, CALL_KW, TO_BOOL, ...) ----

def test_fstring_conversions_and_specs():
    """FORMAT_VALUE (3.11, 3.12); CONVERT_VALUE, FORMAT_SIMPLE, FORMAT_WITH_SPEC (3.13)."""
    def fn(x, name):
        n = x.shape[0]
        label = f"{name!r}:{n:>4}|{name!s}|{name!a}|{n}|{n!r:<3}|{3.5:.2f}{name}"
        return x * len(label), label
    run(fn, x3, "é")


def test_fstring_of_a_caught_exception():
    def fn(x):
        try:
            raise ValueError("bad", 3)
        except ValueError as e:
            return x + 1, f"{e}", f"{e!r}", f"{e!s}"
    run(fn, x3)


def test_lambda_defaults_kwdefaults_and_closure():
    """MAKE_FUNCTION's flags (3.11, 3.12), SET_FUNCTION_ATTRIBUTE (3.13)."""
    def fn(x):
        k = 2

        def inner(a, b=3, *, c=4, d=k):
            return a * b + c + d
        f = lambda t, s=0.5, *, u=k: t * s + u  # noqa: E731
        return inner(x), inner(x, 1, c=0), f(x), f(x, u=1)
    run(fn, x3)


def test_pairs_of_locals():
    """LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST, STORE_FAST_LOAD_FAST (3.13)."""
    def fn(x, y):
        a, b = x, y
        a, b = b, a
        c = [a * v for v in (b, a)]
        p, q, r = a, b, c[0]
        return a - b, p + q + r, c[1]
    run(fn, x3, x3 + 1)


def test_calls_with_keywords_on_methods_globals_and_locals():
    """CALL with KW_NAMES (3.11, 3.12), CALL_KW (3.13), with and without self."""
    def scale(t, factor=1.0, *, shift=0.0):
        return t * factor + shift

    def fn(x):
        g = scale
        return (x.sum(dim=0, keepdim=True), torch.clamp(x, min=-0.5, max=0.5),
                g(x, factor=2.0, shift=1.0), scale(x, shift=3.0), x.new_zeros(2, dtype=torch.float64))
    run(fn, m34)


def test_truth_tests_on_python_values():
    """TO_BOOL before jumps and `not` (3.13), COMPARE_OP's bool bit in conditions (3.13)."""
    def fn(x, items, flag, n):
        out = x
        if items:
            out = out + 1
        if not flag:
            out = out * 2
        if n < 3 and n > 0:
            out = out - n
        if 0 < n <= 5:
            out = out + 10
        inverted = not items
        both = flag or n
        return out, inverted, both, n == 2, (n < 3) is True
    run(fn, x3, [1], False, 2)
    run(fn, x3, [], True, 4)


def test_tensor_condition_breaks_at_the_jump():
    """A tensor tested for truth breaks the graph at the jump; 3.13's generated code converts
    it with TO_BOOL first (its conditional jumps take only a bool)."""
    def fn(x):
        y = x + 1
        if y.sum() > 0:
            return y * 2
        return y * 3
    c = compile_fn(fn, fullgraph=False)
    for t in (x3.abs(), -x3.abs() - 1):
        assert same(c(t), fn(t))


def test_super_method_and_attribute():
    """LOAD_SUPER_ATTR (3.12+): the method and the NULL in the version's order."""
    class Base(torch.nn.Module):
        scale = 2.0

        def forward(self, x):
            return x * self.scale

    class Child(Base):
        def forward(self, x):
            return super().forward(x) + 1
    m = Child()
    run(lambda x: m(x), x3)


def test_call_function_ex_forms():
    def fn(x, *args, **kwargs):
        def f(*a, **k):
            return sum(a) + sum(k.values())
        return f(*args, **kwargs) * x, f(x, *args), torch.cat([*args, x])
    run(fn, x3, x3 + 1, x3 + 2)


def test_closure_cells_passed_to_inner_functions():
    """3.13 loads a cell for a closure tuple with LOAD_FAST (LOAD_CLOSURE before)."""
    def fn(x):
        a = x + 1
        b = 2

        def inner():
            def inner2():
                return a * b
            return inner2() + 1
        return inner()
    run(fn, x3)


def test_comprehension_variable_shadowing_a_cell():
    """3.12+ inline the comprehension: its variable, a cell here (the lambdas capture it),
    borrows the slot of the function's own cell ``k`` and gives it back afterwards."""
    def fn(x):
        k = 1
        fns = [lambda: k * x for k in range(3)]
        after = (lambda: k)()
        return [f() for f in fns], after, x * k
    run(fn, x3)
