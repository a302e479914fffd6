"""pydynamo.debug.dump_src and the decompiler behind it.

For graph-break programs compiled while dumping: the dumped files exist and compile; the dumped
function of the transformed frame, run in the user's module (where it finds ``__compiled_fn_*``
and ``__resume_*``), returns what the original returns on new inputs and has the same side
effects; the cache entry's code has the dumped file as co_filename, with its lines.
"""
import os
import re
import subprocess
import sys
import textwrap
import traceback
import types

import pytest
import torch

import pydynamo
from pydynamo import _C, dump_src as dump_src_module
from pydynamo.decompile import Undecompilable, decompile
from pydynamo.dump_src import dump_src
from pydynamo.testing import CompileCounter, same


def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


LOG = []
COUNTER = 0


@pydynamo.disable
def native_scale(x, *, factor):
    return x * factor


@pydynamo.disable
def explode(x):
    raise ValueError("boom")


def straight(x, y):
    a = x + 1
    print("straight", a.shape)
    b = a * y
    LOG.append(b)
    return b, {"k": a}


def in_loop(x, n):
    for i in range(n):
        x = x * 2
        pydynamo.graph_break()
        x = x + i
    return x


def with_kwargs(x):
    y = native_scale(x + 1, factor=3.0)
    return y - 1, [y]


def bump_global(x):
    global COUNTER
    COUNTER = COUNTER + 1
    LOG.append(COUNTER)
    y = x + COUNTER
    print("bump")
    return y


def in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("in no_grad")
        y = y + 1
    return y


def branch(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def make_scaled(scale):
    def scaled(x):
        y = x * scale
        print("scaled")
        return y + scale
    return scaled


def calls_explode(x):
    y = x + 1
    explode(y)
    return y


CASES = {
    "straight": (straight, lambda s: (t(3, seed=s), t(3, seed=s + 1))),
    "loop": (in_loop, lambda s: (t(3, seed=s), 3)),
    "kwargs": (with_kwargs, lambda s: (t(3, seed=s),)),
    "global": (bump_global, lambda s: (t(3, seed=s),)),
    "no_grad": (in_no_grad, lambda s: (t(3, seed=s),)),
    "branch": (branch, lambda s: (t(3, seed=s).abs() * (1 if s % 2 else -1),)),
    "closure": (make_scaled(2.5), lambda s: (t(3, seed=s),)),
}


def reset_state():
    global COUNTER
    LOG.clear()
    COUNTER = 0


@pytest.fixture
def load_dumped():
    """Load the function a dumped frame file defines, running in ``fn``'s module globals (the
    file's constants are put there too, and removed after the test)."""
    added = []

    def load(frame, fn):
        ns = {}
        with open(frame.path, encoding="utf-8") as f:
            exec(compile(f.read(), frame.path, "exec"), ns)
        dumped = ns[frame.name]
        if frame.name.startswith("___closure_of_"):  # the factory takes the closure's values
            dumped = dumped(*[c.cell_contents for c in fn.__closure__])
        consts = {k: v for k, v in ns.items() if k.startswith("___") and k != frame.name}
        added.extend(k for k in consts if k not in fn.__globals__)
        fn.__globals__.update(consts)
        return types.FunctionType(dumped.__code__, fn.__globals__, dumped.__name__, None, dumped.__closure__)
    yield load
    for k in added:
        globals().pop(k, None)


def compile_all(directory):
    names = sorted(os.listdir(directory))
    for name in names:
        if name.endswith(".py"):
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as f:
                compile(f.read(), path, "exec")  # raises if not
    return names


@pytest.mark.parametrize("case", list(CASES))
def test_dumped_frame_recompiles_and_behaves_like_the_original(case, tmp_path, load_dumped, capsys):
    fn, make_args = CASES[case]
    reset_state()
    expected, log = fn(*make_args(1)), list(LOG)
    reset_state()
    with dump_src(tmp_path) as d:
        got = pydynamo.optimize(CompileCounter())(fn)(*make_args(1))
    assert same(got, expected) and same(LOG, log)
    assert dump_src_module.dumper is None

    frame = d.frames[0]
    assert frame.function == fn.__qualname__ and frame.decompiled
    assert os.path.basename(frame.path).startswith("frame_1_")
    for path in [frame.path, frame.guards, frame.graph, *frame.resumes]:
        assert path is not None and os.path.exists(path), path
    assert frame.resumes, "every case breaks the graph"
    with open(frame.guards, encoding="utf-8") as f:
        assert "L['x']" in f.read()
    assert os.path.basename(frame.graph) in compile_all(tmp_path)

    (entry,) = _C.get_cache_entries(fn.__code__)
    assert entry.code.co_filename == frame.path
    with open(frame.path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    def_name = frame.name.removeprefix("___closure_of_")
    assert lines[entry.code.co_firstlineno - 1].strip().startswith(f"def {def_name}(")

    dumped = load_dumped(frame, fn)
    for seed in (5, 6):  # branch: both signs, so both ways of its `if`
        reset_state()
        expected, log = fn(*make_args(seed)), list(LOG)
        reset_state()
        assert same(dumped(*make_args(seed)), expected) and same(LOG, log)
    capsys.readouterr()


def test_decompiled_source_reads_like_the_code(tmp_path):
    with dump_src(tmp_path) as d:
        pydynamo.optimize(CompileCounter())(in_no_grad)(t(3))
        pydynamo.optimize(CompileCounter())(with_kwargs)(t(3))
        pydynamo.optimize(CompileCounter())(branch)(t(3).abs())
    no_grad, kwargs, if_else = (open(f.path).read() for f in (d.frames[0], d.frames[2], d.frames[4]))
    # the print runs inside the `with` block entered again, which is left if it raises
    assert re.search(r"try:\n +___tmp_\d+\(___tmp_\d+\)\n +except BaseException as ___e\d+:\n"
                     r" +___tmp_\d+\.__exit__\(None, None, None\)\n +raise\n", no_grad)
    assert "___no_grad = ___load('torch.autograd.grad_mode', 'no_grad')" in no_grad
    assert re.search(r"___tmp_\d+ = ___tmp_\d+\(___tmp_\d+, factor=___tmp_\d+\)", kwargs)
    assert re.search(r"    if ___tmp_\d+:\n        return __resume_\w+\(___tmp_\d+\)\n    return __resume_", if_else)
    assert f"# test_dump_src.py:{branch.__code__.co_firstlineno + 2}  if y.sum() > 0:" in if_else


def test_resume_function_files(tmp_path, capsys):
    with dump_src(tmp_path) as d:
        pydynamo.optimize(CompileCounter())(straight)(t(3), t(3, seed=1))
        pydynamo.optimize(CompileCounter())(in_loop)(t(3), 3)
    reset_state()
    # a break between statements of the body: the file's def is the user's source from there
    path = d.frames[0].resumes[0]
    resume_fn = straight.__globals__[os.path.basename(path)[:-3]]
    src = open(path).read()
    assert "    b = a * y\n    LOG.append(b)\n    return b, {\"k\": a}\n" in src
    ns = dict(straight.__globals__)
    exec(compile(src, path, "exec"), ns)
    y, a = t(3), t(3, seed=2)
    assert same(ns[resume_fn.__code__.co_name](y, a), resume_fn(y, a)) and len(LOG) == 2
    # inside a loop: comments show where the bytecode resumes; the def only raises
    (loop_frame,) = [f for f in d.frames if f.function == "in_loop"]
    loop_file = open(loop_frame.resumes[0]).read()
    line = in_loop.__code__.co_firstlineno + 4
    assert f"# >> {line:4d}          x = x + i\n" in loop_file
    # the loop's range iterator is made again by the prologue with its own type (rebuild.py)
    assert "___stack0 = ___rebuild_iterator((___stack0[0], ___stack0[1]), 'range_iterator')" in loop_file
    assert "leaves the stack as [___stack0]" in loop_file
    ns = {}
    exec(compile(loop_file, "loop", "exec"), ns)
    with pytest.raises(NotImplementedError):
        ns[f"resume_in_in_loop_at_{line}"]((), t(3), 0)
    reset_state()
    capsys.readouterr()


def test_tracebacks_step_through_the_dumped_file(tmp_path):
    with dump_src(tmp_path) as d:
        with pytest.raises(ValueError) as info:
            pydynamo.optimize(CompileCounter())(calls_explode)(t(3))
    (hit,) = [f for f in traceback.extract_tb(info.value.__traceback__) if f.filename == d.frames[0].path]
    assert re.fullmatch(r"___tmp_\d+\(___tmp_\d+\)", hit.line)
    assert hit.name == "calls_explode"


def raises_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        raise ValueError("out")
    return y


def test_raise_in_with_block(tmp_path, load_dumped):
    """A break at a `raise` inside `with` blocks: the raise runs in a try that leaves them."""
    with dump_src(tmp_path) as d:
        with pytest.raises(ValueError) as info:
            pydynamo.optimize(CompileCounter())(raises_in_no_grad)(t(3))
    assert torch.is_grad_enabled()
    (frame,) = d.frames
    assert frame.decompiled and "raise ___tmp_" in open(frame.path).read()
    (hit,) = [f for f in traceback.extract_tb(info.value.__traceback__) if f.filename == frame.path]
    assert re.fullmatch(r"raise ___tmp_\d+", hit.line)
    with pytest.raises(ValueError, match="out"):
        load_dumped(frame, raises_in_no_grad)(t(3))
    assert torch.is_grad_enabled()


def test_no_dump_when_off(tmp_path, capsys):
    assert pydynamo.debug.dump_src is dump_src
    with dump_src(tmp_path):
        pass
    assert dump_src_module.dumper is None
    pydynamo.optimize(CompileCounter())(straight)(t(3), t(3, seed=1))
    (entry,) = _C.get_cache_entries(straight.__code__)
    assert entry.code.co_filename == straight.__code__.co_filename
    assert os.listdir(tmp_path) == []
    reset_state()
    capsys.readouterr()


def test_env_variable_dumps_the_whole_process(tmp_path):
    script = textwrap.dedent("""
        import torch, pydynamo
        def f(x):
            x = x + 1
            pydynamo.graph_break()
            return x * 2
        print(pydynamo.optimize("eager")(f)(torch.ones(2)).tolist())
    """)
    env = dict(os.environ, PYDYNAMO_DUMP_SRC=str(tmp_path / "dump"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[4.0, 4.0]"
    names = compile_all(tmp_path / "dump")
    assert {"frame_1_f.py", "frame_1_f.guards.txt", "frame_2_resume_in_f_at_6.py"} <= set(names)


# ---- the decompiler on code CPython compiled ----------------------------------------------------

G = 5


def straight_line(x, y, *args, k=1, **kw):
    z = x + y * 2 - (x - y)
    z += 3
    w = [x, y]
    d = {"a": x, "b": y}
    u, v, q, r = x < y, x is not y, x in w, not (x < y)
    f = f"{x!r:>10} and {y}"
    a1, b1 = w
    sl = w[0:1]
    w[0] = 7
    del w[1]
    global G
    G = G + k
    return z, w, d, {x, y}, (x,), u, v, q, r, -x, f, a1, b1, sl, args, kw, G


def if_else(x):
    if x > 0:
        y = "pos"
    else:
        y = "neg"
    return y


def test_decompile_cpython_code_runs_the_same():
    global G
    for fn, calls in [(straight_line, [((1, 2, 3), {"k": 2, "z": 1}), ((2.5, -1), {"k": 1})]),
                      (if_else, [((1,), {}), ((-1,), {})])]:
        d = decompile(fn.__code__, fn.__globals__)
        ns = dict(fn.__globals__)
        exec(compile("\n".join(d.constant_lines() + d.lines), "<decompiled>", "exec"), ns)
        for args, kwargs in calls:
            G = ns["G"] = 5
            assert ns[d.name](*args, **kwargs) == fn(*args, **kwargs)
            assert ns["G"] == G


def test_decompile_refuses_loops():
    def loop(xs):
        for x in xs:
            print(x)
    with pytest.raises(Undecompilable, match="FOR_ITER"):
        decompile(loop.__code__)


def test_graph_break_programs_of_the_tests(tmp_path, load_dumped, capsys):
    """Every program of test_graph_breaks.py: the dumped function of its frame, run on fresh
    inputs, returns and prints what the program does and changes its inputs alike; so does it
    where the resume functions it calls are replaced by their files' source, when that is
    the user's source."""
    from test_graph_breaks import CASES as PROGRAMS
    checked = source_resumes = 0
    for i, (fn, make, _) in enumerate(PROGRAMS):
        if not isinstance(fn, types.FunctionType):
            continue  # an nn.Module: its forward is a method
        pydynamo.reset()
        with dump_src(tmp_path / str(i)) as d:
            pydynamo.optimize(CompileCounter())(fn)(*make())
        frames = [f for f in d.frames if f.function == fn.__qualname__]
        if not frames:
            continue  # the frame ran eagerly
        compile_all(tmp_path / str(i))
        assert frames[0].decompiled, frames[0].path
        dumped = load_dumped(frames[0], fn)
        real = {name: fn.__globals__[name] for name in map(_resume_global, frames[0].resumes) if name}
        capsys.readouterr()
        eager_args, dumped_args = make(), make()
        expected = fn(*eager_args)
        eager_out = capsys.readouterr().out
        try:  # where a resume function's file is the user's source, it runs instead
            for name, resume_fn in real.items():
                fn.__globals__[name] = _runnable_resume(f"{tmp_path / str(i) / name}.py", resume_fn) or resume_fn
                source_resumes += fn.__globals__[name] is not resume_fn
            got = dumped(*dumped_args)
        finally:
            fn.__globals__.update(real)
        assert same(got, expected), fn.__name__
        assert capsys.readouterr().out == eager_out, fn.__name__
        assert same(list(dumped_args), list(eager_args)), fn.__name__
        checked += 1
    assert checked >= 70 and source_resumes >= 15  # (80 and 25 today)


def _resume_global(path):
    name = os.path.basename(path)[:-3]
    return name if name.startswith("__resume_") else None


def _runnable_resume(path, resume_fn):
    with open(path, encoding="utf-8") as f:
        src = f.read()
    if "Below: the user's source" not in src:
        return None
    ns = {}
    exec(compile(src, path, "exec"), ns)
    return types.FunctionType(ns[resume_fn.__code__.co_name].__code__, resume_fn.__globals__)


def test_decompiler_keeps_evaluation_order():
    """Expressions left on the stack across a statement (here one that rebinds a local they
    read) or reordered by SWAP are computed into temporaries first, in stack order."""
    from bytecode import Instr
    from pydynamo import bytecode_utils as bu

    def template(x):
        pass

    def call_f(arg):
        return [bu.create_load_global("f", push_null=True), Instr("LOAD_CONST", arg),
                *bu.create_call(1)]
    body = [*call_f("a"), Instr("LOAD_FAST", "x"), *call_f("b"), Instr("STORE_FAST", "x"),
            Instr("BUILD_TUPLE", 2), Instr("LOAD_FAST", "x"), *call_f("c"), *call_f("d"), Instr("SWAP", 2),
            Instr("BUILD_TUPLE", 4), Instr("RETURN_VALUE")]
    code = bu.assemble(template.__code__, body)
    calls = []

    def f(v):
        calls.append(v)
        return v.upper()
    expected = types.FunctionType(code, {"f": f})(1)
    assert expected == (("A", 1), "B", "D", "C") and calls == ["a", "b", "c", "d"]
    d = decompile(code)
    ns = {"f": f}
    exec(compile("\n".join(d.lines), "<decompiled>", "exec"), ns)
    calls.clear()
    assert ns["template"](1) == expected and calls == ["a", "b", "c", "d"]
