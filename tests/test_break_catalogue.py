"""The graph-break catalogue (pydynamo/breaks.py): every break has a stable id, and the docs
are generated from it.

The static test reads every place in pydynamo/ that builds an Unsupported (or refuses in a
polyfill) and checks that its message, with each formatted value replaced by a stand-in,
reaches a specific entry: a new raise site with a new kind of message fails here until the
registry has a pattern for it.
"""
import ast
import logging
import pathlib
import re
import subprocess
import sys

import pytest
import torch

import pydynamo
from pydynamo import breaks, exc

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pydynamo"
VALUE = "X"  # stands for a formatted value: matches \w+, \S+ and .*

CLASSES = {name: getattr(exc, name) for name in (
    "Unsupported", "DataDependentError", "SideEffectError", "DisabledFunctionError",
    "UnmodelledCallError", "UnsupportedOpcodeError", "ExceptionRaised")}
CLASSES["refuse"] = CLASSES["unsupported"] = exc.Unsupported  # polyfills.refuse, exc.unsupported

# Sites whose message is passed through or names only values: the catch-all is right for them.
GENERIC = {
    ("exc.py", None),  # unsupported(reason): a helper
    ("exc.py", "X inside X"),  # ExceptionRaised.opaque: "raising ... inside ...", PD407 at run time
    ("variables/builtin.py", "X() of X"),  # a builtin called on a tracker it does not handle
    ("variables/stdlib.py", None),  # polyfills.refuse(reason): the polyfill's message
    ("variables/exceptions.py", "X: X"),  # an exception class of Python's own, with its message
    ("variables/ctx.py", "X: X"),  # binding a context manager's arguments: Python's TypeError
    ("variables/builtin.py", "X of X"),  # a builtin applied to a tracker it does not handle
    ("variables/objects.py", "X of X"),  # a special method of a builtin type on such a tracker
    ("variables/stdlib.py", "X of X"),
}


def _function_strings(fn):
    """name -> the message template of a local assigned exactly once to a string in ``fn``."""
    found = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            found.setdefault(node.targets[0].id, []).append(node.value)
    return {k: v[0] for k, v in found.items() if len(v) == 1}


def _template(node, names, depth=0):
    """The message ``node`` builds, with VALUE for what is only known at run time; None if it
    is not a string expression at all."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else
                       (isinstance(v.value, ast.Name) and _template(v.value, names, depth)) or VALUE
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (_template(node.left, names, depth) or VALUE) + (_template(node.right, names, depth) or VALUE)
    if isinstance(node, ast.Name) and node.id in names and depth < 3:
        return _template(names[node.id], names, depth + 1)
    return None


def raise_sites():
    """(path, line, class name, template) of every Unsupported-family construction."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        owner = {}
        for fn in funcs:  # innermost function of each node (walk order: outer before inner)
            for node in ast.walk(fn):
                owner[id(node)] = fn
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name not in CLASSES or (name == "refuse" and path.name != "polyfills.py"):
                continue
            if name == "ExceptionRaised":
                template = "raising X"  # its reason is always f"raising {var.describe()}"
            else:
                fn = owner.get(id(node))
                names = _function_strings(fn) if fn else {}
                template = _template(node.args[0], names) if node.args else None
            out.append((str(path.relative_to(PACKAGE)), node.lineno, name, template))
    return out


def test_every_raise_site_has_a_specific_entry():
    sites = raise_sites()
    assert len(sites) > 400  # the extraction found the sites
    missing, generic = [], []
    for path, line, name, template in sites:
        entry = breaks.entry_for(CLASSES[name], template) if template is not None else None
        if (path, template) in GENERIC:
            continue
        if entry is None or entry.catch_all:
            (generic if entry else missing).append(f"{path}:{line} {name}({template!r}) -> "
                                                   f"{entry.id if entry else None}")
    assert not missing and not generic, "\n".join(missing + generic)


def test_generic_sites_still_exist():
    """The allowlist names sites that exist: an entry left behind by a rewrite is dropped."""
    present = {(path, template) for path, _, _, template in raise_sites()}
    assert GENERIC <= present, GENERIC - present


@pytest.mark.parametrize("cls, reason, expected", [
    (exc.DataDependentError, "data-dependent control flow: branching on the value of a tensor", "PD101"),
    (exc.DataDependentError, "Tensor.item() needs the tensor's data (data-dependent)", "PD102"),
    (exc.SideEffectError, "print() is I/O (a side effect)", "PD301"),
    (exc.UnmodelledCallError, "call to time.time, a C or library function pydynamo does not model",
     "PD201"),
    (exc.UnsupportedOpcodeError, "LOAD_BUILD_CLASS: class definitions inside compiled code", "PD401"),
    (exc.Unsupported, "numpy mean gives float32 where torch's NumPy layer gives float64", "PD901"),
    (exc.Unsupported, "torch.Tensor.add_ changes an input in place while inputs x and y, two objects, "
     "share memory", "PD303"),
    (exc.Unsupported, "Config.__getattribute__ is a function, not modelled", "PD601"),
    # a wrapper decides over what it wraps
    (exc.Unsupported, "data-dependent control flow: branching on the value of a tensor; the graph "
     "could not be broken there: a graph break inside a `with` block of a user's context manager",
     "PD402"),
    (exc.Unsupported, "raising KeyError('a'), which the compiled frame does not catch: Python raises "
     "it natively", "PD407"),
    # nothing specific: the class's catch-all
    (exc.Unsupported, "something new", "PD001"),
    (exc.DataDependentError, "something new", "PD002"),
    (exc.SideEffectError, "something new", "PD003"),
])
def test_lookup(cls, reason, expected):
    e = cls(reason)
    assert e.id == expected
    assert e.explanation == breaks.BY_ID[expected].explanation


def test_ids_unique_and_well_formed():
    ids = [e.id for e in breaks.ENTRIES]
    assert len(ids) == len(set(ids)) and 30 <= len(ids) <= 80
    for e in breaks.ENTRIES:
        assert re.fullmatch(r"PD\d{3}", e.id), e.id
        assert e.title and e.explanation and e.hint, e.id
        assert e.patterns or e.any_of or e.catch_all, e.id
        if e.example:  # the documented example is one of the entry's own messages
            cls = getattr(exc, e.any_of[0] if e.any_of else e.kind)
            found = breaks.entry_for(cls, e.example)
            assert found is e, (e.id, found.id, e.example)
    # every exc.py class reaches a catch-all of its own (or the base's)
    for name in ("Unsupported", "DataDependentError", "SideEffectError", "DisabledFunctionError",
                 "UnmodelledCallError"):
        assert breaks.entry_for(getattr(exc, name), "\x00").catch_all


def test_hint_site_then_registry():
    assert exc.Unsupported("print() is I/O (a side effect)").hint == breaks.BY_ID["PD301"].hint
    assert exc.Unsupported("print() is I/O (a side effect)", "mine").hint == "mine"
    e = exc.Unsupported("Tensor.item() needs the tensor's data (data-dependent)")
    e.hint = "set later"
    assert e.hint == "set later"
    assert "id: PD102" in str(e) and str(e).endswith("hint: set later")


def test_backend_failure_has_an_id():
    e = exc.BackendCompilerFailed(lambda gm, ex: gm, RuntimeError("boom"))
    assert e.id == "PD010"


def _branch_and_print(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    print("side effect")
    return y.relu()


def test_explain_shows_ids():
    out = pydynamo.explain(_branch_and_print)(torch.ones(3))
    ids = [b.id for b in out.break_reasons]
    assert ids == ["PD101", "PD301"], out.break_reasons
    text = str(out)
    assert "Reason [PD101]: data-dependent control flow" in text
    assert "Reason [PD301]: print() is I/O" in text
    assert f"Hint: {breaks.BY_ID['PD301'].hint}" in text


def test_graph_break_log_shows_id(caplog):
    pydynamo.reset()
    try:
        with caplog.at_level(logging.INFO, logger="pydynamo.graph_breaks"):
            pydynamo.optimize("eager")(_branch_and_print)(torch.ones(3))
    finally:
        pydynamo.reset()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "id: PD101" in text and "id: PD301" in text, text


def test_docs_are_current():
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_break_docs.py"), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_docs_list_every_id():
    text = (ROOT / "docs" / "graph-breaks.md").read_text()
    for e in breaks.ENTRIES:
        assert f"## {e.id}" in text and e.hint in text.replace("\n", " ")
