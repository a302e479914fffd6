"""Feature family about attributes of C-implemented objects (and the other objects pydynamo
models rather than holds): hasattr / getattr with a default / attribute loads / type() /
isinstance / callable() on partials, itemgetters, builtins, bound C methods, method-wrappers,
descriptors (property, staticmethod, classmethod, member, getset, method and wrapper
descriptors), user functions, lambdas and bound methods, iterators (range_iterator, zip, map,
enumerate, itertools.chain), dict views, generators, modules, classes, dtypes and devices, each
read from the program's state and, in other pieces, made in the trace; the answers are
appended and branched on. Mutations give the object an attribute (where it takes one: a
partial, a function, a module; a C object refuses, in both runs alike) or rebind it to
another object of the pool. See families_tensor.py for the conventions (x a tensor, n a
Python scalar, c the argument dict).
"""
from .program import pick

# objects of the state, made at module level (uf$i and gen$i are defined by the setup)
POOL = ["functools.partial(operator.add, 1)", "functools.partial(uf$i, b=2)", "operator.itemgetter(1)",
        "operator.attrgetter('real')", "len", "isinstance", "[].append", "{}.get", "torch.add",
        "(1).__add__", "[].__len__", "property(uf$i)", "staticmethod(uf$i)", "classmethod(uf$i)",
        "int.real", "list.append", "list.__len__", "uf$i", "lambda q: q", "Base().extra",
        "iter(range(3))", "zip([1], [2])", "map(abs, [1])", "enumerate([1])", "itertools.chain([1])",
        "{1: 2}.keys()", "{1: 2}.items()", "gen$i()", "functools", "operator", "collections",
        "int", "functools.partial", "Base", "torch.float32", "torch.device('cpu')", "None", "'s'"]

NAMES = ["__name__", "__qualname__", "__module__", "__doc__", "__wrapped__", "__self__", "__func__",
         "__dict__", "__class__", "func", "args", "keywords", "__call__", "__get__", "__next__",
         "__mro__", "__text_signature__", "__objclass__", "mapping", "gi_frame", "tag", "real"]


def fam_cattrs(rng, s, place):
    s.setup = "def uf$i(a, b=1):\n    return a\n\n\ndef gen$i():\n    yield 1\n".replace("$i", str(s.uid))
    s.var = place(rng.choice(POOL).replace("$i", str(s.uid)))
    names = rng.sample(NAMES, 4)
    made = rng.choice(["functools.partial(torch.add, x)", "functools.partial(uf$i, b=n)", "operator.itemgetter(0)",
                       "zip([n], [1])", "enumerate([n])", "iter([n, 2])", "iter(range(2))", "{'a': n}.keys()",
                       "{'a': n}.values()", "(i for i in range(2))", "gen$i()", "[n]", "(n, 1)", "{'a': n}",
                       "{n}", "collections.OrderedDict(a=n)", "collections.deque([n])", "lambda q: q + n",
                       "functools.wraps(uf$i)(lambda q: q)", "[n].append", "x.add", "x.size()"])
    pick(rng, s, [
        "out.append([hasattr($v, k) for k in %r])" % (names,),
        "out.append(hasattr($v, '__name__'))\nout.append(hasattr($v, '__qualname__'))",
        "out.append(getattr($v, '%s', MISSING) is MISSING)" % names[0],
        "if hasattr($v, '%s'):\n    x = x + 1\nelse:\n    x = x * 3\nout.append(x)" % names[1],
        "if getattr($v, '%s', None) is None:\n    x = x * 2\nout.append(x.sum())" % names[2],
        "out.append(type($v).__name__)\nout.append(isinstance($v, (functools.partial, type, zip)))",
        "out.append(callable($v))\nout.append(type($v) is type(len))",
        "out.append(getattr($v, '__module__', MISSING))\nout.append(getattr($v, '__doc__', '') is None)",
        "out.append(getattr(getattr($v, '__class__', None), '__name__', None))",
        "o = %s\nout.append([hasattr(o, k) for k in %r])" % (made, names),
        "o = %s\nout.append(getattr(o, '%s', 'absent'))\nout.append(type(o).__name__)" % (made, names[3]),
        "o = %s\nif hasattr(o, '__name__'):\n    x = x + 3\nout.append(isinstance(o, functools.partial))" % made,
        "p = functools.partial(torch.add, x)\nout.append(hasattr(p, '__name__'))\nout.append(p(1))",
        "out.append(getattr($v, 'tag', 0))\nif hasattr($v, 'tag'):\n    x = x + 1",
    ])
    s.mut(*(_unless_module(m) for m in ("$p.tag = 1", "del $p.tag", "$p.__name__ = 'named'")),
          *(s.var.rebind(rng.choice(POOL).replace("$i", str(s.uid))) for _ in range(2)))


def _unless_module(stmt):
    """``stmt`` where the object takes it (a C object refuses, in both runs alike); never on a
    module of the pool, which the eager and the compiled run share."""
    return ("if type($p) is not type(functools):\n    try:\n        " + stmt +
            "\n    except (AttributeError, TypeError):\n        pass")
