"""Arithmetic on symbolic ints (a changing counter attribute becomes a SymInt): divisions honour
Python's ZeroDivisionError whatever the backend, and math.cos/sin/tan/tanh/atan stay symbolic
(a learning-rate schedule of a step counter compiles once)."""
import math

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter


class _Counter:
    def __init__(self, n):
        self.n = n


def _outcomes(fn, backend, start, steps):
    c = _Counter(start)
    run = fn if backend is None else pydynamo.optimize(backend)(fn)
    out = []
    for _ in range(steps):
        try:
            out.append(run(c, torch.ones(2)))
        except ZeroDivisionError as e:
            out.append(("ZeroDivisionError", str(e)))
    return out


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and torch.allclose(x, y), (a, b)
        else:
            assert x == y, (a, b)


def _div(c, x):
    c.n -= 1
    return x * (1 / c.n)


def _floordiv(c, x):
    c.n -= 1
    return x * (7 // c.n) + (7 % c.n)


def _pow(c, x):
    c.n -= 1
    return x * (c.n ** -1)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("fn", [_div, _floordiv, _pow])
def test_division_by_a_symbolic_zero_raises(fn, backend):
    """The counter reaches 0 at the third call: Python raises; a compiled graph computed inf."""
    pydynamo.reset()
    expected = _outcomes(fn, None, 3, 5)
    assert ("ZeroDivisionError" in str(expected[2]))
    _same(expected, _outcomes(fn, backend, 3, 5))


def _cosine(c, x):
    c.n += 1
    return x * (1 + math.cos(math.pi * c.n / 10)) / 2 + math.atan(c.n) + math.sin(c.n) * math.tanh(c.n)


def test_math_of_a_counter_stays_symbolic():
    pydynamo.reset()
    expected = _outcomes(_cosine, None, 0, 6)
    cnt = CompileCounter()
    _same(expected, _outcomes(_cosine, cnt, 0, 6))
    assert cnt.frame_count == 2  # the counter a constant at first, a SymInt once it changed


def test_math_of_a_huge_counter_is_specialized():
    """math.cos(inf) raises where a symbolic cos is nan: an argument not provably finite (here
    a constant factor of 1e300 times the counter) keeps the value a guarded constant."""
    def f(c, x):
        c.n += 1
        return x * math.cos(c.n * 1e300)
    pydynamo.reset()
    expected = _outcomes(f, None, 0, 3)
    _same(expected, _outcomes(f, "eager", 0, 3))
    big = _Counter(10 ** 10)
    with pytest.raises(ValueError):
        f(big, torch.ones(2))
    pydynamo.reset()
    g = pydynamo.optimize("eager")(f)
    big = _Counter(0)
    g(big, torch.ones(2)), g(big, torch.ones(2))
    big.n = 10 ** 10
    with pytest.raises(ValueError):
        g(big, torch.ones(2))
