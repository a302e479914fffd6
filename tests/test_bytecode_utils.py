"""The version layer: decoding, instruction helpers and assembly, on 3.11, 3.12 and 3.13.

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
    if bu.PY311:
        assert "PRECALL" in names
    else:
        assert "LOAD_FAST_AND_CLEAR" in names  # inlined comprehension (PEP 709)


def test_for_iter_targets_end_for_from_312():
    insts = bu.decode(sample.__code__)
    for inst in insts:
        if inst.opname == "FOR_ITER":
            after = insts[inst.target].opname
            assert after == (after if bu.PY311 else "END_FOR")
            exit_ = bu.loop_exit(insts, inst.target)
            # where CPython goes on: past END_FOR (3.12), past END_FOR and POP_TOP (3.13)
            assert exit_ - inst.target == (0 if bu.PY311 else 2 if bu.PY313 else 1)


def _opcodes_run(fn, *args):
    """The names of the instructions of ``fn``'s frame that run, in order (opcode tracing)."""
    ops = {i.offset: i.opname for i in dis.get_instructions(fn)}
    seen = []

    def trace(frame, event, arg):
        if frame.f_code is fn.__code__:
            frame.f_trace_opcodes = True
            if event == "opcode":
                seen.append(ops.get(frame.f_lasti))
        return trace
    old = sys.gettrace()
    sys.settrace(trace)
    try:
        fn(*args)
    finally:
        sys.settrace(old)
    return seen


def test_loop_exit_is_where_cpython_goes_on():
    def loop(n):
        for _ in range(n):
            pass
        return 5
    insts = bu.decode(loop.__code__)
    for_iter = next(i for i in insts if i.opname == "FOR_ITER")
    ran = _opcodes_run(loop, 0)
    if not ran:  # 3.12.1 sends no opcode events to a frame that turns them on in its call event
        pytest.skip("opcode tracing gives no events on this interpreter")
    after = ran[ran.index("FOR_ITER") + 1]
    assert after == insts[bu.loop_exit(insts, for_iter.target)].opname


def test_local_accesses_in_order():
    def swap(a, b):
        a, b = b, a
        c = [a for a in b]
        return a + b, c
    accesses = [acc for i in bu.decode(swap.__code__) for acc in bu.local_accesses(i, swap.__code__)]
    assert ("r", "a") in accesses and ("w", "a") in accesses and ("w", "c") in accesses
    for inst in bu.decode(swap.__code__):
        got = bu.local_accesses(inst, swap.__code__)
        if inst.opname == "LOAD_FAST_LOAD_FAST":
            assert got == (("r", inst.arg[0]), ("r", inst.arg[1]))
        elif inst.opname == "STORE_FAST_STORE_FAST":
            assert got == (("w", inst.arg[0]), ("w", inst.arg[1]))
        elif inst.opname == "STORE_FAST_LOAD_FAST":
            assert got == (("w", inst.arg[0]), ("r", inst.arg[1]))


def test_pair_opcodes_store_top_of_stack_in_first_name():
    """STORE_FAST_STORE_FAST (a, b): the top of the stack goes to a (CPython's oparg >> 4)."""
    def pair(x, y):
        p, q = x, y
        return p, q
    insts = bu.decode(pair.__code__)
    pairs = [i for i in insts if i.opname == "STORE_FAST_STORE_FAST"]
    if not bu.PY313:
        assert not pairs
        return
    (store,) = pairs
    assert store.arg == ("q", "p")  # stack [x, y]: y (top) -> q, then x -> p
    assert pair(1, 2) == (1, 2)


def test_compare_to_bool_bit():
    def cond(a, b):
        if a < b:
            return 1
        return a < b
    ops = [(bu.compare_op_name(i), bu.compare_to_bool(i)) for i in bu.decode(cond.__code__)
           if i.opname == "COMPARE_OP"]
    assert [name for name, _ in ops] == ["LT", "LT"]
    assert [cast for _, cast in ops] == ([True, False] if bu.PY313 else [False, False])


def test_with_null_and_call_slots_match_cpython():
    def orig(a):
        return None
    fn_load = bu.create_instruction("LOAD_CONST", divmod)
    body = [*bu.with_null([fn_load], bu.create_instruction("PUSH_NULL")),
            bu.create_instruction("LOAD_FAST", "a"), bu.create_instruction("LOAD_CONST", 3),
            *bu.create_call(2), bu.create_instruction("RETURN_VALUE")]
    assert types.FunctionType(bu.assemble(orig.__code__, body), {})(7) == (2, 1)
    null = object()
    below, above = bu.with_null(["fn"], null)
    assert bu.call_slots(below, above, lambda v: v is null) == ("fn", None)
    assert bu.call_slots("method", "self", lambda v: v is null) == ("method", "self")


def test_make_closure_and_pop_jump_helpers():
    def outer():
        free = 10

        def inner(flag):
            return free
        return inner
    inner = outer()
    # a resume-style closure: new code with inner's free variables, made from a frame having them
    target = bu.assemble(inner.__code__, [bu.create_load_local("free", inner.__code__),
                                          bu.create_instruction("RETURN_VALUE")])
    yes, no = bu.new_label(), bu.new_label()
    body = [*bu.create_make_closure(target), bu.create_instruction("LOAD_FAST", "flag"),
            # a non-bool condition: 3.13's jumps need TO_BOOL first (create_pop_jump adds it)
            *bu.create_pop_jump(True, yes), bu.create_instruction("LOAD_CONST", 0),
            bu.create_jump_forward(no), yes, bu.create_instruction("LOAD_CONST", 1), no,
            bu.create_instruction("BUILD_TUPLE", 2), bu.create_instruction("RETURN_VALUE")]
    code = bu.assemble(inner.__code__, body)
    fn = types.FunctionType(code, {}, "x", None, inner.__closure__)
    made, picked = fn([0])
    assert made(None) == 10 and picked == 1
    assert fn([])[1] == 0


def test_method_load_native_form_order():
    def m(o):
        return o.upper()
    (load,) = [i for i in bu.decode(m.__code__) if bu.attr_arg(i)[1] == "upper"
               and i.opname in ("LOAD_ATTR", "LOAD_METHOD")]
    form = bu.native_form(load)
    assert form.pops == 1 and form.pushes == tuple(bu.with_null(["value"], "null"))


def test_set_function_attribute_and_make_function_flags():
    def maker():
        return lambda a=1, *, b=2: a + b
    insts = bu.decode(maker.__code__)
    (make,) = [i for i in insts if i.opname == "MAKE_FUNCTION"]
    if bu.PY313:
        assert bu.make_function_flags(make) == 0
        assert sorted(i.arg for i in insts if i.opname == "SET_FUNCTION_ATTRIBUTE") == [1, 2]
    else:
        assert bu.make_function_flags(make) == 0x03


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
