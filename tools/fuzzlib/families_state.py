"""Feature families about state that torch's own machinery or the caller hands back in: eager
PyTorch APIs that run their own compiler or dispatch (torch.cond, control_flow.map, while_loop,
torch.func transforms, checkpoint), called where the compiled code runs them eagerly (after a
graph break, or as a break themselves), and cache objects passed back in from call to call (a
KV cache whose layers are replaced through a renamed keyword, optimizer-like state dicts created
lazily and updated in place). Each family is a function fam_NAME(rng, snip, place);
generate.FAMILIES lists them. The harness (check.py) also checks, after every call, that no frame
outside the program became a cache entry.
"""
from .program import pick

# Body pieces see x (a tensor), n (a Python scalar), c (the argument dict A) and `out` (the result).
# h is a small float view of x that every API takes (x may be int, bool or complex).
_H = "h = x.reshape(-1)[:4]\nh = (h.real if h.is_complex() else h).detach().to(torch.float32).contiguous()\n"


def fam_torchapis(rng, s, place):
    s.setup = ("from functorch.experimental import control_flow as cf$i\n"
               "from torch._higher_order_ops.while_loop import while_loop as wl$i\n").replace("$i", str(s.uid))
    pick(rng, s, [_H + t for t in [
        "out.append(torch.cond(h.sum() > 0, lambda a: a + 1, lambda a: a - 1, (h,)))",
        "out.append(cf$i.map(lambda a: a * 2 + n, h.reshape(2, 2)))",
        "out.append(wl$i(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2), (torch.tensor(0), h))[1])",
        "out.append(torch.func.vmap(lambda a: a * 2 + 1)(h.reshape(2, 2)))",
        "out.append(torch.func.grad(lambda a: (a * a).sum())(h))",
        "out.append(torch.utils.checkpoint.checkpoint(lambda a: a.sin() * n, h, use_reentrant=False))",
        "y = h * 2\ntorch._dynamo.graph_break()\nout.append(torch.cond(y.sum() > 1, lambda a: a.cos(), lambda a: a.sin(), (y,)))",
    ]], (1, 2))


def fam_caches(rng, s, place):
    s.setup = ("class Layer$i:\n    def __init__(self):\n        self.keys = None\n\n\n"
               "class KV$i:\n    def __init__(self):\n        self.layers = [Layer$i(), Layer$i()]\n\n\n"
               "def renamed$i(t, **kwargs):\n"
               "    if 'old' in kwargs and 'cache' not in kwargs:\n"
               "        kwargs['cache'] = kwargs.pop('old')\n"
               "        warnings.warn('old is deprecated', FutureWarning)\n"
               "    return update$i(t, **kwargs)\n\n\n"
               "def update$i(t, cache=None, step=0):\n"
               "    lay = cache.layers[step % 2]\n"
               "    h = t.reshape(-1)[:2].detach()\n"
               "    lay.keys = h if lay.keys is None else torch.cat([lay.keys, h])\n"
               "    return lay.keys.shape[0]\n").replace("$i", str(s.uid))
    s.var = place(rng.choice(["KV$i()", "{'kv': KV$i()}", "{}"]).replace("$i", str(s.uid)))
    pick(rng, s, [
        "cache = $v if isinstance($v, KV$i) else $v.setdefault('kv', KV$i())\n"
        "out.append(renamed$i(x, old=cache, step=int(n)))",
        "cache = $v if isinstance($v, KV$i) else $v.setdefault('kv', KV$i())\n"
        "kw = {'old': cache, 'step': 1}\nout.append(renamed$i(x, **kw))\nout.append(sorted(kw))",
        "st = $v if isinstance($v, dict) else $v.__dict__\nslot = st.setdefault('state', {})\n"
        "slot['step'] = slot.get('step', 0) + 1\n"
        "slot['avg'] = slot['avg'] * 0.9 + 1 if 'avg' in slot else torch.zeros(2)\nout.append(slot['step'])",
        "st = $v if isinstance($v, dict) else $v.__dict__\nkv = st.pop('kv', None)\n"
        "st['kv2'] = kv\nout.append(kv is None)",
    ], (1, 2))
    s.mut(s.var.rebind("KV$i()".replace("$i", str(s.uid))), s.var.rebind("{}"),
          "if isinstance($p, KV$i):\n    $p.layers[0].keys = None".replace("$i", str(s.uid)),
          "if isinstance($p, dict):\n    $p.clear()")
