"""Feature family about graph inputs reached by two paths (issue 42): one tensor object read
through a variable and through a global (one graph input, guarded as the same object), written
in place through one path and read through the other, used only for its size (an input the graph
drops, its size a constant or a symbol), and tied module parameters (`linb.weight is
lin.weight`). Mutations make the paths distinct objects, views sharing memory, other sizes, and
untie or re-tie the parameters, so an entry compiled for one case must not serve another. See
families_tensor.py for the conventions (x a tensor, n a Python scalar, c the argument dict).
"""
from .program import pick


def fam_inputs(rng, s, place):
    u = s.uid
    s.setup = (f"tens{u} = torch.arange(3.0)\nlin{u} = torch.nn.Linear(3, 3)\nlinb{u} = torch.nn.Linear(3, 3)\n"
               f"linb{u}.weight = lin{u}.weight\n")
    s.var = place(f"tens{u}")
    s.watch.append(f"tens{u}")
    pick(rng, s, [
        "out.append($v * 2 + tens$i)",
        "$v.add_(1)\nout.append(tens$i * 1)",
        "out.append(x.sum() * tens$i.size(0) + $v.shape[0])",
        "out.append(linb$i(lin$i($v)))",
        "out.append($v is tens$i)\nout.append(tens$i - $v)",
        "tens$i.mul_(2)\nout.append($v.sum())",
    ])
    s.mut(s.var.rebind(f"tens{u}"), s.var.rebind(f"tens{u}.clone()"), s.var.rebind(f"tens{u}[:]"),
          s.var.rebind("torch.arange(5.0)"), f"tens{u} = torch.arange(4.0)",
          f"linb{u}.weight = torch.nn.Parameter(torch.ones(3, 3))", f"linb{u}.weight = lin{u}.weight")
