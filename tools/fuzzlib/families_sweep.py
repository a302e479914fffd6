"""Feature family for idioms found by the model sweep (issue 39): the contents of OrderedDict and
dict subclass instances read from the inputs (a ModelOutput-like class with its own __getitem__,
__setitem__ and update; an ACT2FN-like instantier whose __getitem__ calls dict's through super()),
read, mutated, reordered and rebound between calls; tensors as keys of dicts made in the trace;
NumPy ufuncs of numbers. See families_tensor.py for the conventions (x a tensor, n a Python
scalar, c the argument dict, out the result).
"""
from .program import pick

SWEEP_SRC = '''class Out$i(collections.OrderedDict):  # like transformers' ModelOutput
    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return tuple(self[name] for name in self.keys())[k]

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def update(self, *args, **kwargs):
        raise RuntimeError('update is forbidden')


class Inst$i(collections.OrderedDict):  # like transformers' ClassInstantier
    def __getitem__(self, key):
        content = super().__getitem__(key)
        scale, shift = content if isinstance(content, tuple) else (content, 0)
        return lambda t: t * scale + shift
'''


def fam_rawdicts(rng, s, place):
    s.setup = SWEEP_SRC.replace("$i", str(s.uid))
    s.var = place("{'out': Out$i(a=1, b=2.5), 'acts': Inst$i(sq=2, sh=(3, -1))}".replace("$i", str(s.uid)))
    pick(rng, s, [
        "o = $v['out']\nout.append(x * o['a'] + o[1])\nout.append(list(o.keys()))\nout.append(len(o))",
        "o = $v['out']\no['c'] = n * 2\nout.append(o.c)\nout.append(tuple(o.values()))",
        "o = $v['out']\nout.append([(k, v) for k, v in o.items()])\nout.append('b' in o)\nout.append(o.get('z', n))",
        "acts = $v['acts']\nout.append(acts['sq'](x))\nout.append(acts['sh'](n))",
        "out.append(dict.__getitem__($v['acts'], 'sq'))\nout.append(dict.get($v['acts'], 'zz', n))",
        "d$i = {x: n, x + 1: 2}\nd$i[x] = 3\nout.append(sum(v for v in d$i.values()))\nout.append(x in d$i)\n"
        "out.append(len(d$i))\nout.append([k.shape for k in d$i])",
        "out.append(x * np.sqrt(abs(n) + 1))\nout.append(float(np.exp(1)))",
    ], k=(1, 2))
    s.mut("$p['out']['a'] = 5", "$p['out'].move_to_end('a')", "collections.OrderedDict.__setitem__($p['out'], 'z', 4)",
          "dict.__setitem__($p['acts'], 'sq', 7)", "$p['acts']['sh'] = (1, 1)", "del $p['acts']['sq']",
          "$p['out'] = Out$i(b=1)", "Inst$i.__getitem__ = lambda self, k: (lambda t: t - 1)")


BREADTH3_SRC = '''class B3_$i:
    k = 2

    def g(self):
        return 3


# loggers are process-wide: each run of the program (eager, then compiled) starts alike
logging.getLogger('fuzz.b3_$i').setLevel(logging.NOTSET)
logging.getLogger('fuzz.other').setLevel(logging.NOTSET)
'''


def fam_breadth3(rng, s, place):
    """Sets of tensors, frozenset keys, logging.getLogger, catch_warnings blocks and class
    statements (with bases read from the globals, whose attributes change between calls)."""
    s.setup = BREADTH3_SRC.replace("$i", str(s.uid))
    s.var = place("{'fs': {frozenset({'a'}): 2.0, frozenset({1, 2}): 3}, 'lg': 'fuzz.b3_$i', "
                  "'dd': collections.defaultdict(list)}".replace("$i", str(s.uid)))
    pick(rng, s, [
        "s$i = {x, x + 1}\ns$i.add(x)\nout.append(len(s$i))\nout.append(x in s$i)\nout.append(len(s$i - {x}))",
        "out.append(x * $v['fs'].get(frozenset({'a'}), n))\nout.append(len([k for k in $v['fs']]))",
        "lg$i = logging.getLogger($v['lg'])\nif lg$i.isEnabledFor(logging.DEBUG):\n    out.append(x + 100)\n"
        "out.append(x * 2)",
        "with warnings.catch_warnings():\n    warnings.simplefilter('ignore')\n    out.append(x + n)",
        "class C$i(B3_$i):\n    def f(self, t):\n        return t * self.k * self.g() + n\nout.append(C$i().f(x))",
        "@dataclasses.dataclass\nclass D$i:\n    a: object\n    b: int = 2\n"
        "out.append(D$i(x).a * D$i(x, b=n).b)",
        "$v['dd']['k'].append(n)\nout.append(len($v['dd']))\nout.append(x * len($v['dd']['k']))\n"
        "out.append(id(H) in $v['dd'])",
    ], k=(1, 2))
    s.mut("$p['fs'][frozenset({'a'})] = 7", "$p['fs'] = {frozenset(): 1}",
          "logging.getLogger($p['lg']).setLevel(logging.DEBUG)", "$p['lg'] = 'fuzz.other'",
          "B3_$i.k = 5", "B3_$i.g = lambda self: -1", "$p['dd'].clear()", "$p['dd'] = collections.defaultdict(list)")
