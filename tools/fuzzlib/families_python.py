"""Feature families about plain Python semantics: scalars, user objects (attributes added,
deleted, class patched, __class__ swapped), lists, dicts (OrderedDict, defaultdict, __missing__),
namedtuples, iterators, raised and caught exceptions, builtins and comprehensions, user
containers with dunder methods, helper functions (defaults, *args / **kwargs, generators,
closures, partial), aliasing of a shared list, exception classes and chaining, and methods looked
up through `self` and its classes (module and method targets). Each family is a function
fam_NAME(rng, snip, place); generate.FAMILIES lists them.
"""
from .program import pick

# Each family takes (rng, snip, place) and fills the snippet: setup text, a Var (made by `place`),
# body pieces, mutations. Body pieces see x (a tensor), n (a Python scalar), c (the argument dict
# A) and `out` (the result).


def fam_scalar(rng, s, place):
    s.var = place(rng.choice(["2", "3", "1", "0", "2.5"]))
    pick(rng, s, [
        "if $v > 1:\n    x = x * $v\nelse:\n    x = x + $v * 3",
        "for i in range($v):\n    x = x + i",
        "out.append($v * n)\nout.append(n // 2)",
        "if n % 2:\n    x = x + n\nout.append(n > $v)",
        "out.append(type($v))\nout.append(isinstance($v, int))",
        "$v = $v + 1",
        "out.append($v if $v else -1)",
    ])
    for value in rng.sample(["0", "1", "3", "2.5", "True", "-1", "None"], 3):
        s.mut(s.var.rebind(value))


def fam_object(rng, s, place):
    s.setup = ("class Obj$i:\n    k = 2\n\n    def __init__(self):\n        self.a = 1\n\n"
               "    def scale(self, t):\n        return t * self.k\n\n\nclass Sub$i(Obj$i):\n    k = 7\n"
               ).replace("$i", str(s.uid))
    s.var = place("Obj$i()".replace("$i", str(s.uid)))
    pick(rng, s, [
        "if getattr($v, 'flag', False):\n    x = x + 1\nelse:\n    x = x * 3",
        "out.append(getattr($v, 'a', -1))",
        "if hasattr($v, 'b'):\n    out.append($v.b * 2)",
        "out.append($v.scale(x))",
        "$v.calls = getattr($v, 'calls', 0) + 1",
        "$v.last = n",
        "out.append('a' in $v.__dict__)",
        "if isinstance($v, Obj$i):\n    out.append(type($v).k)",
        "out.append(getattr($v, 'k'))",
    ])
    s.mut("$p.flag = True", "$p.flag = False", "$p.a = 5", "if 'flag' in vars($p):\n    del $p.flag",
          "$p.b = 2.5", "if 'a' in vars($p):\n    del $p.a", "$p.k = 3", "Obj$i.k = 5", "Obj$i.flag = True",
          "$p.__class__ = Sub$i", "$p.__class__ = Obj$i",
          s.var.rebind("Obj$i()".replace("$i", str(s.uid))))


LIST_MUTS = ["$p.append(7)", "if $p:\n    $p.pop()", "$p.insert(0, 2)", "$p.clear()", "if $p:\n    $p[0] = 9"]


def fam_list(rng, s, place):
    s.setup = ("class Tens$i(list):\n    def append(self, v):\n        super().append(v * 10)\n\n"
               "    def __len__(self):\n        return super().__len__() + 100\n").replace("$i", str(s.uid))
    s.var = place(rng.choice(["[1, 2, 3]", "[3, 1]", "[]", "[1.5, 2]", f"Tens{s.uid}([1, 2])"]))
    pick(rng, s, [
        "out.append(len($v))\nif len($v) > 2:\n    x = x + $v[2]",
        "try:\n    out.append($v[3])\nexcept IndexError as e:\n    out.append(('IE', str(e)))",
        "try:\n    out.append($v.index(2))\nexcept ValueError as e:\n    out.append(('VE', str(e)))",
        "if 2 in $v:\n    x = x * 2",
        "$v.append(n)",
        "out.append(sum($v))",
        "for e in $v:\n    x = x + e",
        "out.append($v[:2])\nout.append(list($v))",
        "out.append($v[-1])",
        "if $v:\n    out.append($v[0])",
        "out.append($v.count(1))",
        "out.append($v[n:])\nout.append($v[::-1])",
    ])
    s.mut(*LIST_MUTS, s.var.rebind("[4, 2]"), s.var.rebind("(1, 2, 3)"))


def fam_dict(rng, s, place):
    s.setup = "class Dflt$i(dict):\n    def __missing__(self, key):\n        return -1\n".replace("$i", str(s.uid))
    s.var = place(rng.choice(["{'k': 1, 'j': 2}", "{'j': 2}", "{}", "collections.OrderedDict(k=1, j=2)",
                              "collections.defaultdict(int, k=1)", f"Dflt{s.uid}(j=2)"]))
    pick(rng, s, [
        "if 'k' in $v:\n    x = x + $v['k']",
        "out.append($v.get('k', 0))\nout.append($v.get('z'))",
        "try:\n    out.append($v['z'])\nexcept KeyError as e:\n    out.append(('KE', str(e)))",
        "out.append(sorted($v))\nout.append(len($v))",
        "out.append(list($v.items()))",
        "$v['seen'] = n",
        "out.append($v.pop('j', None))",
        "for k in $v:\n    out.append(k)",
        "out.append($v['k'])",
        "if $v.get('k') is None:\n    out.append('nok')",
        "out.append(list($v.keys()) == ['k', 'j'])",
        "if isinstance($v, collections.defaultdict):\n    out.append($v['m' + str(n)])",
        "out.append($v.setdefault('s', n))\nout.append(dict($v))",
        "$v.update(q=n)\nout.append(list($v.values()))",
        "out.append({**$v, 'k': -1})",
    ])
    s.mut("$p.update({'k': $p.pop('k', 0)})", "$p.setdefault('j', 7)", "$p[1] = 'int key'",
          "$p['z'] = 3", "$p.pop('k', None)", "$p['k'] = 2.5", "$p.clear()", "$p['j'] = 4",
          s.var.rebind("{'k': 5}"), s.var.rebind("{'z': 1, 'k': 0}"))


def fam_namedtuple(rng, s, place):
    s.setup = ("P$i = collections.namedtuple('P$i', ['a', 'b'])\n\n\nclass Q$i(P$i):\n"
               "    def __add__(self, other):\n        return Q$i(self.a + other[0], self.b + other[1])\n\n"
               "    @property\n    def total(self):\n        return self.a + self.b\n").replace("$i", str(s.uid))
    s.var = place(rng.choice(["P$i(1, 2)", "Q$i(2, 3)", "(1, 2)"]).replace("$i", str(s.uid)))
    pick(rng, s, [
        "out.append($v[0] + $v[1])\nx = x * $v[1]",
        "out.append(hasattr($v, 'a'))\nout.append(hasattr($v, 'total'))",
        "if hasattr($v, 'b'):\n    out.append($v.b)",
        "out.append($v + $v)",
        "out.append(type($v))\nout.append(isinstance($v, tuple))",
        "a, b = $v\nx = x + (a - b)",
        "out.append(getattr($v, '_fields', None))",
        "out.append(getattr($v, 'total', -1))",
        "try:\n    out.append($v[2])\nexcept IndexError as e:\n    out.append(('IE', str(e)))",
        "out.append($v.index(2) if 2 in $v else -1)",
        "if isinstance($v, P$i):\n    out.append($v._replace(a=n))",
        "out.append(tuple($v))\nout.append(len($v))",
    ])
    for value in ["P$i(3, 4)", "Q$i(1, 5)", "(1, 2)", "(2, 1)"]:
        s.mut(s.var.rebind(value.replace("$i", str(s.uid))))


def fam_iter(rng, s, place):
    s.var = place(rng.choice(["[1, 2, 3]", "(1, 2)", "[2]"]))
    pick(rng, s, [
        "it = iter($v)\nout.append(type(it).__name__)\nout.append(next(it, None))",
        "it = iter(range(n + 1))\nout.append(type(it) is type(iter(range(0))))\nx = x + sum(it)",
        "for i, e in enumerate($v):\n    x = x + i * e",
        "for a, b in zip($v, range(3)):\n    out.append(a * b)",
        "out.append(list(map(lambda e: e * 2, $v)))",
        "out.append(list(reversed($v)))\nout.append(type(reversed($v)).__name__)",
        "it = zip($v, $v)\nout.append(type(it) is zip)\nout.append(list(it))",
        "it = enumerate($v)\nout.append(isinstance(it, enumerate))\nout.append(next(it, None))",
        "it = map(str, $v)\nout.append(type(it).__name__)\nout.append(list(it))",
        "it = iter($v)\ntry:\n    while True:\n        x = x + next(it)\nexcept StopIteration:\n    out.append('done')",
        "d = {'a': 1, 'b': n}\nit = iter(d)\nout.append(type(it).__name__)\nout.append(list(it))",
        "out.append(type(iter({}.values())).__name__)\nout.append(type(iter({'q': 1}.items())).__name__)",
        "out.append([type(i).__name__ for i in (iter([]), iter(()), iter(range(2)), iter({}), iter(''))])",
        "it = iter($v)\nfor e in it:\n    if e > 1:\n        break\nout.append(list(it))",
    ])
    s.mut(*LIST_MUTS[:3], s.var.rebind("(5, 1)"), s.var.rebind("[0, 2, 4, 1]"))


def fam_raise(rng, s, place):
    s.var = place(rng.choice(["1", "2", "4"]))
    pick(rng, s, [
        "if $v > 3:\n    raise ValueError('too big: %r' % ($v,))",
        "assert n != 3, 'n is three'",
        "if not x.is_contiguous():\n    raise RuntimeError('non-contiguous input')",
        "if x.dtype == torch.bool:\n    raise TypeError('bool input')",
        "try:\n    raise KeyError(n)\nexcept KeyError as e:\n    out.append(repr(e))",
        "try:\n    if n > 1:\n        raise ValueError('n=%d' % n)\n    x = x + 1\nexcept ValueError as e:\n"
        "    out.append(str(e))\nfinally:\n    out.append('finally')",
        "try:\n    out.append([1, 2][n])\nexcept IndexError:\n    out.append('IE')",
        "try:\n    out.append({'a': 1}['b'])\nexcept KeyError as e:\n    out.append(str(e))",
        "try:\n    out.append([4, 5].index(n))\nexcept ValueError as e:\n    out.append(str(e))",
        "try:\n    out.append($v['k'])\nexcept TypeError as e:\n    out.append(str(e))",
    ])
    for value in ["5", "0", "3"]:
        s.mut(s.var.rebind(value))


def fam_builtins(rng, s, place):
    pick(rng, s, [
        "out.append(min(n, 2))\nout.append(max([n, 1, 3]))\nout.append(abs(-n))",
        "out.append(sorted([3, n, 1], reverse=True))\nout.append(sorted({'b': 1, 'a': n}, key=str))",
        "out.append(any(e > 2 for e in [n, 1]))\nout.append(all([n, 1]))",
        "out.append(divmod(7, n) if n else None)\nout.append(round(n))",
        "out.append(f'{n}:{x.shape[0]}')\nout.append('-'.join(str(d) for d in x.shape))",
        "out.append([i * 2 for i in range(3) if i != n])\nout.append({k: k * 2 for k in 'ab'})",
        "out.append(dict(zip('ab', [n, 2])))\nout.append(isinstance(x, torch.Tensor))",
        "first, *rest = [n, 1, 2]\nout.append(rest)\nout.append(sum([1, 2], n))",
        "if (mm := n * 2) > 3:\n    out.append(mm)",
        "if 0 < n <= 2:\n    x = x + 1",
        "if n == 0:\n    return $RET",
        "out.append(list(range(5))[::-2])\nout.append(set([n, 1, n]) == {1, n})",
        "out.append(type(n).__name__)\nout.append(int(n) + float(n))",
        "out.append(bool(x.shape))\nout.append(x.shape[0] if n > 1 else x.shape[-1])",
    ])


def fam_dunder(rng, s, place):
    s.setup = ("class Bag$i:\n    def __init__(self, items):\n        self.items = list(items)\n\n"
               "    def __len__(self):\n        return len(self.items)\n\n"
               "    def __contains__(self, v):\n        return v in self.items\n\n"
               "    def __getitem__(self, k):\n        return self.items[k]\n\n"
               "    def __iter__(self):\n        return iter(self.items)\n\n"
               "    def __getattr__(self, name):\n        if name.startswith('dyn_'):\n            return len(name)\n"
               "        raise AttributeError(name)\n\n"
               "    def __eq__(self, other):\n        return isinstance(other, Bag$i) and self.items == other.items\n\n"
               "    @property\n    def first(self):\n        return self.items[0] if self.items else None\n"
               ).replace("$i", str(s.uid))
    s.var = place(f"Bag{s.uid}([1, 2])")
    pick(rng, s, [
        "out.append(len($v))\nif $v:\n    x = x + $v[0]",
        "if 2 in $v:\n    out.append('has2')",
        "for e in $v:\n    x = x * e",
        "out.append($v.first)",
        "out.append(getattr($v, 'dyn_abc', None))\nout.append(hasattr($v, 'nope'))",
        "out.append($v == Bag$i([1, 2]))\nout.append(list($v))",
        "$v.items.append(n)",
    ])
    s.mut("$p.items.append(3)", "$p.items.clear()", "$p.items = [5]", s.var.rebind(f"Bag{s.uid}([])"),
          "Bag$i.first = property(lambda self: -1)", "$p.dyn_x = 1")


def fam_helper(rng, s, place):
    s.setup = ("def h$i(t, k=2, *rest, scale=1, **kw):\n    return t * k * scale + len(rest) + len(kw)\n\n\n"
               "def gen$i(k):\n    for j in range(k):\n        yield j * 2\n\n\n"
               "def outer$i(k):\n    def inner(t):\n        return t + k\n    return inner\n\n\n"
               "@torch.no_grad()\ndef ng$i(t):\n    return t * 2\n").replace("$i", str(s.uid))
    s.var = place(rng.choice(["lambda t: t + 1", f"h{s.uid}", f"outer{s.uid}(2)"]))
    pick(rng, s, [
        "out.append(h$i(x))\nout.append(h$i(x, 3, 4, scale=n))",
        "out.append(h$i(x, *[1, 2], **{'scale': 2, 'z': 1}))",
        "out.append(list(gen$i(n)))\nx = x + sum(gen$i(3))",
        "out.append(outer$i(n)(x))",
        "f = lambda t, k=n: t * k\nout.append(f(x))",
        "fs = [lambda t, j=j: t + j for j in range(2)]\nout.append([f(x) for f in fs])",
        "out.append(functools.partial(h$i, scale=3)(x))\nout.append(operator.itemgetter(0)([n, 2]))",
        "out.append($v(x))",
        "y = ng$i(x)\nout.append(y.requires_grad)\nout.append(torch.is_grad_enabled())",
    ])
    s.mut(s.var.rebind("lambda t: t * 3"), s.var.rebind(f"outer{s.uid}(5)"), s.var.rebind(f"h{s.uid}"))


def fam_alias(rng, s, place):
    s.setup = f"shared{s.uid} = [1, 2]\n"
    s.var = place(f"shared{s.uid}")
    s.watch.append(f"shared{s.uid}")
    pick(rng, s, [
        "shared$i.append(n)\nout.append(len($v))",
        "out.append($v is shared$i)",
        "$v.append(1)\nout.append(shared$i[-1])",
        "if len(shared$i) > 3:\n    x = x + 1",
    ])
    s.mut("shared$i.append(3)", s.var.rebind("[9]"), s.var.rebind(f"shared{s.uid}"), "$p.clear()")


def fam_exc(rng, s, place):
    s.setup = ("class Err$i(Exception):\n    def __init__(self, code):\n        super().__init__(f'code {code}')\n"
               "        self.code = code\n\n\ndef thrower$i(k):\n    if k > 1:\n        raise Err$i(k)\n    return k\n"
               ).replace("$i", str(s.uid))
    pick(rng, s, [
        "try:\n    out.append(thrower$i(n))\nexcept Err$i as e:\n    out.append(e.code)",
        "try:\n    thrower$i(n)\nexcept (KeyError, Err$i) as e:\n    out.append(type(e).__name__)\nelse:\n"
        "    out.append('else')\nfinally:\n    x = x + 1",
        "with contextlib.suppress(KeyError):\n    out.append({'a': 1}[str(n)])",
        "try:\n    try:\n        thrower$i(n)\n    except Err$i:\n        raise ValueError('wrapped')\n"
        "except ValueError as e:\n"
        "    out.append((str(e), type(e.__context__).__name__))",
        "out.append(thrower$i(n))",
        "try:\n    [][n]\nexcept LookupError as e:\n    out.append(str(e))",
        "try:\n    x = x + thrower$i(n)\nexcept Exception:\n    out.append('caught')\n    x = x * 2",
        "try:\n    1 / (n - n)\nexcept ZeroDivisionError as e:\n    out.append(str(e))",
        "err = None\ntry:\n    {}['q']\nexcept KeyError as e:\n    err = e\nout.append(repr(err))",
    ])


def fam_methods(rng, s, place):  # module and method targets: methods looked up through self and classes
    pick(rng, s, [
        "out.append(self.extra(x))",
        "out.append(type(self).__name__)\nout.append(isinstance(self, Base))",
        "out.append(getattr(self, 'helper', None))",
    ])
    s.mut("Base.extra = lambda self, t: t * 3", "$SELF.extra = lambda t: t * 4",
          "if 'extra' in vars($SELF):\n    del $SELF.extra", "type($SELF).extra = lambda self, t: t * 5",
          "$SELF.helper = 3")
