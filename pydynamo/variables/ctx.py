"""Context managers that change torch's global state: torch.no_grad(), torch.enable_grad(),
torch.set_grad_enabled(mode). Entering and exiting record a grad-mode switch in the graph and
also flip the real mode, so fake tensors propagate requires_grad as eager would."""
import torch

from ..exc import Unsupported
from .base import VariableTracker
from .constant import ConstantVariable


def set_grad_mode(tx, mode):
    torch._C._set_grad_enabled(mode)
    tx.output.graph.call_function(torch._C._set_grad_enabled, (mode,))


class GradModeVariable(VariableTracker):
    def __init__(self, target, initial, entered_on_create, cls=None):
        super().__init__(None)
        self.target, self.initial = target, initial
        self.entered_on_create = entered_on_create
        self.cls = cls or (torch.set_grad_enabled if entered_on_create else
                           torch.enable_grad if target else torch.no_grad)

    @staticmethod
    def create(tx, fn, args, kwargs):
        if args and not kwargs and len(args) == 1 and fn is torch.set_grad_enabled:
            target = args[0].as_python_constant()
            # like eager, set_grad_enabled(mode) switches at once, even without `with`
            var = GradModeVariable(bool(target), torch.is_grad_enabled(), True)
            set_grad_mode(tx, var.target)
            return var
        if args or kwargs:
            raise Unsupported(f"{fn.__name__} with arguments")
        return GradModeVariable(fn is torch.enable_grad, torch.is_grad_enabled(), False, fn)

    def python_type(self):
        return self.cls

    def enter(self, tx):
        if not self.entered_on_create:
            self.initial = torch.is_grad_enabled()
            set_grad_mode(tx, self.target)
        return ConstantVariable(None)

    def exit(self, tx):
        set_grad_mode(tx, self.initial)
        return ConstantVariable(None)

    def call_method(self, tx, name, args, kwargs):
        if name == "__enter__" and not args and not kwargs:
            return self.enter(tx)
        if name == "__exit__" and not kwargs:
            return self.exit(tx)
        raise Unsupported(f"grad mode context manager .{name}")

    def _repr_value(self):
        return f"grad_enabled={self.target}"


class WithExitVariable(VariableTracker):
    """The ``__exit__`` that BEFORE_WITH leaves on the stack."""

    def __init__(self, ctx):
        super().__init__(None)
        self.ctx = ctx

    def call_function(self, tx, args, kwargs):
        return self.ctx.exit(tx)
