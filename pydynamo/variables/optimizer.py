"""An optimizer's lazily made state, made for real while tracing its first step.

torch.optim's optimizers make their per-parameter state (``step``, ``exp_avg``, momentum
buffers...) in ``_init_group`` at the first ``step()`` that sees a parameter's gradient. Traced as
it is, that first step puts the new state in the graph, and the next call, which finds the state
made, compiles again. Instead, before the traced call of ``_init_group`` the real one runs on the
real optimizer, as eager's first step would: it reads only the parameters, their gradients' metadata
and the group's flags, and writes only zero-initialised state, so running it a moment early is
unobservable. The traced call then finds the state made: it is read from the inputs and guarded as
on every later call, so the first compile is the only one.

It runs only where nothing the trace did so far could change what it makes: no pending effect
other than attribute writes on the optimizer outside its ``state``/``param_groups``/``defaults``
(the scheduler's ``_opt_called``) and calls recorded for replay (logging): no group or
parameter changed; and the optimizer's ``state`` not read yet by the trace. Otherwise the state is made by the traced code, as before.
"""
import inspect

import torch

_STATE_ATTRS = ("state", "param_groups", "defaults")


def is_torch_init_group(fn):
    return getattr(fn, "__name__", None) == "_init_group" and \
        (getattr(fn, "__module__", None) or "").startswith("torch.optim.")


def refuse_step_closure(fn, args, kwargs):
    """``opt.step(closure)`` of a torch optimizer (LBFGS...): the closure runs the forward and
    ``backward()`` several times inside the step, with data-dependent stopping tests; the step is
    left to run eagerly, with that reason, rather than broken into pieces at each of them."""
    from .objects import UserDefinedObjectVariable
    if getattr(fn, "__name__", None) != "step" or \
            not (getattr(fn, "__module__", None) or "").startswith("torch.optim."):
        return
    if not args or not isinstance(args[0], UserDefinedObjectVariable) or \
            not isinstance(args[0].value, torch.optim.Optimizer):
        return
    closure = args[1] if len(args) > 1 else kwargs.get("closure")
    if closure is None or (closure.is_python_constant() and closure.as_python_constant() is None):
        return
    from ..exc import Unsupported
    raise Unsupported(f"{type(args[0].value).__name__}.step(closure): the closure runs the forward and "
                      "backward() inside the optimizer's step, which runs eagerly",
                      "compile the closure's forward (the model) instead of the optimizer step")


def make_state_before_init_group(tx, fn, args):
    """Before the traced ``opt._init_group(group, ...)``: run the real one for every group of
    ``opt`` whose parameters with gradients lack state (see the module docstring)."""
    from .objects import UserDefinedObjectVariable
    if not args or not isinstance(args[0], UserDefinedObjectVariable) or args[0].source is None:
        return
    opt = args[0].value
    if not isinstance(opt, torch.optim.Optimizer):
        return
    own = getattr(type(opt), "_init_group", None)
    if fn is not own and fn is not getattr(own, "__wrapped__", None):
        return
    if not any(p.grad is not None and not opt.state.get(p)
               for g in opt.param_groups for p in g["params"]):
        return
    if not _nothing_pending(tx, args[0]):
        return
    params = list(inspect.signature(fn).parameters)
    if params[:2] != ["self", "group"]:
        return
    try:
        with torch.set_grad_enabled(bool(opt.defaults.get("differentiable", False))):
            for group in opt.param_groups:
                fn(opt, group, *[[] for _ in params[2:]])
    except Exception:  # (a sparse gradient...): the traced call raises it, or breaks
        return


def _nothing_pending(tx, opt_var):
    state = opt_var.source.name() + ".state"
    if "state" in opt_var.attrs or any(name == state or name.startswith((state + "[", state + "."))
                                       for name in tx.output.tracked_sources):
        return False  # the trace read the state as it was: its tracker and guards would be stale
    for effect in tx.output.side_effects.pending():
        kind = effect[0]
        if kind == "call":
            continue
        if kind == "objattr" and effect[1] is opt_var and effect[2] not in _STATE_ATTRS:
            continue
        return False
    return True
