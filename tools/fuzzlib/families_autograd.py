"""Feature family for autograd.Functions (issues 19 and 41): a backward holding a ``no_grad`` block
(torchao float8's scales) that reads a global list, and a backward that applies another Function
(a straight-through rounding), differentiated by ``autograd.grad``, by ``backward()`` and twice
(``create_graph=True``); between calls the global the backward reads changes and the leaf it
differentiates is replaced by others (other values, sizes). See families_tensor.py for the
conventions (x a tensor, n a Python scalar, out the result).
"""
from .program import pick

AUTOGRAD_SRC = '''SCALE$i = [1.0]


class NoGradBwd$i(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        with torch.no_grad():
            s = (x * x).sum() * SCALE$i[0]
        return g * ctx.k + g * x * s, None


class Round$i(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, g):
        return g


class Outer$i(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return Round$i.apply(g * x * 2.5) + g
'''


def fam_autograd(rng, s, place):
    s.setup = AUTOGRAD_SRC.replace("$i", str(s.uid))
    s.var = place("{'w': torch.nn.Parameter(torch.linspace(-1.0, 1.0, 4))}")
    pick(rng, s, [
        "w$i = $v['w']\ny$i = NoGradBwd$i.apply(w$i, n)\nout.append(torch.autograd.grad(y$i.sin().sum(), w$i)[0])",
        "w$i = $v['w']\nout.append(torch.autograd.grad(Outer$i.apply(w$i * 1).cos().sum(), w$i)[0])",
        "w$i = $v['w']\ng$i, = torch.autograd.grad(NoGradBwd$i.apply(w$i, 2).sin().sum(), w$i, create_graph=True)\n"
        "out.append(torch.autograd.grad(g$i.sum(), w$i)[0])",
        "w$i = $v['w']\nw$i.grad = None\nNoGradBwd$i.apply(w$i, 3).pow(2).sum().backward()\nout.append(w$i.grad)",
        "out.append(Round$i.apply(x.float() * 2.5) if x.dtype != torch.bool else n)",
    ], k=(1, 2))
    s.mut("SCALE$i[0] = 2.0".replace("$i", str(s.uid)), "SCALE$i[0] = -0.5".replace("$i", str(s.uid)),
          "$p['w'] = torch.nn.Parameter(torch.linspace(-2.0, 2.0, 4))",
          "$p['w'] = torch.nn.Parameter(torch.ones(5))")
