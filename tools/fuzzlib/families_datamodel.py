"""Feature families for Python's data model (issue 18): objects created in the trace,
descriptors, properties and slots (newobj); a config class with its own __getattribute__ /
__setattr__, and dataclasses (config); a ModelOutput-like OrderedDict dataclass, NamedTuple, Enum
and a dict subclass (records); sets, itertools, functools, collections, generators, closures,
match and logging (pystd); dunder methods of a user class and dicts keyed by classes (dispatch).
The classes are program text (the *_SRC templates, put in a snippet's setup). Each family is a
function fam_NAME(rng, snip, place); generate.FAMILIES lists them.
"""
from .families_python import LIST_MUTS
from .program import pick

# Each family takes (rng, snip, place) and fills the snippet: setup text, a Var (made by `place`),
# body pieces, mutations. Body pieces see x (a tensor), n (a Python scalar), c (the argument dict
# A) and `out` (the result).


# Issue 18's Python data model: objects made in the trace, the attribute protocol, dataclasses,
# records, dunder methods, the standard library. The classes live in the program's text (setup);
# the state a snippet reads is its Var (a class, a config object, a dict of records, a list).

NEWOBJ_SRC = '''class Twice$i:  # a data descriptor
    def __get__(self, obj, owner):
        return 'on the class' if obj is None else obj._w * 2

    def __set__(self, obj, value):
        obj._w = value


class Named$i:  # a non-data descriptor
    def __get__(self, obj, owner):
        return owner.__name__ if obj is None else obj.a + 100


class Pt$i:
    count = 0
    w2 = Twice$i()
    nd = Named$i()

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self.made = cls.__name__
        return self

    def __init__(self, a, b=1):
        self.a = a
        self._w = b

    @property
    def total(self):
        return self.a + self._w

    @total.setter
    def total(self, v):
        self.a = v - self._w

    @classmethod
    def make(cls, k):
        return cls(k, k)

    @staticmethod
    def twice(v):
        return v * 2

    @functools.cached_property
    def cached(self):
        return self.a * 10


class SubPt$i(Pt$i):
    def __init__(self, a, b=1):
        super().__init__(a, b * 3)

    @property
    def total(self):
        return super().total * 2

    @total.setter
    def total(self, v):
        self.a = v


class Slot$i:
    __slots__ = ('u', 'v')

    def __init__(self, u):
        self.u = u
'''


def fam_newobj(rng, s, place):  # objects created in the trace ($v is the class called); descriptors
    s.setup = NEWOBJ_SRC.replace("$i", str(s.uid))
    s.var = place(rng.choice(["Pt$i", "SubPt$i"]).replace("$i", str(s.uid)))
    s.watch += [f"(Pt{s.uid}.count, SubPt{s.uid}.count)", f"getattr(H, 'made{s.uid}', None)"]
    pick(rng, s, [
        "p = $v(n)\nout.append(p.total)\nout.append(p.made)\nout.append(p.a * x)",
        "p = $v(1, n)\np.total = 10\nout.append((p.a, p.total, p.w2))",
        "p = $v.make(2)\np.w2 = n\nout.append((p._w, p.w2, $v.w2))",
        "out.append($v.twice(n))\nout.append($v.nd)\nout.append($v(2).nd)",
        "p = $v(n)\nout.append(p.cached)\np.a = 5\nout.append(p.cached)\ndel p.cached\nout.append(p.cached)",
        "sl = Slot$i(n)\nsl.v = x.shape[0]\nout.append(sl.u + sl.v)\nout.append(hasattr(sl, '__dict__'))\n"
        "try:\n    sl.w = 1\nexcept AttributeError:\n    out.append('no slot w')",
        "out.append($v(n, 2))",
        "H.made$i = $v(n, x.shape[-1])",
        "type($v(1)).count += 1\nout.append($v.count)\nout.append(isinstance($v(1), Pt$i))\n"
        "out.append(type($v(1)) is $v)\nout.append(issubclass($v, SubPt$i))",
        "p = copy.copy($v(n))\nq = copy.deepcopy(p)\nq.a = 7\nout.append((p.a, q.a, type(q).__name__))",
        "p = $v(x)\nout.append(p.total)\nsetattr(p, 'b', n)\nout.append(vars(p))",
        "p = $v(n)\nobject.__setattr__(p, 'a', 9)\ndel p._w\nout.append(getattr(p, '_w', 'gone'))\nout.append(p.a)",
        "p = $v(n, 2)\nout.append(x.tolist())\np.a = p.a + 1\nout.append((p.total, p.cached))",  # alive at a break
        "prev = getattr(H, 'made$i', None)\nif prev is not None:\n    out.append((prev.total, prev.nd, prev.cached))\n"
        "    prev.a = n\n    prev.w2 = 3",
    ])
    s.mut("Pt$i.twice = staticmethod(lambda v: v * 3)", "Pt$i.total = property(lambda self: self.a * 100)",
          "Pt$i.count = 0", "Pt$i.w2 = 5", "Named$i.__get__ = lambda self, obj, owner: 'patched'",
          "Pt$i.make = classmethod(lambda cls, k: cls(k + 1))", "Pt$i.nd = 'plain'",
          "del Twice$i.__set__", "Pt$i.cached = property(lambda self: 'prop')", "Slot$i.v = 'read-only'",
          "Pt$i.__init__ = lambda self, a, b=1: setattr(self, 'a', -a) or setattr(self, '_w', b)",
          "SubPt$i.twice = staticmethod(lambda v: -v)", "if hasattr(H, 'made$i'):\n    H.made$i.a = 8",
          s.var.rebind(f"SubPt{s.uid}"), s.var.rebind(f"Pt{s.uid}"))


CONFIG_SRC = '''class Cfg$i:  # like transformers' PretrainedConfig: names mapped in __getattribute__ / __setattr__
    attribute_map = {'hidden': 'width'}
    model_type = 'fuzz'

    def __init__(self, width=4, **kw):
        self.width = width
        for k, v in kw.items():
            setattr(self, k, v)

    def __setattr__(self, key, value):
        if key in super().__getattribute__('attribute_map'):
            key = super().__getattribute__('attribute_map')[key]
        super().__setattr__(key, value)

    def __getattribute__(self, key):
        if key != 'attribute_map' and key in super().__getattribute__('attribute_map'):
            key = super().__getattribute__('attribute_map')[key]
        return super().__getattribute__(key)

    def __getattr__(self, key):
        if key.startswith('use_'):
            return False
        raise AttributeError(f'no {key}')


@dataclasses.dataclass
class Opts$i:
    a: int
    scale: float = 2
    tags: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.scaled = self.a * self.scale


@dataclasses.dataclass(frozen=True)
class Key$i:
    a: int
    b: int = 1
'''


def fam_config(rng, s, place):  # a config object (attribute names mapped in Python) and dataclasses
    s.setup = CONFIG_SRC.replace("$i", str(s.uid))
    s.var = place(rng.choice(["Cfg$i(4, depth=2)", "Cfg$i(2)"]).replace("$i", str(s.uid)))
    pick(rng, s, [
        "out.append($v.hidden)\nx = x * $v.width",
        "if $v.use_cache:\n    x = x + 1\nout.append($v.use_cache)",
        "out.append(getattr($v, 'hidden', -1))\n"
        "out.append(hasattr($v, 'missing'))\nout.append(getattr($v, 'depth', None))",
        "c2 = Cfg$i(n, hidden=3)\nout.append(c2.width)\nout.append(vars(c2))",
        "$v.hidden = n\nout.append($v.width)",
        "try:\n    out.append($v.nothing)\nexcept AttributeError as e:\n    out.append(str(e))",
        "o = Opts$i(n)\nout.append(o)\nout.append(o.scaled * x)",
        "o = Opts$i(1, scale=n)\no.tags.append($v.width)\n"
        "out.append(o.tags)\nout.append(o == Opts$i(1, n, [$v.width]))",
        "k = Key$i(n)\ntry:\n    k.a = 3\nexcept dataclasses.FrozenInstanceError as e:\n    out.append(str(e))\n"
        "out.append(k == Key$i(n, 1))\nout.append({k: 1}.get(Key$i(n)))",
        "out.append(dataclasses.fields(Opts$i)[1].default)\nout.append(dataclasses.asdict(Opts$i(n)))",
        "object.__setattr__($v, 'raw', n)\nout.append(vars($v).get('raw'))",
        "out.append(type($v).model_type)\nout.append($v.model_type)\nout.append(isinstance($v, Cfg$i))",
        "c2 = Cfg$i(n)\nout.append(x.tolist())\nc2.hidden = $v.hidden\nout.append(vars(c2))",
    ])
    s.mut("Cfg$i.attribute_map = {'hidden': 'depth'}", "Cfg$i.attribute_map['size'] = 'width'",
          "$p.use_cache = True", "$p.width = 9", "Cfg$i.model_type = 'other'",
          "Opts$i.__init__.__defaults__ = (5,) + Opts$i.__init__.__defaults__[1:]",
          "Opts$i.__post_init__ = lambda self: setattr(self, 'scaled', -1)",
          "Cfg$i.__getattribute__ = object.__getattribute__", "del Cfg$i.__getattr__",
          "Key$i.__eq__ = lambda self, other: False",
          s.var.rebind(f"Cfg{s.uid}(8)"))


RECORDS_SRC = '''@dataclasses.dataclass
class Output$i(collections.OrderedDict):  # like transformers' ModelOutput
    logits: torch.Tensor = None
    hidden: tuple = None
    loss: torch.Tensor = None

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


class Color$i(enum.Enum):
    RED = 1
    BLUE = 2

    @property
    def double(self):
        return self.value * 2


class Pair$i(typing.NamedTuple):
    a: int
    b: float = 0.5

    def total(self):
        return self.a + self.b


class Reg$i(dict):  # a dict subclass with its own methods
    def __setitem__(self, key, value):
        super().__setitem__(key, value * 2)

    def register(self, key, value):
        self[key] = value
        return self

    def total(self):
        return sum(self.values())
'''


def fam_records(rng, s, place):  # ModelOutput-like OrderedDict dataclass, NamedTuple, Enum, dict subclass
    s.setup = RECORDS_SRC.replace("$i", str(s.uid))
    s.var = place("{'color': Color$i.RED, 'pair': Pair$i(1), 'reg': Reg$i(ab=1)}".replace("$i", str(s.uid)))
    pick(rng, s, [
        "o = Output$i(logits=x)\no['hidden'] = (x, n)\nout.append(o.to_tuple())\nout.append(o[0])\n"
        "out.append(o['logits'])",
        "o = Output$i(logits=x * 2, hidden=None)\no.loss = x.sum()\nout.append(list(o.keys()))\nout.append(o.loss)\n"
        "out.append(len(o))",
        "o = Output$i(x)\no.logits = x + 1\nout.append(o[0])\nout.append(o)",
        "o = Output$i(hidden=(n,))\nfor k, v in o.items():\n    out.append((k, v))\nout.append('logits' in o)\n"
        "out.append(o.get('loss'))",
        "col = $v['color']\nif col is Color$i.RED:\n    x = x + 1\nout.append((col.name, col.value, col.double))\n"
        "out.append(Color$i(2))",
        "match $v['color']:\n    case Color$i.RED:\n        out.append('red')\n    case Color$i.BLUE:\n"
        "        out.append('blue')\n    case _:\n        out.append('other')",
        "p = $v['pair']\nout.append(p.total())\nout.append(p._replace(b=n))\nout.append(Pair$i(n) + p)\n"
        "out.append(p._asdict())",
        "a, b = $v['pair']\nx = x * a + b\nout.append(Pair$i._fields)",
        "rg = $v['reg']\nrg.register('n', n)\nout.append(rg.total())\nout.append(dict(rg))",
        "rg = Reg$i()\nrg['k'] = x.shape[0]\nout.append(rg)\n"
        "out.append(isinstance(rg, dict))\nout.append(type(rg).__name__)",
        "out.append([c.name for c in Color$i])\nout.append(Color$i['BLUE'] in Color$i)\nout.append(len(Color$i))",
        "o = Output$i(logits=x)\nout.append(x.tolist())\no['hidden'] = (n,)\nout.append(o.to_tuple())",
        "rg = $v['reg']\nout.append((dict(rg), list(rg), sorted(rg.items()), {**rg}, len(rg), 'ab' in rg))",
        "o = Output$i(logits=x, hidden=(n,))\nout.append((dict(o), list(o), tuple(o.values())[1], {**o}))",
        "match $v:\n    case {'pair': Pair$i(a=1, b=b)}:\n        out.append(('pair1', b))\n"
        "    case {'color': Color$i.BLUE}:\n        out.append('blue')\n    case _:\n        out.append('nomatch')",
    ])
    s.mut("$p['color'] = Color$i.BLUE", "$p['color'] = Color$i.RED", "$p['pair'] = Pair$i(2, 1.5)",
          "$p['reg']['z'] = 3", "$p['reg'] = Reg$i()", "Color$i.double = property(lambda self: -1)",
          "Pair$i.total = lambda self: self.a * 10", "Reg$i.total = lambda self: len(self)",
          "Output$i.to_tuple = lambda self: tuple(self.values())[::-1]", "Reg$i.__setitem__ = dict.__setitem__",
          "Output$i.__setattr__ = collections.OrderedDict.__setattr__")


PYSTD_SRC = '''def flat$i(items):  # a generator with yield from
    for e in items:
        if isinstance(e, (list, tuple)):
            yield from flat$i(e)
        else:
            yield e


@functools.lru_cache(maxsize=None)
def tri$i(k):
    return k * (k + 1) // 2


def plus_one$i(f):
    @functools.wraps(f)
    def inner(*args):
        return f(*args) + 1
    return inner


@plus_one$i
def scaled$i(t, k):
    return t * k


def adder$i(k):
    def add(t):
        return t + k
    return add


def check$i(items):
    if len(items) > 3:
        raise ValueError(f'too long: {len(items)}')
    return len(items)


LOGGED$i = []


class ListHandler$i(logging.Handler):
    def emit(self, record):
        LOGGED$i.append(record.getMessage())


LOGGER$i = logging.getLogger('fuzzprog.$i')  # process-wide: the steps change it, each run starts afresh
LOGGER$i.handlers, LOGGER$i.propagate, LOGGER$i.disabled = [ListHandler$i()], False, False
LOGGER$i.setLevel(logging.NOTSET)
'''


def fam_pystd(rng, s, place):  # sets, itertools, functools, collections, generators, closures, match, logging
    s.setup = PYSTD_SRC.replace("$i", str(s.uid))
    s.var = place(rng.choice(["[1, 2, 3]", "[3, 1, 2, 2]", "(2, 4)"]))
    s.watch += [f"sorted(LOGGED{s.uid})", f"getattr(H, 'add{s.uid}', abs)(-10)"]
    pick(rng, s, [
        "s = set($v) | {n}\nout.append(sorted(s - {1}))\nout.append(frozenset($v) & {2, 3})\nout.append(len(s ^ {5}))",
        "out.append({e * 2 for e in $v if e > 1})\nout.append(set($v).issubset({1, 2, 3}))\n"
        "out.append(sorted(set($v).union([n])))",
        "out.append(list(itertools.chain($v, [n])))\nout.append(list(itertools.islice(itertools.count(n), 3)))\n"
        "out.append(list(itertools.accumulate($v)))",
        "out.append(list(itertools.product($v, 'ab'))[:4])\n"
        "out.append(list(itertools.zip_longest($v, [n], fillvalue=0)))\n"
        "out.append(list(itertools.pairwise($v)))",
        "out.append([(k, len(list(g))) for k, g in itertools.groupby(sorted($v))])\n"
        "out.append(list(itertools.starmap(operator.mul, zip($v, $v))))",
        "out.append(functools.reduce(operator.add, $v, n))\nout.append(functools.partial(max, 0, -1)(*$v))\n"
        "out.append(tri$i(len($v)))",
        "out.append(scaled$i(x, len($v)))\nout.append(scaled$i.__name__)",
        "d = collections.deque($v, maxlen=2)\nd.appendleft(n)\n"
        "out.append(d)\nout.append(collections.Counter($v).most_common(1))",
        "dd = collections.defaultdict(list)\nfor e in $v:\n    dd[e % 2].append(e)\nout.append(dd)",
        "out.append(list(flat$i([$v, (n, [x.shape[0]])])))",
        "g = flat$i([$v, [n]])\nout.append(next(g))\nout.append(x.tolist())\nout.append(list(g))",
        "out.append(any(e > n for e in $v))\nout.append(all(e for e in $v))\nout.append(sum(e * 2 for e in $v))\n"
        "out.append(dict((str(e), e) for e in $v))\nout.append(tuple(e for e in $v if e != 2))",
        "total$i = 0\ndef bump(k):\n    nonlocal total$i\n"
        "    total$i += k\nfor e in $v:\n    bump(e)\nout.append(total$i)",
        "f = adder$i(len($v))\nout.append(f(x))\nH.add$i = f",
        "sl = slice(1, None, 2 if n > 1 else None)\nout.append($v[sl])\nout.append(x[sl].shape)\n"
        "out.append((sl.start, sl.stop, sl.step))",
        "match $v:\n    case [a, b, *rest]:\n        out.append((a, b, rest))\n    case [a]:\n        out.append(a)\n"
        "    case _:\n        out.append('other')",
        "try:\n    out.append(check$i($v))\nexcept ValueError as e:\n    out.append(str(e))\nfinally:\n    x = x + 1",
        "logging.getLogger('fuzzprog.$i').warning('n=%s len=%d', n, len($v))\nwarnings.warn(f'fuzz {n}')\n"
        "out.append(x * 2)",
        "out.append(copy.copy($v))\nout.append(copy.deepcopy([$v, {'k': $v}]))",
    ])
    s.mut(*LIST_MUTS, s.var.rebind("(2, 4)"), s.var.rebind("[3, 1, 2, 2, 5]"), "tri$i.cache_clear()",
          "LOGGER$i.setLevel(logging.ERROR)", "LOGGER$i.disabled = True",
          "globals()['adder$i'] = lambda k: (lambda t: t - k)", "globals()['tri$i'] = lambda k: -k")


DISPATCH_SRC = '''class Vec$i:
    def __init__(self, *vals):
        self.vals = list(vals)
        self.depth = 0

    def __call__(self, t):
        return t * len(self.vals)

    def __eq__(self, other):
        return type(other) is type(self) and self.vals == other.vals

    def __hash__(self):
        return hash(tuple(self.vals))

    def __bool__(self):
        return any(self.vals)

    def __len__(self):
        return len(self.vals)

    def __add__(self, other):
        if isinstance(other, Vec$i):
            return type(self)(*(a + b for a, b in zip(self.vals, other.vals)))
        return type(self)(*(a + other for a in self.vals))

    __radd__ = __add__

    def __mul__(self, k):
        return type(self)(*(a * k for a in self.vals))

    def __neg__(self):
        return self * -1

    def __repr__(self):
        return f'Vec{self.vals}'

    def __enter__(self):
        self.depth += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        return False


class Vec2$i(Vec$i):
    def __bool__(self):
        return True
'''


def fam_dispatch(rng, s, place):  # dunder methods of a user class; a dict keyed by classes
    s.setup = DISPATCH_SRC.replace("$i", str(s.uid))
    s.var = place(rng.choice(["{int: 'int', Vec$i: 'vec', bool: 'bool'}", "{float: 'float', torch.Tensor: 'T'}"]
                             ).replace("$i", str(s.uid)))
    pick(rng, s, [
        "v = Vec$i(n, 2)\nout.append(v(x))",
        "v = Vec$i(1, n)\nif v:\n    x = x + len(v)\nout.append(bool(Vec$i(0)))\nout.append(bool(Vec2$i(0)))",
        "v = Vec$i(1, 2) + Vec$i(n, 1)\nout.append(v.vals)\nout.append((3 + Vec$i(1)).vals)\nout.append((-v).vals)",
        "out.append(Vec$i(1, n) == Vec$i(1, 2))\nout.append(len({Vec$i(1), Vec$i(1), Vec$i(n)}))\n"
        "out.append({Vec$i(1): 'one'}.get(Vec$i(n), 'none'))",
        "v = Vec$i(n)\nwith v as w:\n    out.append(w.depth)\n    x = x * 2\nout.append(v.depth)",
        "v = Vec$i(n)\nwith v:\n    out.append(x.tolist())\n    out.append(v.depth)\nout.append(v.depth)",
        "v = Vec$i(n)\ntry:\n    with v:\n        raise KeyError('inside')\n"
        "except KeyError as e:\n    out.append((str(e), v.depth))",
        "vs = [Vec$i(2), Vec$i(n)]\nout.append(sum(vs, Vec$i(0)).vals)\nout.append(sorted(vs, key=len)[0].vals)\n"
        "out.append((vs.index(Vec$i(n)), Vec$i(n) in vs, vs.count(Vec$i(2))))",
        "out.append(f'{Vec$i(n)!r} {str(Vec$i(1))}')\nout.append(repr([Vec$i(2)]))",
        "out.append($v.get(type(n), 'other'))\nout.append($v.get(type(x), 'tensor?'))",
        "for k, name in $v.items():\n    if isinstance(n, k):\n        out.append(name)",
        "out.append(type(Vec2$i()) in $v)\nout.append(isinstance(Vec2$i(), Vec$i))\n"
        "out.append(issubclass(Vec2$i, tuple($v)))",
        "if type(x) in $v:\n    x = x * 2\nout.append(Vec$i in $v)\nout.append(sorted(k.__name__ for k in $v))",
    ])
    s.mut("$p[float] = 'float'", "$p.pop(Vec$i, None)", "$p[Vec$i] = 'swapped'", "$p[Vec2$i] = $p.pop(Vec$i, 'v2')",
          "$p[torch.Tensor] = 'tensor'", "Vec$i.__call__ = lambda self, t: t + 100",
          "Vec$i.__bool__ = lambda self: False", "Vec$i.__eq__ = lambda self, other: True",
          "del Vec2$i.__bool__", "Vec$i.__len__ = lambda self: 0", "Vec$i.__enter__ = lambda self: 'entered'",
          "Vec$i.__radd__ = lambda self, other: 'radd'",
          s.var.rebind("{int: 'int', Vec2$i: 'vec2'}".replace("$i", str(s.uid))))
