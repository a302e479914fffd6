"""Feature family for tensor subclasses (issue 41): a ``__torch_function__`` subclass whose
override counts the functions offered to it and changes one (``add`` doubled), torch's default
subclass behaviour (a class with no override), and ``TwoTensor`` (a traceable wrapper subclass)
read from the state, the subclass's own methods and properties, and a jagged NestedTensor (its
ragged size symbolic); between calls the class's override and a method are patched, the state is
rebound to another class, the wrapper is replaced by others (of other sizes too: symbolic once
changed), a tensor changed in place is made the wrapper's inner tensor or another, and the
NestedTensor is replaced by one of other lengths, batch size, ragged dimension or dtype. See
families_tensor.py for the conventions (x a tensor, n a Python scalar, out the result).
"""
from .program import pick

SUBCLASS_SRC = '''class Tf$i(torch.Tensor):
    seen = {}

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        cls.seen[func.__name__] = cls.seen.get(func.__name__, 0) + 1
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if func is torch.Tensor.add:
            out = out * 2
        return out.as_subclass(cls) if isinstance(out, torch.Tensor) else out

    def twice(self):
        return self * 2

    @property
    def half(self):
        return self / 2


class Df$i(torch.Tensor):
    pass


def two$i(k, n=3):
    from torch.testing._internal.two_tensor import TwoTensor
    return TwoTensor(torch.arange(float(n)) * k, torch.ones(n) * k)


def nt$i(lens, dim=2):
    return torch.nested.nested_tensor([torch.arange(n * dim, dtype=torch.float32).reshape(n, dim) / 7
                                       for n in lens], layout=torch.jagged)
'''


def fam_subclass(rng, s, place):
    s.setup = SUBCLASS_SRC.replace("$i", str(s.uid))
    s.var = place(rng.choice(["{'t': torch.ones(3).as_subclass(Tf$i), 'w': two$i(1), 'a': torch.zeros(3), "
                              "'j': nt$i([2, 3])}",
                              "{'t': torch.ones(3).as_subclass(Tf$i), 'w': two$i(2), 'a': torch.zeros(3), "
                              "'j': nt$i([1, 4, 2])}"]
                             ).replace("$i", str(s.uid)))
    pick(rng, s, [
        "t$i = $v['t']\nout.append(t$i + n)\nout.append(type(t$i * 2).__name__)\nout.append(1 - t$i)",
        "t$i = $v['t']\nu$i = torch.relu(t$i).sum()\nout.append(u$i)\nout.append(type(u$i).__name__)",
        "w$i = $v['w']\nout.append((w$i * 2 + 1).a)\nout.append(type(w$i.sin()).__name__)",
        "out.append(x.float().as_subclass(Df$i) + 1 if x.dtype != torch.bool else n)",
        "out.append(sorted(Tf$i.seen.items()))",
        # an input changed in place that may be the wrapper's inner tensor (the mutations below)
        "$v['a'].add_(1)\nout.append(($v['w'] * 1).a)",
        # methods and properties the subclass defines (inlined; the class may be patched)
        "t$i = $v['t']\nout.append(t$i.twice() + t$i.half if isinstance(t$i, Tf$i) else t$i)",
        # a jagged NestedTensor: its ragged size a symbol, its override inlined
        "j$i = $v['j']\nout.append((torch.sin(j$i) + n).values())\nout.append(j$i.size(0))",
        "j$i = $v['j']\nout.append(j$i.sum(dim=1) if j$i._ragged_idx == 1 else j$i.values())",
        "j$i = $v['j']\nout.append((j$i * 2).offsets())\nout.append(j$i.dim())",
    ], k=(1, 2))
    s.mut("$p['t'] = torch.zeros(3).as_subclass(Df$i)".replace("$i", str(s.uid)),
          "$p['t'] = torch.ones(3).as_subclass(Tf$i)".replace("$i", str(s.uid)),
          "$p['w'] = two$i(3)".replace("$i", str(s.uid)),
          "$p['w'] = two$i(2, n=5)".replace("$i", str(s.uid)),
          "$p['w'] = two$i(1, n=7)".replace("$i", str(s.uid)),
          "Tf$i.__torch_function__ = classmethod(lambda cls, f, t, a=(), k=None: "
          "torch.Tensor.__torch_function__.__func__(cls, f, t, a, k))".replace("$i", str(s.uid)),
          "Tf$i.seen.clear()".replace("$i", str(s.uid)),
          "$p['a'] = $p['w'].a", "$p['a'] = torch.zeros(3)",
          "Tf$i.twice = lambda self: self * 3".replace("$i", str(s.uid)),
          "$p['j'] = nt$i([4, 1])".replace("$i", str(s.uid)),
          "$p['j'] = nt$i([1, 2, 3])".replace("$i", str(s.uid)),
          "$p['j'] = nt$i([2, 3]).transpose(1, 2)".replace("$i", str(s.uid)),
          "$p['j'] = nt$i([2, 3], dim=3).double()".replace("$i", str(s.uid)))
