"""Control flow captured in one graph: try/except/else/finally, raise and assert, `with` blocks
left by an exception, match statements, generators and `yield from`, closures (nonlocal,
returned), import statements, and nn.Module's tree walks (named_parameters...).

Each program runs eagerly and compiled (fullgraph where capture is expected); results and
raised exceptions must be equal, and the counting backend says how many graphs were made.
Programs whose capture is refused still run, eagerly, with the same results.

PYTEST_DONT_REWRITE: the traced programs' own `assert` statements must stay plain asserts.
"""
import collections
import dataclasses
import sys
import traceback

import pytest
import torch

import pydynamo
from pydynamo.exc import Unsupported
from pydynamo.testing import CompileCounter


def outcome(fn, args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return ("raise", type(e), e.args)


def same_outcome(a, b):
    if a[0] != b[0]:
        return False
    if a[0] == "raise":
        return a[1:] == b[1:]
    return _same(a[1], b[1])


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b) and a.requires_grad == b.requires_grad
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def check(fn, *args, graphs=1, fullgraph=True):
    """Eager and compiled outcomes are equal; ``graphs`` graphs reached the backend."""
    pydynamo.reset()  # each call a first compile: no automatic dynamic sizes from the last
    cnt = CompileCounter()
    compiled = pydynamo.optimize(cnt, fullgraph=fullgraph)(fn)
    expected, got = outcome(fn, args), outcome(compiled, args)
    assert same_outcome(expected, got), (expected, got)
    assert cnt.frame_count == graphs, cnt.frame_count
    return got


def t(*shape, rg=False):
    return torch.arange(1.0, 1.0 + torch.Size(shape).numel()).reshape(shape).requires_grad_(rg)


# ---- try / except / else / finally -------------------------------------------------------------

def test_dict_key_error_caught():
    def f(x, d):
        try:
            y = d["b"]
        except KeyError as e:
            y = len(str(e)) + len(e.args)
        return x + y
    check(f, t(2), {"a": 1})
    check(f, t(2), {"a": 1, "b": 5})


def test_raise_except_else_finally():
    def f(x, flag):
        y = x + 1
        try:
            if flag:
                raise ValueError("boom", 2)
            y = y * 3
        except ValueError as e:
            y = y + len(e.args[0]) + e.args[1]
        else:
            y = y - 1
        finally:
            y = y * 2
        return y, flag
    check(f, t(2), True)
    check(f, t(2), False)


def test_exception_text_and_type():
    def f(x):
        try:
            {}["k"]
        except LookupError as e:
            return x, str(e), repr(e), f"{e}!", f"{e!r}", type(e) is KeyError, isinstance(e, KeyError)
    check(f, t(2), graphs=0)


def test_user_function_raising_caught_by_caller():
    def inner(v):
        if v > 2:
            raise ValueError(f"too big: {v}")
        return v

    def middle(x, v):
        return x * inner(v)  # no handler here: the exception passes through

    def f(x, v):
        try:
            return middle(x, v)
        except ValueError as e:
            return x - 1, str(e)
    check(f, t(2), 1)
    check(f, t(2), 5)


def test_enclosing_inlined_frame_catches():
    def raiser(d):
        return d["missing"]

    def catcher(x, d):
        try:
            return raiser(d)
        except KeyError:
            return x + 10

    def f(x, d):
        return catcher(x, d) * 2
    check(f, t(2), {"a": 1})


def test_except_clauses_in_order():
    class MyError(ValueError):
        pass

    def f(x, kind):
        try:
            if kind == 0:
                raise MyError("mine")
            if kind == 1:
                raise TypeError
            [1, 2][kind]
        except (KeyError, TypeError):
            return x + 1
        except ValueError as e:
            return x + 2, type(e).__name__, str(e)
        except Exception as e:
            return x + 3, type(e).__name__
        return x
    for kind in (0, 1, 5):
        check(f, t(2), kind)


def test_raise_from_and_context():
    def f(x):
        try:
            try:
                raise ValueError("inner")
            except ValueError as e:
                raise TypeError("outer") from e
        except TypeError as e2:
            return (x + 1, isinstance(e2.__cause__, ValueError), e2.__context__ is e2.__cause__,
                    e2.__suppress_context__)

    def g(x):
        try:
            try:
                {}["q"]
            except KeyError:
                [][1]
        except IndexError as e:
            return x, repr(e.__context__), e.__cause__ is None, e.__suppress_context__

    def h(x):
        try:
            try:
                raise KeyError(1)
            except KeyError:
                raise ValueError from None
        except ValueError as e:
            return x, e.__cause__ is None, e.__suppress_context__, type(e.__context__).__name__
    check(f, t(2))
    check(g, t(2), graphs=0)
    check(h, t(2), graphs=0)


def test_bare_raise_and_nested_handlers():
    def f(x):
        try:
            try:
                raise ValueError("a")
            except ValueError:
                x = x + 1
                raise
        except ValueError as e:
            return x * 2, e.args
    check(f, t(2))


def test_finally_runs_on_every_exit():
    def f(x):
        for i in range(4):
            try:
                if i == 1:
                    raise KeyError(i)
                if i == 3:
                    break
                x = x + i
            except KeyError:
                continue
            finally:
                x = x * 2
        return x

    def g(x):
        try:
            raise ValueError("dropped by the return in finally")
        finally:
            return x + 1  # noqa: B012
    check(f, t(2))
    check(g, t(2))


def test_modelled_operations_that_raise():
    def f(x, lst):
        out = []
        for op in range(6):
            try:
                if op == 0:
                    out.append(lst.index(7))
                elif op == 1:
                    out.append(lst[9])
                elif op == 2:
                    out.append((1, 2)[5])
                elif op == 3:
                    out.append(1 // (len(lst) - 2))
                elif op == 4:
                    out.append(int("nope"))
                else:
                    out.append([].pop())
            except (ValueError, IndexError, ZeroDivisionError) as e:
                out.append((type(e).__name__, str(e)))
        return x + len(out), out
    check(f, t(2), [1, 2])


def test_next_raises_stop_iteration():
    def f(x):
        it = iter([1, 2])
        total = 0
        try:
            while True:
                total += next(it)
        except StopIteration as e:
            return x + total, e.args
    check(f, t(2))


def test_assert_on_constants():
    def f(x, n):
        assert n >= 0, "n must be non-negative"
        try:
            assert n > 5, f"n={n} too small"
        except AssertionError as e:
            return x + n, str(e)
        return x
    check(f, t(2), 3)
    check(f, t(2), 7, graphs=0)


def test_with_block_left_by_an_exception_restores_grad_mode():
    def f(x):
        try:
            with torch.no_grad():
                y = x * 2
                raise RuntimeError("leave the block")
        except RuntimeError:
            pass
        return x * 3 + y  # grad mode is back on: the result requires grad

    def helper(x):
        with torch.no_grad():
            x * 2
            raise KeyError("k")

    def g(x):
        try:
            helper(x)
        except KeyError:
            pass
        return x + 1
    r = check(f, t(2, rg=True))[1]
    assert r.requires_grad and torch.is_grad_enabled()
    assert check(g, t(2, rg=True))[1].requires_grad


def test_exception_inside_a_comprehension():
    def f(x, d):
        try:
            return [d[k] for k in ("a", "b")]
        except KeyError as e:
            k = "unchanged"
            return x + len(e.args), k
    check(f, t(2), {"a": 1})


def test_graph_ops_inside_try_are_captured():
    def f(x, w):
        try:
            y = x @ w
            z = {"a": y}["b"]
        except KeyError:
            z = y.relu()
        return z
    check(f, t(2, 2), t(2, 2))


# ---- exceptions that leave the compiled frame ----------------------------------------------------

def test_uncaught_raise_is_raised_natively_with_the_users_line():
    def f(x, v):
        y = x + 1
        if v > 0:
            raise ValueError(f"bad {v}")  # the raising line
        return y
    check(f, t(2), 0)
    check(f, t(2), 1, graphs=1)  # fullgraph: the graph, then the `raise` itself, natively
    pydynamo.reset()
    with pytest.raises(ValueError) as info:
        pydynamo.optimize(CompileCounter(), fullgraph=True)(f)(t(2), 2)
    assert any("the raising line" in (fr.line or "") for fr in traceback.extract_tb(info.value.__traceback__))


def test_uncaught_exception_of_a_callee_breaks_at_the_call():
    def helper(v):
        raise KeyError(v)  # the callee's line

    def f(x, v):
        y = x * 2
        return y + helper(v)
    cnt = CompileCounter()
    with pytest.raises(KeyError) as info:
        pydynamo.optimize(cnt)(f)(t(2), 3)
    assert cnt.frame_count == 1
    assert any("the callee's line" in (fr.line or "") for fr in traceback.extract_tb(info.value.__traceback__))
    pydynamo.reset()
    with pytest.raises(Unsupported, match="raising KeyError"):
        pydynamo.optimize(CompileCounter(), fullgraph=True)(f)(t(2), 3)


def test_exception_escaping_a_finally_runs_the_frame_eagerly():
    log = []

    def f(x):
        try:
            x = x + 1
            raise ValueError("escapes")
        finally:
            log.append("finally")
    check(f, t(2), graphs=0, fullgraph=False)
    assert log == ["finally", "finally"]
    pydynamo.reset()
    with pytest.raises(Unsupported, match="raising ValueError"):
        pydynamo.optimize(CompileCounter(), fullgraph=True)(f)(t(2))


def test_translated_exception_runs_the_frame_eagerly():
    def f(x, d):
        y = x + 1
        try:
            return y + d["k"]
        except KeyError:
            raise ValueError("no k") from None
    check(f, t(2), {"k": 1})
    check(f, t(2), {}, graphs=0, fullgraph=False)


# ---- what is not simulated stays correct ---------------------------------------------------------

def test_exception_class_with_its_own_init_is_not_simulated():
    class CodedError(Exception):
        def __init__(self, code):
            super().__init__(f"code {code}")
            self.code = code

    def f(x):
        try:
            raise CodedError(3)
        except CodedError as e:
            return x + e.code
    check(f, t(2), graphs=0, fullgraph=False)


def test_exception_through_a_modelled_consumer_is_not_simulated():
    def gen():
        yield 1
        raise ValueError("from the generator")

    def f(x, out):
        try:
            out.extend(gen())  # Python appends as it goes: the model could keep partial results
        except ValueError:
            out.append("caught")
        return x + len(out)
    out, cnt = [], CompileCounter()
    assert torch.equal(pydynamo.optimize(cnt)(f)(t(2), out), t(2) + 2)
    assert out == [1, "caught"] and cnt.frame_count == 0


def test_exception_through_list_tuple_sum_is_simulated():
    def f(x, d):
        try:
            return x + sum(d[k] for k in ("a", "b")), tuple(d[k] for k in "a")
        except KeyError as e:
            return x - 1, str(e)
    check(f, t(2), {"a": 1})
    check(f, t(2), {"a": 1, "b": 2})


def test_exception_from_a_generator_in_a_for_loop_is_simulated():
    def gen(n):
        for i in range(n):
            yield i
        raise ValueError("done")

    def f(x):
        try:
            for v in gen(3):
                x = x + v
        except ValueError as e:
            x = x * 10
        return x
    check(f, t(2))


def test_stop_iteration_inside_a_generator_is_refused():
    def gen():
        yield 1
        raise StopIteration  # a RuntimeError in Python (PEP 479)

    def f(x):
        try:
            return x + sum(gen())
        except RuntimeError:
            return x - 1
    check(f, t(2), graphs=0, fullgraph=False)


def test_shape_error_inside_try_runs_eagerly():
    def f(x, w):
        try:
            return x @ w
        except RuntimeError:
            return x
    check(f, t(2, 3), t(2, 3), graphs=0, fullgraph=False)


# ---- generators ------------------------------------------------------------------------------------

def test_yield_from_generator_and_its_return_value():
    def inner(xs):
        for v in xs:
            yield v * 2
        return 7

    def outer(xs):
        r = yield from inner(xs)
        yield r
        yield from [10, 20]

    def f(x):
        return x + sum(outer([1, 2])), list(outer([x]))[0]
    check(f, t(2))


def test_generator_expressions_in_builtins():
    def f(x):
        return (any(v > 3 for v in [1, 5]), all(v > 0 for v in (1, 2)), tuple(v for v in range(3)),
                dict((k, i) for i, k in enumerate("ab")), list(i * x for i in range(2)),
                sum(v * x for v in (1, 2)), next((v for v in [4, 5] if v > 4), None))
    check(f, t(2))


def test_generator_with_finally_fully_consumed():
    log = []

    def gen():
        try:
            yield 1
            yield 2
        finally:
            log.append("closed")

    def f(x):
        return x + sum(gen())
    check(f, t(2))
    assert log == ["closed", "closed"]


def test_generator_abandoned_inside_try_runs_eagerly():
    log = []

    def gen():
        try:
            yield 1
            yield 2
        finally:
            log.append("closed")  # runs when the generator is closed, after the break

    def f(x):
        for v in gen():
            x = x + v
            break
        return x
    check(f, t(2), graphs=0, fullgraph=False)
    assert log == ["closed", "closed"]


def test_generator_abandoned_outside_try_is_captured():
    def gen():
        yield 1
        yield 2

    def f(x):
        g = gen()
        return x + next(g)
    check(f, t(2))


# ---- closures ------------------------------------------------------------------------------------

def test_nonlocal_in_a_closure_made_in_the_trace():
    def f(x):
        total = 0

        def add(v):
            nonlocal total
            total += v
        add(1)
        add(x)
        return total
    check(f, t(2))


def make_counter():
    n = 0

    def bump():
        nonlocal n
        n += 1
        return n
    return bump


def test_nonlocal_store_to_a_pre_existing_cell_is_replayed():
    bump = make_counter()

    def f(x):
        return x + bump() * 10 + bump()
    cnt = CompileCounter()
    c = pydynamo.optimize(cnt, fullgraph=True)(f)
    assert c(t(1))[0] == 1 + 10 + 2
    assert bump() == 3  # the cell holds what eager would have left
    assert c(t(1))[0] == 1 + 40 + 5 and bump() == 6


def test_nonlocal_store_of_the_compiled_function_itself():
    def outer():
        k = 0

        def f(x):
            nonlocal k
            k += 1
            return x + k

        def read():
            return k
        return f, read
    f, read = outer()
    c = pydynamo.optimize(CompileCounter(), fullgraph=True)(f)
    assert c(t(1))[0] == 2 and read() == 1
    assert c(t(1))[0] == 3 and read() == 2


def test_cell_shared_by_the_compiled_function_and_a_callee_is_not_stored_to():
    def outer():
        k = 0

        def inc():
            nonlocal k
            k += 1

        def f(x):
            inc()
            return x + k
        return f, inc
    f, _ = outer()
    cnt = CompileCounter()
    c = pydynamo.optimize(cnt)(f)
    assert c(t(1))[0] == 2 and c(t(1))[0] == 3


def test_closure_made_in_the_trace_is_returned():
    def f(x, scale=3):
        k = x + 1
        count = 0

        def inner(y, *, bias: float = 0.5) -> torch.Tensor:
            nonlocal count
            count += 1
            return y * k * scale + bias + count

        def peek():
            return count
        return inner, peek
    cnt = CompileCounter()
    inner, peek = pydynamo.optimize(cnt, fullgraph=True)(f)(t(2))
    e_inner, e_peek = f(t(2))
    assert torch.equal(inner(t(2)), e_inner(t(2))) and peek() == e_peek() == 1  # one shared cell
    assert inner.__name__ == "inner" and inner.__kwdefaults__ == {"bias": 0.5}
    assert inner.__annotations__ == e_inner.__annotations__
    assert cnt.frame_count == 1


# ---- import statements ---------------------------------------------------------------------------

def test_imports_of_loaded_modules():
    def f(x):
        import math
        import os.path
        from math import pi as PI
        import torch.nn.functional as F
        return F.relu(x - 2) * math.e + PI + len(os.path.sep)
    check(f, t(3))


def test_import_guards_sys_modules():
    import types
    fake = types.ModuleType("pydynamo_test_fake_mod")
    fake.VALUE = 1
    sys.modules["pydynamo_test_fake_mod"] = fake
    try:
        def f(x):
            import pydynamo_test_fake_mod
            return x + pydynamo_test_fake_mod.VALUE
        cnt = CompileCounter()
        c = pydynamo.optimize(cnt, fullgraph=True)(f)
        assert c(t(1))[0] == 2
        fake.VALUE = 5
        assert c(t(1))[0] == 6
        other = types.ModuleType("pydynamo_test_fake_mod")
        other.VALUE = 10
        sys.modules["pydynamo_test_fake_mod"] = other
        assert c(t(1))[0] == 11 and cnt.frame_count == 3
    finally:
        del sys.modules["pydynamo_test_fake_mod"]


def test_import_of_a_module_not_loaded_is_refused():
    def f(x):
        import pydynamo_test_never_imported  # noqa: F401
        return x
    with pytest.raises(Unsupported, match="not imported yet"):
        pydynamo.optimize(CompileCounter(), fullgraph=True)(f)(t(1))


# ---- match statements ----------------------------------------------------------------------------

@dataclasses.dataclass
class Point:
    x: int
    y: int


Pair = collections.namedtuple("Pair", "a b")


def test_match_sequences_mappings_and_literals():
    def f(x, v):
        match v:
            case [a, b]:
                return x + a + b
            case [a, *rest]:
                return x + a + len(rest)
            case {"k": kk, **rest}:
                return x + kk + len(rest)
            case 1 | 2:
                return x * 2
            case str() as s if len(s) > 2:
                return x - len(s)
            case _:
                return x * 0
    for v in ([1, 2], (3, 4, 5, 6), {"k": 3, "z": 1}, 2, "long", "s", 3.5):
        check(f, t(2), v)


def test_match_class_patterns():
    def f(x, p):
        match p:
            case Point(1, y=yy):
                return x + yy
            case Point(x=px, y=py):
                return x + px * py
            case Pair(a, b):
                return x + a - b
            case int(n):
                return x * n
            case torch.Tensor():
                return x + p
        return x
    for p in (Point(1, 5), Point(2, 5), Pair(7, 1), 3, t(2)):
        check(f, t(2), p)


# ---- nn.Module tree walks ------------------------------------------------------------------------

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(2, 2)
        self.b = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
        self.c = self.a  # the same module twice
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x):
        total = sum(p.sum() for p in self.parameters())
        names = [n for n, _ in self.named_parameters()]
        bufs = [n for n, _ in self.named_buffers()]
        mods = [n for n, _ in self.named_modules()]
        kids = [type(m).__name__ for m in self.children()]
        return x * total, names, bufs, mods, kids, len(list(self.buffers(recurse=False)))


def test_module_tree_methods():
    net = Net()
    cnt = CompileCounter()
    got = pydynamo.optimize(cnt, fullgraph=True)(net)(t(2))
    assert _same(got, net(t(2))) and cnt.frame_count == 1


def test_tied_parameters_are_listed_once_and_guarded():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Linear(2, 2, bias=False)
            self.dec = torch.nn.Linear(2, 2, bias=False)
            self.dec.weight = self.enc.weight

        def forward(self, x):
            return x * len(list(self.parameters()))
    m = Tied()
    cnt = CompileCounter()
    c = pydynamo.optimize(cnt, fullgraph=True)(m)
    assert c(t(2))[0] == 1
    m.dec.weight = torch.nn.Parameter(m.enc.weight.detach().clone())  # untied: two parameters
    assert c(t(2))[0] == 2 and cnt.frame_count == 2


def test_relative_import_inside_a_package(tmp_path, monkeypatch):
    pkg = tmp_path / "pydynamo_test_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "consts.py").write_text("SCALE = 3\n")
    (pkg / "model.py").write_text(
        "def f(x):\n"
        "    from .consts import SCALE\n"
        "    from . import consts\n"
        "    return x * SCALE + consts.SCALE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import pydynamo_test_pkg.model as model
    try:
        check(model.f, t(2))
    finally:
        for name in ("pydynamo_test_pkg", "pydynamo_test_pkg.model", "pydynamo_test_pkg.consts"):
            sys.modules.pop(name, None)


def test_exception_attributes_set_by_the_class():
    def f(x):
        try:
            raise OSError(2, "nope", "file.txt")
        except FileNotFoundError as e:
            return x, e.args, e.errno, e.filename, str(e), type(e).__name__
    check(f, t(2), graphs=0)
