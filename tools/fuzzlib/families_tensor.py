"""Feature families about tensors and PyTorch: tensor properties read and branched on (dtype,
shape, strides, requires_grad, inference, conj), grad mode and default dtype, graph breaks
(data-dependent branches, .item(), .tolist(), nonzero), the target nn.Module's own submodules,
buffers, parameters and hooks (module targets only), tensor methods with keyword arguments, tensors
as state, in-place changes of the input, sizes used as Python values, nn.Module and tensor hooks,
Python attributes on a tensor (x.tag, .grad), and NumPy arrays as state. Each family is a function
fam_NAME(rng, snip, place); generate.FAMILIES lists them.
"""
from .program import pick

# Each family takes (rng, snip, place) and fills the snippet: setup text, a Var (made by `place`),
# body pieces, mutations. Body pieces see x (a tensor), n (a Python scalar), c (the argument dict
# A) and `out` (the result).


def fam_tensor(rng, s, place):
    pick(rng, s, [
        "if x.dtype == torch.float64:\n    x = x * 2\nelif x.dtype.is_floating_point:\n    x = x + 1\n"
        "out.append(x.dtype)",
        "out.append(x.ndim)\nif x.ndim == 2:\n    out.append(x.t() * 2)",
        "out.append(x.size(dim=-1))\nout.append(x.size(0))",
        "out.append(tuple(x.shape))\nif x.shape[0] == 2:\n    x = x + 3",
        "out.append(x.stride())\nif x.stride(-1) != 1:\n    out.append('strided')",
        "if x.requires_grad:\n    out.append(x * 2)\nelse:\n    out.append(x + 2)",
        "if x.is_inference():\n    out.append('inference')\n    x = x.clone()\nout.append(x.is_inference())",
        "if x.is_conj():\n    out.append(x.resolve_conj() + 1)\nelse:\n    out.append(x.is_complex())",
        "if x.is_contiguous():\n    out.append(x.view(-1)[:3])\nelse:\n    out.append(x.reshape(-1)[:3])",
        "if x.device.type == 'cpu':\n    out.append(str(x.device))",
        "out.append(x.numel() + x.dim() + len(x))",
        "out.append(x.is_floating_point())\nout.append(x.is_leaf)\nout.append(x.grad_fn is None)",
        "if x.layout == torch.strided and x.element_size() > 2:\n    x = x * 1",
        "out.append(torch.zeros_like(x).dtype)\nout.append(x.new_ones(2))",
        "if x.dtype in (torch.int64, torch.bool):\n    out.append(x.sum())\nelse:\n    out.append(x.sum(0))",
        "out.append(x.size())\nout.append(x.shape[-1] * n)",
        "out.append(x.transpose(0, -1).is_contiguous())\nout.append(x.stride(dim=0))",
        "out.append(x.requires_grad)\nout.append(x.is_conj())\nout.append(x.is_neg())",
    ])


def fam_modes(rng, s, place):
    pick(rng, s, [
        "if torch.is_grad_enabled():\n    out.append(x * 2)\nelse:\n    out.append(x * 3)",
        "out.append(torch.ones(2))\nout.append(torch.get_default_dtype())",
        "if torch.get_default_dtype() == torch.float64:\n    x = x + 1",
        "out.append(torch.tensor([1.5, n]))",
        "out.append(torch.arange(3) * 1.5)",
        "with torch.no_grad():\n    out.append(x * 2)",
        "with torch.enable_grad():\n    out.append(x + 1)",
        "out.append(torch.zeros(2, dtype=x.dtype) + x.reshape(-1)[:2])",
        "torch.set_grad_enabled(False)\nout.append(x * 2)\ntorch.set_grad_enabled(True)",
        "with torch.set_grad_enabled(n > 1):\n    out.append(x + 1)",
        "with torch.inference_mode():\n    y = x * 2\nout.append(y.is_inference())\nout.append(y)",
        "prev = torch.get_default_dtype()\ntorch.set_default_dtype(torch.float64)\nout.append(torch.ones(1))\n"
        "torch.set_default_dtype(prev)",
        "out.append(torch.full((2,), n))\nout.append(torch.tensor(n).dtype)",
        "out.append(x * n)",
        "out.append(torch.rand(2))\nout.append(torch.randint(0, 9, (2,)))",
    ])
    s.mut("torch.set_default_dtype(torch.float64)", "torch.set_default_dtype(torch.float32)",
          "torch.set_grad_enabled(False)", "torch.set_grad_enabled(True)")


def fam_break(rng, s, place):
    s.setup = "def helper$i(t, k):\n    if k > 1:\n        return t * k\n    return t + 1\n".replace("$i", str(s.uid))
    pick(rng, s, [
        "if (x != 0).sum() > 2:\n    x = x + 1\nelse:\n    x = x * 2",
        "out.append(int((x != 0).sum()))",
        "out.append(helper$i(x, n))",
        "out.append(x.reshape(-1)[0].item())",
        "out.append(x.tolist())",
        "out.append(x[x != 0].shape)\nout.append(torch.nonzero(x).shape[0])",
    ], (1, 2))


def fam_module(rng, s, place):  # module targets only; M always has lin, layers, buf
    pick(rng, s, [
        "h = x.reshape(-1)[:4]\nif h.is_complex():\n    h = h.real\nw = getattr(self.lin, 'weight', None)\n"
        "h = self.lin(h.clone().to(w.dtype if w is not None else torch.get_default_dtype()))\nout.append(h)",
        "if self.training:\n    x = x * 2\nelse:\n    out.append('eval')",
        "h = x.reshape(-1)[:4]\nh = (h.real if h.is_complex() else h).clone().to(self.bn.weight.dtype)\n"
        "out.append(self.bn(torch.stack([h, h * 2])))",
        "out.append(self.lin.training)\nout.append(type(self.lin).__name__)",
        "for layer in self.layers:\n    out.append(type(layer).__name__)",
        "if self.buf is not None:\n    out.append(self.buf + 1)",
        "if self.buf is not None:\n    self.buf.add_(1)",
        "out.append(sum(p.numel() for p in self.parameters()))",
        "out.append(hasattr(self, 'extra'))",
        "h = torch.ones(4)\nfor layer in self.layers[:2]:\n    h = layer(h)\nout.append(h)",
        "out.append(len(self.layers[1:]))\nout.append(type(self.layers[-1:]).__name__)\n"
        "out.append([type(mod).__name__ for mod in self.layers[:int(n)]])",
        "if x.is_floating_point():\n    out.append(torch.finfo(x.dtype).min)\n"
        "    out.append(x.masked_fill(x > 0, torch.finfo(x.dtype).min))",
    ])
    s.mut("m.train(False)", "m.train(True)", "m.lin = torch.nn.Linear(4, 4)",
          "m.lin = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())", "m.lin = torch.nn.Identity()",
          "if hasattr(m.lin, 'weight'):\n    m.lin.weight = torch.nn.Parameter(torch.ones(4, 4))",
          "if hasattr(m.lin, 'bias'):\n    m.lin.bias = None",
          "if hasattr(m.lin, 'weight'):\n    m.lin.weight.requires_grad_(False)",
          "with torch.no_grad():\n    for p in m.parameters():\n        p.mul_(2)",
          "HOOKS.append(m.register_forward_hook(lambda mod, inp, o: (o, 'hook')))",
          "HOOKS.append(m.lin.register_forward_hook(lambda mod, inp, o: o * 2))",
          "HOOKS.append(m.lin.register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,)))",
          "HOOKS.append(m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,) + args[1:]))",
          "if HOOKS:\n    HOOKS.pop().remove()", "m.buf = torch.ones(4)", "m.buf = None",
          "m.layers.append(torch.nn.Linear(4, 4))", "m.extra = 1", "if hasattr(m, 'extra'):\n    del m.extra",
          "m.bn.momentum = 0.5", "m.bn.track_running_stats = False", "m.bn.eval()",
          "m.layers.append(torch.nn.ReLU())", "m.layers.insert(0, torch.nn.Identity())",
          "if len(m.layers):\n    del m.layers[0]", "if len(m.layers):\n    m.layers[0] = torch.nn.ReLU()",
          "m.layers.extend([torch.nn.Linear(4, 4)])",
          "m.layers = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())")


def fam_tmethods(rng, s, place):
    pick(rng, s, [
        "out.append(x.sum(dim=0, keepdim=True))",
        "out.append(torch.flatten(x, start_dim=0)[:2])\nout.append(x.reshape(shape=(-1,))[:2])",
        "out.append(x.transpose(dim0=0, dim1=-1).shape)\nout.append(x.movedim(0, -1).stride())",
        "out.append(x.new_zeros(size=(2,)))\nout.append(x.to(dtype=torch.float64).dtype)",
        "out.append(x.is_contiguous(memory_format=torch.contiguous_format))\nout.append(x.storage_offset())",
        "out.append(x.dtype.itemsize)\nout.append(x.dtype.is_complex)\nout.append(x.dtype.is_signed)",
        "out.append(torch.is_tensor(x))\nout.append(torch.is_floating_point(x))\nout.append(torch.is_complex(x))",
        "out.append(x.nelement())\nout.append(x.shape == (2, 3))\nout.append(x.size() == torch.Size([2, 3]))",
        "out.append(x.real.shape if x.is_complex() else x.shape)\nout.append(x.grad)",
        "out.append(x.unflatten(0, (1, -1)).shape)\nout.append(x.expand(2, *x.shape).shape)",
        "out.append(x.split(1, dim=0)[0].shape)\nout.append(len(x.unbind(0)))",
        "out.append(torch.result_type(x, 2.5))\nout.append(x.flip(0))",
        "out.append(x.contiguous().stride())\nout.append(x.element_size() * x.numel())",
        "out.append(x.size(-1) if x.dim() > 1 else x.size(dim=0))\nout.append(x.shape[1:])",
    ])


def fam_tstate(rng, s, place):
    s.var = place(rng.choice(["torch.ones(3)", "torch.arange(4.0)", "torch.zeros(2, 2)"]))
    pick(rng, s, [
        "x = x + $v.sum()",
        "out.append($v * 2)",
        "if $v.dtype == torch.float64:\n    out.append('f64')\nout.append($v.shape)",
        "if not $v.requires_grad:\n    $v.add_(1)",
        "out.append($v.reshape(-1)[0] * n)",
        "if $v.requires_grad:\n    out.append($v.sum() * 2)",
        "if $v.is_contiguous():\n    out.append($v.view(-1))",
    ])
    s.mut("with torch.no_grad():\n    $p.add_(1)", s.var.rebind("torch.ones(3, dtype=torch.float64)"),
          s.var.rebind("torch.zeros(5)"), s.var.rebind("torch.ones(3).requires_grad_()"),
          s.var.rebind("torch.ones(6)[::2]"), s.var.rebind("torch.ones(2, 3).t()"))


def fam_inplace(rng, s, place):
    pick(rng, s, [
        "if x.dtype != torch.bool and not x.requires_grad and not x.is_inference():\n    x.mul_(2)",
        "if x.is_floating_point() and not x.requires_grad and not x.is_inference():\n    x[0] = 7",
        "y = x.detach()\nif y.dtype != torch.bool and not y.is_inference():\n    y.add_(1)\nout.append(y._version > 0)",
        "if x.dtype != torch.bool and not x.requires_grad and not x.is_inference():\n    x.reshape(-1)[:2].zero_()",
    ], (1, 2))


def fam_dyn(rng, s, place):  # sizes used as Python values (symbolic once a size has changed)
    pick(rng, s, [
        "for i in range(x.shape[0]):\n    x = x + i",
        "if x.shape[0] > 2:\n    x = x * 2\nout.append(x.shape[0] // 2)",
        "out.append(x.reshape(x.shape[0], -1).shape)",
        "out.append(torch.zeros(x.shape[0]))\nout.append(x[: x.shape[0] - 1].shape)",
        "out.append(x.shape[0] == x.shape[-1])\nout.append(len(x) % 2)",
        "if x.numel() > 10:\n    out.append('big')",
        "for row in x:\n    out.append(row.shape)",
        "for i, row in enumerate(x):\n    if i > 1:\n        break\n    x = x + i",
        "out.append(x.new_zeros(x.shape[-1] + int(n)))",
        "out.append(x.shape[0] * x.shape[-1] + n)\nout.append(x.size()[-1])",
    ])


HOOKS_SRC = """
class HMod$i(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, h, scale=1.0):
        return self.lin(h) * scale


HK$i = HMod$i()
HLOG$i = []
"""


def fam_hooks(rng, s, place):  # nn.Module hooks (forward, kwargs, prepend, always_call, backward); tensor hooks
    s.setup = HOOKS_SRC.replace("$i", str(s.uid))
    s.watch.append(f"list(HLOG{s.uid})")
    prep = "h = x.reshape(-1)[:4]\nh = (h.real if h.is_complex() else h).to(HK$i.lin.weight.dtype)\n"
    pick(rng, s, [
        prep + "out.append(HK$i(h))",
        prep + "out.append(HK$i(h, scale=2.0))",
        prep + "out.append(HK$i(h=h))\nout.append(len(HLOG$i))",
        "if x.requires_grad:\n    x.register_hook(lambda g: g * 2)\nout.append(x * 3)",
        "y = x * 2\nif y.requires_grad:\n    y.register_hook(lambda g: HLOG$i.append('y') or g + 1)\nout.append(y.sin())",
        "y = x * 2\nz = y * 3\nif y.requires_grad:\n    y.register_hook(lambda g: g + 1)\nout.append(z + y)",
    ])
    s.mut("HOOKS.append(HK$i.register_forward_hook(lambda m, a, o: HLOG$i.append(('post', len(a))) or o * 2))",
          "HOOKS.append(HK$i.register_forward_pre_hook(lambda m, a: (a[0] + 1,) + a[1:] if a else None))",
          "HOOKS.append(HK$i.register_forward_pre_hook(lambda m, a: HLOG$i.append('pre'), prepend=True))",
          "HOOKS.append(HK$i.register_forward_pre_hook(lambda m, a, k: (a, dict(k, scale=3.0)), with_kwargs=True))",
          "HOOKS.append(HK$i.register_forward_hook(lambda m, a, k, o: o + len(k), with_kwargs=True, prepend=True))",
          "HOOKS.append(HK$i.lin.register_forward_hook(lambda m, a, o: HLOG$i.append('lin')))",
          "HOOKS.append(HK$i.lin.register_forward_pre_hook(lambda m, a: a[0] * 2))",
          "HOOKS.append(HK$i.register_forward_hook(lambda m, a, o: HLOG$i.append('always'), always_call=True))",
          "HOOKS.append(HK$i.lin.register_full_backward_hook(lambda m, gi, go: HLOG$i.append('bw')))",
          "HOOKS.append(HK$i.register_full_backward_pre_hook(lambda m, go: (go[0] * 2,)))",
          "if HOOKS:\n    HOOKS.pop().remove()", "HK$i._forward_hooks.clear()",
          "HK$i.lin._forward_pre_hooks.clear()")


def fam_tattrs(rng, s, place):  # Python attributes on a tensor (x.tag): read, tested, written; .grad
    s.var = place(rng.choice(["torch.ones(3)", "torch.arange(4.0)", "torch.ones(3).requires_grad_()"]))
    s.watch.append(f"dict(getattr({s.var.watch}, '__dict__', {{}}))")
    pick(rng, s, [
        "out.append(getattr($v, 'tag', None))",
        "if hasattr($v, 'scale'):\n    x = x * $v.scale\nelse:\n    x = x + 1",
        "$v.tag = n\nout.append($v.tag)",
        "try:\n    out.append($v.missing)\nexcept AttributeError:\n    out.append('no')",
        "y = $v * 2\nout.append(hasattr(y, 'tag'))\nout.append(getattr(y.contiguous(), 'tag', -1))",
        "z = $v.contiguous()\nout.append(getattr(z, 'scale', 0))",
        "if $v.grad is not None:\n    out.append($v.grad.sum())\nelse:\n    out.append('nograd')",
        "if getattr($v, 'tag', 0) == 3:\n    out.append($v * 3)",
    ])
    s.mut("$p.tag = 3", "$p.tag = 'a'", "$p.scale = 2.0", "$p.missing = 1",
          "if hasattr($p, 'tag'):\n    del $p.tag", "if hasattr($p, 'scale'):\n    del $p.scale",
          "if $p.requires_grad:\n    $p.grad = torch.ones_like($p)", "$p.grad = None",
          s.var.rebind("torch.ones(3)"), s.var.rebind("torch.zeros(2).requires_grad_()"))


def fam_numpy(rng, s, place):  # NumPy arrays as inputs and state; NumPy calls, views, in-place changes
    s.var = place(rng.choice(["np.arange(6.0).reshape(2, 3)", "np.ones(4, dtype=np.float32)", "np.arange(5)"]))
    pick(rng, s, [
        "a = $v * 2 + 1\nout.append(a)",
        "out.append(np.sin($v).sum())",
        "$v += 1\nout.append($v)",
        "b = $v.astype(np.float64)\nb[...] = 5\nout.append(b)",
        "out.append(np.where($v > 2, $v, 0))",
        "out.append(($v.shape, $v.dtype, $v.ndim, len($v)))",
        "if $v.sum() > 3:\n    out.append(1)\nelse:\n    out.append(2)",
        "out.append(torch.from_numpy($v).sum())",
        "out.append(np.asarray(x.detach()).shape)",
        "w = $v.reshape(-1)[:2]\nw[0] = 9\nout.append($v)",
        "out.append(np.float32(2.0) * $v)",
        "out.append($v.max() > 1)",
        "for row in np.atleast_2d($v):\n    out.append(row.max())",
        "y = $v.flatten()\ny[0] = -1\nout.append(y)\nout.append($v)",
    ])
    s.mut("$p[...] = 3", s.var.rebind("np.arange(6.0)[::-2]"), s.var.rebind("np.zeros((2, 2))"),
          s.var.rebind("np.arange(4, dtype=np.int32)"), s.var.rebind("np.ones(3).T.copy()"),
          "$p.flags.writeable = False", s.var.rebind("$p.copy()"))
