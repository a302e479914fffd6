"""The version layer: decoding, instruction helpers and assembly, on 3.11 and 3.12.

Needs only the ``bytecode`` package, so it also runs on an interpreter without torch
(``python3.12 -m pytest tests/test_bytecode_utils.py``).
"""
import dis
import importlib.util
import os
import sys
import types

import pytest

try:
    from pydynamo import bytecode_utils as bu
except ImportError:  # pydynamo/__init__ may need torch; the module itself does not
    _path = os.path.join(os.path.dirname(__file__), "..", "pydynamo", "bytecode_utils.py")
    _spec = importlib.util.spec_from_file_location("bytecode_utils", _path)
    bu = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(bu)


def sample(x, y=2, *args, k=1, **kw):
    total = 0
    for i in range(3):
        if i % 2 and x is not None:
            continue
        total += i
    z = [a * 2 for a in args if a]
    d = {n: v for n, v in kw.items()}

    def inner():
        return len(x) + total
    return inner() + y + len(z) + len(d) + k, x[1:2] if isinstance(x, list) else None


def outer():
    free = 5

    def closure_fn(a, b):
        c = a + free
        return (lambda: c + b)()
    return closure_fn


SAMPLES = [sample, outer(), outer, lambda a: a, dis.dis]


@pytest.mark.parametrize("fn", [f for f in SAMPLES if hasattr(f, "__code__")])
def test_round_trip_runs_the_same(fn):
    code = bu.round_trip(fn.__code__)
    assert code.co_varnames[:code.co_argcount] == fn.__code__.co_varnames[:fn.__code__.co_argcount]
    assert code.co_cellvars == fn.__code__.co_cellvars
    assert code.co_freevars == fn.__code__.co_freevars
    clone = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    if fn is sample:
        assert clone([1, 2], 3, 4, 0, k=2, q=1) == sample([1, 2], 3, 4, 0, k=2, q=1)


def test_decode_resolves_jump_targets():
    insts = bu.decode(sample.__code__)
    jumps = [i for i in insts if i.target is not None]
    assert jumps, "sample has loops and branches"
    for inst in jumps:
        assert 0 <= inst.target < len(insts)
        assert inst.arg is None
    names = {i.opname for i in insts}
    assert "FOR_ITER" in names and "RETURN_VALUE" in names
    if bu.PY312:
        assert "LOAD_FAST_AND_CLEAR" in names  # inlined comprehension (PEP 709)
    else:
        assert "PRECALL" in names


def test_for_iter_targets_end_for_on_312():
    insts = bu.decode(sample.__code__)
    for inst in insts:
        if inst.opname == "FOR_ITER":
            after = insts[inst.target].opname
            assert after == ("END_FOR" if bu.PY312 else after)


def test_argument_names():
    assert bu.argument_names(sample.__code__) == ("x", "y", "k", "args", "kw")


def test_arg_decoders():
    insts = bu.decode(sample.__code__)
    globals_read = {bu.global_arg(i)[1] for i in insts if i.opname == "LOAD_GLOBAL"}
    assert {"range", "isinstance", "len", "list"} <= globals_read
    ops = {bu.binary_op_name(i) for i in insts if i.opname == "BINARY_OP"}
    assert {"ADD", "REMAINDER", "INPLACE_ADD"} <= ops
    attrs = {bu.attr_arg(i)[1] for i in insts if i.opname in ("LOAD_ATTR", "LOAD_METHOD")}
    assert "items" in attrs


def _assemble_call(fn_name, arg_names, kw_names=()):
    body = [bu.create_load_global(fn_name, push_null=True)]
    body += [bu.create_instruction("LOAD_FAST", n) for n in arg_names]
    body += bu.create_call(len(arg_names), kw_names)
    body.append(bu.create_instruction("RETURN_VALUE"))
    return body


def test_assemble_keeps_signature_and_calls_a_global():
    def target(a, b):
        return a - b

    def orig(a, b):
        return None
    code = bu.assemble(orig.__code__, _assemble_call("target_fn", ["a", "b"]))
    assert code.co_varnames[:2] == ("a", "b") and code.co_argcount == 2
    fn = types.FunctionType(code, {"target_fn": target})
    assert fn(5, 3) == 2


def test_assemble_with_keywords_and_temps():
    def orig(a, b):
        return None
    body = [bu.create_load_global("f", push_null=True),
            bu.create_instruction("LOAD_FAST", "a"), bu.create_instruction("LOAD_FAST", "b"),
            *bu.create_call(2, ("y",)), bu.create_store_local("___tmp"),
            bu.create_instruction("LOAD_FAST", "___tmp"), bu.create_instruction("RETURN_VALUE")]
    code = bu.assemble(orig.__code__, body)
    assert "___tmp" in code.co_varnames
    fn = types.FunctionType(code, {"f": lambda x, y: (x, y)})
    assert fn(1, 2) == (1, 2)


def test_assemble_with_cells_and_free_vars():
    inner = outer()
    # loads the free variable and the cell-converted argument through their cells
    body = [bu.create_load_local("free", inner.__code__), bu.create_instruction("RETURN_VALUE")]
    code = bu.assemble(inner.__code__, body)
    assert code.co_freevars == inner.__code__.co_freevars
    assert code.co_cellvars == inner.__code__.co_cellvars
    fn = types.FunctionType(code, {}, "x", None, inner.__closure__)
    assert fn(1, 2) == 5


def test_method_call_helpers():
    def orig(obj):
        return None
    body = [bu.create_instruction("LOAD_FAST", "obj"), bu.create_load_method("upper"),
            *bu.create_call(0), bu.create_instruction("LOAD_FAST", "obj"),
            bu.create_load_attr("__len__"), bu.create_instruction("BUILD_TUPLE", 2),
            bu.create_instruction("RETURN_VALUE")]
    fn = types.FunctionType(bu.assemble(orig.__code__, body), {})
    upper, length = fn("ab")
    assert upper == "AB" and length() == 2


def test_generator_flags():
    def gen():
        yield 1
    assert bu.is_generator(gen.__code__) and not bu.is_generator(sample.__code__)
