"""Feature families for symbolic numbers and training state (issue 40): a counter attribute that
changes between calls (so it becomes a SymInt) divided by, taken modulo, raised to a negative
power (its zero must raise ZeroDivisionError whatever the backend) and passed to math.cos/atan
(kept symbolic only where provably finite); and a torch optimizer whose state is made lazily at
its first traced step (made for real while tracing), with its groups, gradients and state changed
between calls and by the trace itself (not Adam: compiling, its step sizes are float32 tensors
where eager's are Python floats, so its results differ in the last bits, as under torch.compile,
and the comparison here is exact). See families_tensor.py for the conventions (x a tensor,
n a Python scalar, out the result).
"""
from .program import pick

COUNTER_SRC = '''class Ctr$i:
    def __init__(self, k):
        self.k = k
'''


def fam_counters(rng, s, place):
    s.setup = COUNTER_SRC.replace("$i", str(s.uid))
    s.var = place("Ctr$i(2)".replace("$i", str(s.uid)))
    pick(rng, s, [
        "$v.k -= 1\nout.append(x * (1 / $v.k))",
        "$v.k += 1\nout.append(x * (7 // $v.k) + 7 % $v.k)",
        "out.append(x * ($v.k ** -1))",
        "$v.k += 1\nout.append(x * math.cos(math.pi * $v.k / 4) + math.atan($v.k))",
        "out.append(x * math.cos($v.k * 1e300))",
        "out.append(x * (n / ($v.k - 1)))",
    ], k=(1, 2))
    s.mut("$p.k = 0", "$p.k = -3", "$p.k = 1", "$p.k = 10 ** 12", "$p.k += 5")


OPTIM_SRC = '''def opt$i(kind):
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(2, 2))]
    for p in ps:
        p.grad = torch.ones_like(p)
    if kind == 'adagrad':
        return torch.optim.Adagrad(ps, lr=0.1)
    if kind == 'sgd':
        return torch.optim.SGD(ps, lr=0.1, momentum=0.9)
    return torch.optim.RMSprop(ps, lr=0.01)
'''


def fam_optim(rng, s, place):
    s.setup = OPTIM_SRC.replace("$i", str(s.uid))
    s.var = place("opt$i(%r)".replace("$i", str(s.uid)) % rng.choice(["adagrad", "sgd", "rmsprop"]))
    pick(rng, s, [
        "$v.step()\nout.append([p.detach().clone() for p in $v.param_groups[0]['params']])",
        "$v.param_groups[0]['params'][0].grad = x.new_ones(3).float() if x.is_floating_point() else None\n"
        "$v.step()\nout.append(sorted(len(v) for v in $v.state.values()))",
        "out.append(len($v.state))\n$v.step()\nout.append(len($v.state))",
        "$v.param_groups[0]['weight_decay'] = 0.5\n$v.step()\n"
        "out.append($v.param_groups[0]['params'][1].detach().clone())",
    ], k=(1, 2))
    s.mut("$p.state.clear()", "$p.param_groups[0]['params'][1].grad = None",
          "$p.param_groups[0]['lr'] = 0.5", "$p.zero_grad()",
          "for q in $p.param_groups[0]['params']:\n    q.grad = torch.full_like(q, 2.0)")
