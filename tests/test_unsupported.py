"""What is not supported raises Unsupported with a reason and the user's file:line."""
import inspect

import pytest
import torch

import _helper_module
from _compile import compile_fn
from pydynamo.exc import Unsupported
from pydynamo.testing import same
from pydynamo.translator import convert

x3 = torch.randn(3)


def unsupported(fn, *args, match):
    c = compile_fn(fn)
    with pytest.raises(Unsupported, match=match) as info:
        c(*args)
    assert c.backend.frame_count == 0, "a graph reached the backend before the failure"
    return info.value


def test_data_dependent_branch_reports_user_line():
    def fn(x):
        y = x * 2
        if y.sum() > 0:  # the line reported
            return y
        return -y
    err = unsupported(fn, x3, match="data-dependent")
    line = inspect.getsourcelines(fn)[1] + 2
    assert err.location == f"{__file__}:{line}"
    assert f"{__file__}:{line}" in str(err)


def test_item_is_data_dependent():
    unsupported(lambda x: x.sum().item() + 1, x3, match="item")


def test_print_is_a_side_effect():
    def fn(x):
        print("hi")
        return x
    unsupported(fn, x3, match="print")


def test_attribute_assignment_is_replayed_not_refused():
    class O:
        pass
    o = O()

    def fn(x):
        o.y = x + 1
        return x
    c = compile_fn(fn)
    assert same(c(x3), x3) and torch.equal(o.y, x3 + 1)


def test_assignment_to_a_tensor_property():
    # a Python attribute (x.foo = 1) is replayed (test_tensor_attributes.py); torch's own are refused
    unsupported(lambda x: setattr(x, "data", x + 1), x3, match="Tensor.data")


def test_global_assignment_is_replayed_not_refused():
    def fn(x):
        global G
        G = 1
        return x
    c = compile_fn(fn)
    assert same(c(x3), x3) and globals()["G"] == 1


def test_raise_and_try():
    def fn(x):
        raise ValueError("v")
    with pytest.raises(ValueError, match="v"):  # even fullgraph: the `raise` itself runs natively
        compile_fn(fn)(x3)

    def escapes_finally(x):
        try:
            raise ValueError
        finally:
            x = x + 1
    unsupported(escapes_finally, x3, match="raising ValueError")


def test_generator_frame():
    def gen(x):
        yield x
    with pytest.raises(Unsupported, match="generator"):
        convert(gen.__code__, globals(), __builtins__ if isinstance(__builtins__, dict) else __builtins__.__dict__,
                {"x": x3}, None, "eager")


def test_unknown_backend_name():
    with pytest.raises(ValueError, match="unknown pydynamo backend"):
        convert((lambda x: x).__code__, globals(), {}, {"x": x3}, None, "nope")


def test_error_in_inlined_function_has_both_frames():
    def inner(x):
        return x.tolist()

    def fn(x):
        return inner(x)
    err = unsupported(fn, x3, match="tolist")
    assert [name for _, _, name in err.user_stack] == ["inner", "fn"]


def test_shape_error_is_unsupported_not_crash():
    unsupported(lambda x, y: x @ y, torch.randn(2, 3), torch.randn(2, 3), match="raised RuntimeError")


def test_key_error_in_dict():
    unsupported(lambda d: d["missing"], {"a": x3}, match="KeyError")


def test_torch_global_state_setter_refused():
    def fn(x):
        torch.manual_seed(0)
        return x
    unsupported(fn, x3, match="global torch state|torch marks as never traced")


def test_function_from_another_module_guards_its_globals():
    def fn(x):
        return _helper_module.shifted(x)
    c = compile_fn(fn)
    assert same(c(x3), fn(x3))
    texts = c.guard_texts()
    assert "G['_helper_module'].shifted.__globals__['OFFSET'] == 1.5" in texts
    old = _helper_module.OFFSET
    try:
        _helper_module.OFFSET = 3.0
        assert same(c(x3), fn(x3)) and c.compiles == 2
    finally:
        _helper_module.OFFSET = old
