"""Feature family about traced bodies: vmap'd and grad'ed functions and nested compile regions
that read a piece of state, mutated between calls, so what a body reads must be guarded as the
frame's own reads are. (torch.cond, while_loop and scan are left out: their eager reference runs
torch._dynamo, whose own cache the harness's mutations can leave stale, which the fuzzer would
report against pydynamo; tests/test_hop_control_flow.py checks their guards.) See families_tensor.py for the
conventions (x a tensor, n a Python scalar, c the argument dict).
"""
from .program import pick

# h: a small float copy of x (x may be int, bool or complex)
_H = "h = x.reshape(-1)[:4]\nh = (h.real if h.is_complex() else h).detach().to(torch.float32) + 0.5\n"


def fam_hops(rng, s, place):
    s.var = place(rng.choice(["2", "3", "0.5", "-1"]))
    pick(rng, s, [
        _H + "out.append(torch.func.vmap(lambda r: r * $v + r.sum())(h.reshape(1, -1)))",
        _H + "out.append(torch.func.grad(lambda a: (a * $v).sin().sum())(h))",
        _H + "def rr(a):\n    return a * $v + 1\nrr = torch.compiler.nested_compile_region(rr)\n"
             "out.append(rr(h) + rr(h * 2))",
    ], k=(1, 2))
    for value in rng.sample(["0", "1", "3", "2.5", "-2"], 3):
        s.mut(s.var.rebind(value))
