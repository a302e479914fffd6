"""Feature family about size arguments: tensor constructors (Tensor.new and new_*), factories
(torch.zeros / ones / full / empty / rand / randn / randint / arange / empty_strided / *_like) and
shape methods (view, reshape, expand, repeat, tile, permute, flatten, resize_, expand_as) given
their sizes in every form Python accepts: ints, a tuple, a list, a torch.Size (constant, built in
the trace, from x.size() / x.shape, sliced or concatenated), x.shape[i], 0-d tensors, NumPy ints,
`size=` keywords, and forms eager rejects (caught: the error's type and message are compared).
Tensor.new takes data or sizes depending on the form (a torch.Size is sizes, a tuple or list is
data). Uninitialized tensors (new(sizes), empty) are zeroed before they are compared: a result's
shape read in the trace comes from its fake tensor, so only the real tensor shows the graph's.
See families_tensor.py for the conventions (x a tensor, n a Python scalar, c the argument dict).
"""
from .program import pick


def fam_sizes(rng, s, place):
    pick(rng, s, [
        "out.append(x.new(x.shape).zero_())\nout.append(x.new(torch.Size([2, 3])).fill_(1))",
        "out.append(x.new(x.size()[1:]).zero_())\nout.append(x.new(x.shape + (1,)).zero_())",
        "out.append(x.new([1, 2]))\nout.append(x.new((n, 2)))\nout.append(x.new(2, 3).zero_())",
        "out.append(x.new(x.shape[0]).zero_())\nout.append(x.new(torch.Size([x.shape[-1]])).zero_())",
        "out.append(x.new_zeros(x.shape))\nout.append(x.new_ones(x.size(), dtype=torch.int64))",
        "out.append(x.new_full(x.shape[-1:], n))\nout.append(x.new_full(size=(2,), fill_value=3))",
        "out.append(x.new_empty(size=x.shape).zero_())\nout.append(x.new_empty((2, int(n))).zero_())",
        "out.append(x.new_tensor(x.shape))\nout.append(x.new_tensor([x.shape[0], n]))",
        "out.append(torch.zeros(x.shape, dtype=x.dtype))\nout.append(torch.ones(*x.shape))",
        "out.append(torch.full(x.size(), n))\nout.append(torch.empty(x.shape[0], 2).zero_())",
        "try:\n    out.append(torch.zeros(n))\nexcept TypeError as e:\n    out.append(str(e))",
        "out.append(torch.arange(x.shape[0]))\nout.append(torch.arange(n))",
        "out.append(torch.rand(x.shape))\nout.append(torch.randn(x.size()))",
        "out.append(torch.randint(0, 9, x.shape))\nout.append(torch.randint(5, size=(int(n) + 1,)))",
        "out.append(torch.zeros_like(x).shape)\nout.append(torch.full_like(x, 2).dtype)\n"
        "out.append(torch.empty_like(x, dtype=torch.float64).zero_())",
        "out.append(x.reshape(-1).view(x.shape) + 0)\nout.append(x.reshape(x.shape[::-1]) + 0)",
        "out.append(x.expand(2, *x.shape) + 0)\nout.append(x.expand(torch.Size([3]) + x.shape).shape)",
        "out.append(x.repeat(x.shape))\nout.append(x.tile((2,)))\nout.append(x.tile(x.shape).shape)",
        "out.append(x.permute(*range(x.dim() - 1, -1, -1)).shape)\nout.append(x.flatten(0).shape)\n"
        "out.append(x.permute(torch.Size(range(x.dim()))).shape)",
        "out.append(x.new_empty_strided(x.shape, x.stride()).zero_().stride())\n"
        "out.append(torch.empty_strided(x.size(), (1,) * x.dim()).shape)",
        "try:\n    out.append(torch.Size([x.shape[0], n]))\nexcept TypeError as e:\n    out.append(str(e))",
        "out.append(torch.zeros(torch.tensor(2)))\nout.append(x.new_zeros(torch.tensor(3), 1))",
        "out.append(x.reshape(torch.tensor(x.numel())) + 0)",
        "out.append(torch.ones(np.int64(2), 3))\nout.append(x.new(np.int64(2)).zero_())\n"
        "out.append(torch.Size([np.int64(2)]))",
        "try:\n    out.append(torch.zeros(2, (3,)))\nexcept TypeError as e:\n    out.append(type(e).__name__)",
        "try:\n    out.append(x.new(torch.Size([2]), 3))\nexcept TypeError as e:\n    out.append(type(e).__name__)",
        "try:\n    out.append(x.view(x.shape[0], (2,)))\nexcept TypeError as e:\n    out.append(type(e).__name__)",
        "y = x.detach().clone()\ny.resize_(x.shape[::-1])\nout.append(y + 0)\n"
        "out.append(y.resize_(torch.Size([2])) + 0)",
        "out.append(x.reshape(-1)[:1].expand_as(x).shape)\nout.append(x.reshape(shape=x.shape).shape)",
        "out.append(x.reshape(-1).reshape(x.shape[0], -1).shape)\nout.append(x.unflatten(0, x.shape[:1]).shape)",
        "out.append(x.new(torch.Size()).zero_())\nout.append(torch.zeros(torch.Size()))\nout.append(x.new(()))",
        "out.append(x.new(x) + 0)\nout.append(torch.Size(x.shape) == x.shape)\nout.append(type(x.shape[1:]))",
    ])
