"""Feature family about values alive at a graph break (issue 39): functions, cells, iterators,
C iterators, generators and bound methods made before a data-dependent break and used after it,
with a value they read rebound between calls (a resume function must see it, and must not be
compiled again for each call). See families_tensor.py for the conventions (x a tensor, n a
Python scalar, c the argument dict).
"""
from .program import pick

# a data-dependent break (Tensor.__int__ reads the data)
_B = "b$i = int((x != 0).sum())\n"


def fam_rebuild(rng, s, place):
    s.var = place(rng.choice(["2", "3", "0.5", "-1"]))
    s.setup = "def gen$i(a, k):\n    for j in range(3):\n        yield a + j * k\n".replace("$i", str(s.uid))
    pick(rng, s, [
        "f$i = lambda t, s=$v: t * s + n\n" + _B + "out.append(f$i(b$i))",
        "k$i = $v\ndef inc$i():\n    nonlocal k$i\n    k$i = k$i + 1\n    return k$i\ninc$i()\n" + _B
        + "out.append(inc$i())\nout.append(k$i)",
        "it$i = iter([n, $v, 3])\nout.append(next(it$i))\n" + _B + "out.append(list(it$i))",
        "it$i = map(lambda t: t * $v, [1, n, 3])\nout.append(next(it$i))\n" + _B
        + "out.append(list(it$i))\nout.append(type(it$i).__name__)",
        "it$i = enumerate([n, $v], 1)\nout.append(next(it$i))\n" + _B + "out.append(list(it$i))\n"
        "out.append(type(it$i).__name__)",
        "it$i = zip([n, $v], 'ab')\nout.append(next(it$i))\n" + _B + "out.append(list(it$i))",
        "g$i = gen$i(n, $v)\nout.append(next(g$i))\n" + _B + "out.append(list(g$i))\nout.append(type(g$i).__name__)",
        "ap$i = out.append\n" + _B + "ap$i($v)\nap$i(b$i)",
        "cnt$i = itertools.count($v)\nout.append(next(cnt$i))\n" + _B + "out.append(next(cnt$i))",
    ], k=(1, 2))
    for value in rng.sample(["0", "1", "3", "2.5", "-2"], 3):
        s.mut(s.var.rebind(value))
