"""``MyFunction.apply(...)`` of a ``torch.autograd.Function`` subclass, captured in the graph.

The user's ``forward`` (or ``forward`` + ``setup_context``) is traced into a subgraph with grad
mode off, then the user's ``backward`` (``vjp``) into a second one, on stand-ins for the
gradients it receives and the values the forward left on ``ctx``. The frame's graph gets one
node, a ``_FunctionSite``, that at run time applies ``_RuntimeFunction``: a real
autograd.Function whose forward runs the forward subgraph and makes the same calls on its ctx
as the user's forward did (``save_for_backward`` of the same tensors, so autograd checks their
versions and runs saved-tensor hooks as it would; ``mark_non_differentiable``), and whose
backward runs the backward subgraph (through ``once_differentiable`` where the user's was). So
autograd itself decides what eager would: which outputs require grad, views of returned inputs,
materialized zero gradients, the checks on the gradients returned. Backends that trace the graph
(AOTAutograd) see the forward ops, and the backward ops where autograd calls the backward.

What the subgraphs cannot replay is refused, so the call runs natively: ``mark_dirty`` and
in-place changes of inputs, ``set_materialize_grads(False)`` (a compiled backward gets zeros
where eager passes None), ``save_for_forward``, side effects, a backward that branches on data
or reads global torch state (it runs after the frame's guards were checked), or changes the
grad mode other than by a ``no_grad`` / ``enable_grad`` block (traced as switches that restore,
when the backward runs, the mode found then: ctx.GradModeVariable._enter_in_backward).

In a backward, grad mode is off (as backward() runs without create_graph): a Function applied
there records no autograd node, so only its forward is traced; under create_graph=True its
missing backward raises when autograd calls it (never a gradient without it), and a functorch
transform active when it runs (``is_grads_batched``) raises too (no guard can check it).

A backward is traced when the frame is, so it uses the values of the globals it reads at that
time, guarded when the frame is called (torch.compile does the same): a global rebound between
the forward and the backward is not seen.
"""
import contextlib
import inspect

import torch
from torch.autograd.function import _SingleLevelFunction, once_differentiable

from ..exc import Unsupported
from ..source import AttrSource, cell_contents_source
from .base import GetAttrVariable, VariableTracker
from .constant import ConstantVariable
from .lists import ListVariable, TupleVariable
from .subgraph import Region, graph_value, guards_for, in_backward

_FUNCTION_APPLY = torch.autograd.Function.__dict__["apply"].__func__
_ONCE_DIFFERENTIABLE_CODE = once_differentiable(lambda ctx: None).__code__
# attributes of the ctx class itself: storing one is refused (a read-only property, or a method
# the autograd machinery calls)
_CTX_CLASS = torch.autograd.function.BackwardCFunction


def is_function_class(value):
    return isinstance(value, type) and issubclass(value, torch.autograd.Function) \
        and value is not torch.autograd.Function


def is_apply_method(value):
    """``MyFunction.apply`` read as a value (``my_op = MyFunction.apply``)."""
    return inspect.ismethod(value) and value.__func__ is _FUNCTION_APPLY and is_function_class(value.__self__)


class _FunctorchInactive:
    def __call__(self):
        return not torch._C._are_functorch_transforms_active()


class AutogradFunctionApplyVariable(VariableTracker):
    """``cls.apply`` of an autograd.Function subclass (``cls_var``: its class tracker)."""

    def __init__(self, cls_var, source=None):
        super().__init__(source)
        self.cls_var = cls_var

    def python_type(self):
        return type(self.cls_var.value.apply)

    def call_function(self, tx, args, kwargs):
        return trace_apply(tx, self.cls_var, list(args), dict(kwargs))

    def reconstruct(self, codegen):
        from .. import bytecode_utils as bu
        codegen(self.cls_var)
        codegen.append(bu.create_load_attr("apply"))

    def _repr_value(self):
        return f"{self.cls_var.value.__qualname__}.apply"


def check_apply(tx, cls_var):
    """``cls.apply`` is autograd.Function's own (guarded where the class has a source)."""
    cls = cls_var.value
    if inspect.getattr_static(cls, "apply") is not torch.autograd.Function.__dict__["apply"]:
        raise Unsupported(f"{cls.__qualname__} overrides autograd.Function.apply")
    if cls_var.source is not None:
        tx.output.guards.ID_MATCH(AttrSource(AttrSource(cls_var.source, "apply"), "__func__"), _FUNCTION_APPLY)


def _class_attr(tx, cls_var, name):
    return cls_var.var_getattr(tx, name)


def _user_backward(tx, cls_var):
    """The function autograd calls as the backward (BackwardCFunction._get_user_fn): ``vjp``
    where the class overrides it, else ``backward``; unwrapped from ``once_differentiable``."""
    name = cls_var.value.__qualname__
    backward, vjp = _class_attr(tx, cls_var, "backward"), _class_attr(tx, cls_var, "vjp")
    base = torch.autograd.Function
    own_backward = getattr(backward, "value", None) is not base.backward
    own_vjp = getattr(vjp, "value", None) is not base.vjp
    if own_backward and own_vjp:
        raise Unsupported(f"{name} implements both backward and vjp (autograd raises)")
    if not own_backward and not own_vjp:
        raise Unsupported(f"{name} implements no backward")
    fn_var = vjp if own_vjp else backward
    fn = getattr(fn_var, "value", None)
    if getattr(fn, "__code__", None) is not _ONCE_DIFFERENTIABLE_CODE:
        return fn_var, False
    from .builder import wrap_value
    index = fn.__code__.co_freevars.index("fn")
    src = cell_contents_source(fn_var.source, index) if fn_var.source is not None else None
    return wrap_value(tx, fn.__closure__[index].cell_contents, src), True


def _bind_setup_context_args(tx, fwd, args, kwargs, name):
    """Function.apply's ``bind_default_args(cls.forward, ...)`` for setup_context-style
    Functions: every positional-or-keyword parameter, defaults applied, ``*args`` spread."""
    from .functions import UserFunctionVariable, bind_args
    if not isinstance(fwd, UserFunctionVariable):
        raise Unsupported(f"{name}.forward is a {type(fwd.value).__name__}")
    code = fwd.value.__code__
    if code.co_kwonlyargcount:
        raise Unsupported(f"{name}.forward has keyword-only parameters (autograd.Function.apply "
                          "passes them as keywords, which forward does not take)")
    bound = bind_args(code, args, kwargs, lambda i: fwd._default(tx, i), lambda n: fwd._kwdefault(tx, n))
    positional = [bound[n] for n in code.co_varnames[:code.co_argcount]]
    if code.co_flags & inspect.CO_VARARGS:
        positional += bound[code.co_varnames[code.co_argcount]].items
    if code.co_flags & inspect.CO_VARKEYWORDS and bound[code.co_varnames[-1]].items:
        raise Unsupported(f"{name}.forward takes **kwargs, which autograd.Function.apply cannot pass")
    return positional


class AutogradCtxVariable(VariableTracker):
    """The ``ctx`` of one traced apply: what forward and setup_context store on it, read back by
    backward. Never leaves the trace of its apply (``region``: the forward's)."""

    _METHODS = ("save_for_backward", "mark_non_differentiable", "set_materialize_grads",
                "mark_dirty", "save_for_forward", "mark_shared_storage")

    def __init__(self, fn_cls, needs_input_grad):
        super().__init__(None)
        self.fn_cls = fn_cls
        self.needs_input_grad = needs_input_grad
        self.attrs = {}
        self.saved = []
        self.non_differentiable = []
        self.phase = "forward"
        self.read_saved = False
        self.region = None

    def python_type(self):
        return self.fn_cls._backward_cls

    def var_getattr(self, tx, name):
        if name in self.attrs:
            return self.attrs[name]
        if name == "needs_input_grad":
            return TupleVariable([ConstantVariable(b) for b in self.needs_input_grad])
        if name == "saved_tensors":
            if self.phase != "backward":
                raise Unsupported("ctx.saved_tensors read in forward (autograd raises)")
            self.read_saved = True
            return TupleVariable(list(self.saved))
        if name in self._METHODS:
            return GetAttrVariable(self, name)
        raise Unsupported(f"ctx.{name} of {self.fn_cls.__qualname__}, which the trace did not store")

    def has_attr(self, tx, name):
        if name in self.attrs or name in ("needs_input_grad", "saved_tensors", *self._METHODS):
            return True
        if hasattr(_CTX_CLASS, name):
            raise Unsupported(f"hasattr(ctx, {name!r})")
        return False

    def store_attr(self, tx, name, value):
        if self.phase != "forward":
            raise Unsupported(f"ctx.{name} assigned in backward (a later backward would see it)")
        if hasattr(_CTX_CLASS, name) or hasattr(self.fn_cls._backward_cls, name):
            raise Unsupported(f"assignment to ctx.{name}, an attribute of the ctx class")
        self.attrs[name] = value
        return ConstantVariable(None)

    def call_method(self, tx, name, args, kwargs):
        from .tensor import TensorVariable
        if name not in self._METHODS or name in self.attrs:
            return super().call_method(tx, name, args, kwargs)
        if self.phase != "forward":
            raise Unsupported(f"ctx.{name}() called in backward")
        if kwargs:
            raise Unsupported(f"ctx.{name}() with keyword arguments")
        if name == "save_for_backward":
            for a in args:
                if not isinstance(a, TensorVariable) and not (isinstance(a, ConstantVariable) and a.value is None):
                    raise Unsupported(f"ctx.save_for_backward({a}): only tensors and None (autograd raises)")
            self.saved = list(args)
        elif name == "mark_non_differentiable":
            if not all(isinstance(a, TensorVariable) for a in args):
                raise Unsupported("ctx.mark_non_differentiable of a value that is not a tensor")
            self.non_differentiable.extend(args)
        elif name == "set_materialize_grads":
            if len(args) != 1 or not args[0].is_python_constant():
                raise Unsupported("ctx.set_materialize_grads with a value not known while tracing")
            if not args[0].as_python_constant():
                raise Unsupported("ctx.set_materialize_grads(False): the compiled backward would get "
                                  "zero tensors where eager passes None for unused outputs")
        else:
            raise Unsupported(f"ctx.{name}() (in-place outputs, forward-mode AD) is not captured")
        return ConstantVariable(None)

    def _repr_value(self):
        return f"ctx of {self.fn_cls.__qualname__}"


def _output_items(out, name):
    """The forward's result as autograd takes it: one tensor, or a tuple of tensors and
    constants. Returns (items, is_tuple)."""
    from .tensor import TensorVariable
    if isinstance(out, TensorVariable):
        return [out], False
    if isinstance(out, TupleVariable) and out.python_type() is tuple:
        for item in out.items:
            if not isinstance(item, (TensorVariable, ConstantVariable)):
                raise Unsupported(f"{name}.forward returns a tuple holding {item}")
        if not any(isinstance(item, TensorVariable) for item in out.items):
            raise Unsupported(f"{name}.forward returns no tensor")
        return list(out.items), True
    raise Unsupported(f"{name}.forward returns {out}, neither a tensor nor a tuple")


def trace_apply(tx, cls_var, args, kwargs):
    from .tensor import TensorVariable
    cls = cls_var.value
    name = cls.__qualname__
    # inside a backward being traced: grad mode is off there (as backward() runs without
    # create_graph), so no node is recorded and its own backward is not traced; under
    # create_graph=True autograd would record one, whose backward then raises (_run_backward)
    check_apply(tx, cls_var)
    if torch._C._are_functorch_transforms_active():
        raise Unsupported(f"{name}.apply under a functorch transform (vmap, grad, ...)")
    traced_in_backward = in_backward(tx)
    if not traced_in_backward:  # (in a backward: checked when the site runs, guards are behind)
        tx.output.guards.PREDICATE(None, _FunctorchInactive(), "no functorch transform is active")
    # torch 2.13's boxed-gradients protocol (absent before it: guarded absent)
    if cls_var.has_attr(tx, "boxed_grads_call") and _class_attr(tx, cls_var, "boxed_grads_call").as_python_constant():
        raise Unsupported(f"{name}.boxed_grads_call is set")
    fwd = _class_attr(tx, cls_var, "forward")
    setup = _class_attr(tx, cls_var, "setup_context")
    setup_style = getattr(setup, "value", None) is not _SingleLevelFunction.setup_context
    if setup_style:
        args = _bind_setup_context_args(tx, fwd, args, kwargs, name)
    elif kwargs:
        raise Unsupported(f"{name}.apply with keyword arguments")
    needs = tuple(isinstance(a, TensorVariable) and bool(a.example_value.requires_grad) for a in args)
    ctx = AutogradCtxVariable(cls, needs)
    grad_mode = torch.is_grad_enabled()

    with Region(tx, f"{name}.forward") as fr, guards_for(tx, "forward"):
        ctx.region = fr
        torch._C._set_grad_enabled(False)
        if setup_style:
            out = fwd.call_function(tx, list(args), {})
            setup.call_function(tx, [ctx, TupleVariable(list(args)), out], {})
        else:
            out = fwd.call_function(tx, [ctx, *args], {})
        torch._C._set_grad_enabled(grad_mode)
        items, is_tuple = _output_items(out, name)
        non_diff = {m.node for m in ctx.non_differentiable}
        if non_diff - {v.node for v in items if isinstance(v, TensorVariable)}:
            raise Unsupported(f"{name}: ctx.mark_non_differentiable of a tensor that is not an output")
        fr.check()
        ctx.phase = "backward"
        backward, once = None, False
        if grad_mode and any(needs):  # else autograd records no node: backward never runs
            bwd, once = _user_backward(tx, cls_var)
            backward = _trace_backward(tx, bwd, ctx, items, args, name, cls.__name__)
        # the forward subgraph returns the outputs, the saved tensors and what backward reads
        saved = [v.node if isinstance(v, TensorVariable) else None for v in ctx.saved]
        extras = [n for n in (backward.lifted if backward else []) if n not in saved]
        fwd_out = list(dict.fromkeys([*(v.node for v in items if isinstance(v, TensorVariable)),
                                      *(n for n in saved if n is not None), *extras]))
        fwd_gm, fwd_lifted = fr.extract([], fwd_out, f"{cls.__name__}Forward")

    position = {n: k for k, n in enumerate(fwd_out)}
    outputs = [(position[v.node], None) if isinstance(v, TensorVariable) else (None, v.value) for v in items]
    # the node's arguments: the values of the frame's graph the forward reads that are not
    # apply's arguments (in a list: hidden from autograd), then apply's arguments, where
    # anything but tensors and symbolic ints is None (the subgraph has what it read of them)
    call_args, arg_of = _call_arguments(args)
    hidden = [n for n in fwd_lifted if n not in arg_of]
    site = _FunctionSite(
        name=cls.__name__, fwd=fwd_gm, outputs=outputs, is_tuple=is_tuple,
        fwd_inputs=[("arg", arg_of[n]) if n in arg_of else ("hidden", hidden.index(n)) for n in fwd_lifted],
        saved=[position[n] if n is not None else None for n in saved],
        extras=[position[n] for n in extras],
        non_differentiable=[i for i, v in enumerate(items) if getattr(v, "node", None) in non_diff],
        backward=backward and backward.runtime(saved, extras), read_saved=ctx.read_saved, once=once,
        in_backward=traced_in_backward)
    hidden_var = ListVariable([graph_value(n) for n in hidden])
    result = tx.output.call_graph(tx, "call_function", site, (hidden_var, *call_args), {})
    tensors = iter(result.items)
    rebuilt = [next(tensors) if isinstance(v, TensorVariable) else v for v in items]
    return TupleVariable(rebuilt) if is_tuple else rebuilt[0]


def _call_arguments(args):
    """apply's arguments as the site's node takes them, and the position of each graph value."""
    from .sym import SymNodeVariable
    from .tensor import TensorVariable
    call_args, arg_of = [], {}
    for i, a in enumerate(args):
        if isinstance(a, (TensorVariable, SymNodeVariable)):
            arg_of.setdefault(a.node, i)
            call_args.append(a)
        else:
            call_args.append(ConstantVariable(None))
    return call_args, arg_of


class _TracedBackward:
    """A backward subgraph ``(*gradients, *lifted) -> gradients of apply's arguments``."""

    def __init__(self, gm, stand_ins, grad_of, lifted, grad_results):
        self.gm, self.stand_ins, self.grad_of, self.lifted = gm, stand_ins, grad_of, lifted
        self.grad_results = grad_results

    def runtime(self, saved, extras):
        """(module, where each input comes from, which output is each argument's gradient):
        ``("grad", i)`` the gradient of output i, ``("saved", j)`` ctx.saved_tensors[j],
        ``("extra", k)`` the k-th other value the forward keeps for it."""
        inputs = []
        for n in [*self.stand_ins, *self.lifted]:
            if n in self.grad_of:
                inputs.append(("grad", self.grad_of[n]))
            elif n in saved:
                inputs.append(("saved", saved.index(n)))
            else:
                inputs.append(("extra", extras.index(n)))
        out = list(dict.fromkeys(g.node for g in self.grad_results if g is not None))
        grads = [out.index(g.node) if g is not None else None for g in self.grad_results]
        return self.gm, inputs, grads


def _trace_backward(tx, bwd, ctx, items, args, name, cls_name):
    """The user's backward traced on stand-ins for the gradients autograd passes it (a tensor
    like each tensor output, contiguous: the site makes them so; None for other outputs), with
    grad mode off and no autocast, as backward() usually runs."""
    from .tensor import TensorVariable
    frozen = [*ctx.attrs.values(), *ctx.saved]  # a later backward sees them as they are
    with Region(tx, f"{name}.backward", frozen) as br, guards_for(tx, "backward"), _backward_state():
        grads, stand_ins, grad_of = [], [], {}
        for i, item in enumerate(items):
            if isinstance(item, TensorVariable):
                fake = item.example_value
                with tx.output.fake_mode:
                    fake = torch.empty(fake.shape, dtype=fake.dtype, device=fake.device)
                node = br.stand_in(fake, f"grad_out_{i}")
                grad_of[node] = i
                stand_ins.append(node)
                grads.append(TensorVariable(node, fake))
            else:
                grads.append(ConstantVariable(None))
        result = bwd.call_function(tx, [ctx, *grads], {})
        grad_results = _grad_results(result, args, name)
        br.check()
        for node in br.nodes():
            if node.target in _STATE_SWITCHES and not node.meta.get("pydynamo_backward_grad_block"):
                raise Unsupported(f"{name}.backward switches global state ({node.target.__name__})")
        bwd_out = list(dict.fromkeys(g.node for g in grad_results if g is not None))
        bwd_gm, lifted = br.extract(stand_ins, bwd_out, f"{cls_name}Backward")
    return _TracedBackward(bwd_gm, stand_ins, grad_of, lifted, grad_results)


def _state_switches():
    import torch.amp.autocast_mode as am
    import torch.autograd.grad_mode as gm
    names = [(torch._C, "_set_grad_enabled"), (am, "_enter_autocast"), (am, "_exit_autocast"),
             (gm, "_enter_inference_mode"), (gm, "_exit_inference_mode")]
    return tuple(getattr(m, n) for m, n in names if hasattr(m, n))


_STATE_SWITCHES = _state_switches()
_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu")


@contextlib.contextmanager
def _backward_state():
    grad = torch.is_grad_enabled()
    autocast = []
    for device in _AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                autocast.append(device)
        except RuntimeError:  # a device type this build does not know
            pass
    torch._C._set_grad_enabled(False)
    for device in autocast:
        torch.set_autocast_enabled(device, False)
    try:
        yield
    finally:
        torch._C._set_grad_enabled(grad)
        for device in autocast:
            torch.set_autocast_enabled(device, True)


def _grad_results(result, args, name):
    """What backward returned, one entry per apply argument: a TensorVariable or None. The
    checks autograd makes on it (count, None for non-tensor inputs) are refusals here, so that
    autograd raises natively."""
    from .tensor import TensorVariable
    if isinstance(result, TupleVariable) and result.python_type() is tuple:
        items = list(result.items)
    else:
        items = [result]
    out = []
    for item in items:
        if isinstance(item, TensorVariable):
            out.append(item)
        elif isinstance(item, ConstantVariable) and item.value is None:
            out.append(None)
        else:
            raise Unsupported(f"{name}.backward returns {item}, not a tensor or None")
    if len(out) < len(args) or any(g is not None for g in out[len(args):]):
        raise Unsupported(f"{name}.backward returns {len(out)} gradients for {len(args)} inputs "
                          "(autograd raises)")
    out = out[:len(args)]
    for a, g in zip(args, out):
        if g is not None and not isinstance(a, TensorVariable):
            raise Unsupported(f"{name}.backward returns a gradient for an input that is not a "
                              "tensor (autograd raises)")
    return out


class _FunctionSite:
    """The graph node of one traced apply: ``site(hidden, *args)`` applies _RuntimeFunction and
    returns the forward's tensor outputs, as a tuple."""

    def __init__(self, *, name, fwd, fwd_inputs, outputs, is_tuple, saved, extras,
                 non_differentiable, backward, read_saved, once, in_backward=False):
        self.__name__ = self.__qualname__ = f"autograd_function_{name}"
        self.fwd, self.fwd_inputs, self.outputs, self.is_tuple = fwd, fwd_inputs, outputs, is_tuple
        self.saved, self.extras, self.non_differentiable = saved, extras, non_differentiable
        self.bwd, self.bwd_inputs, self.grads = backward or (None, None, None)
        self.read_saved = read_saved
        self.backward = once_differentiable(_run_backward) if once else _run_backward
        self.in_backward = in_backward

    def __call__(self, hidden, *args):
        if self.in_backward and torch._C._are_functorch_transforms_active():
            raise RuntimeError(f"{self.__name__}: pydynamo traced this autograd.Function inside a "
                               "backward with no functorch transform active, and one is "
                               "(is_grads_batched=True?); differentiate it outside compiled code")
        outs = _RuntimeFunction.apply(self, hidden, *args)
        if not self.is_tuple:
            return (outs,)
        return tuple(o for o, (k, _) in zip(outs, self.outputs) if k is not None)

    def __repr__(self):
        return f"<{self.__name__}>"


class _RuntimeFunction(torch.autograd.Function):
    """What the user's Function does, with its forward and backward traced."""

    @staticmethod
    def forward(ctx, site, hidden, *args):
        flat = site.fwd.forward(*(args[i] if kind == "arg" else hidden[i] for kind, i in site.fwd_inputs))
        outs = tuple(flat[k] if k is not None else c for k, c in site.outputs)
        ctx.save_for_backward(*(flat[k] if k is not None else None for k in site.saved))
        ctx.pydynamo_site = site
        ctx.pydynamo_extras = [flat[k] for k in site.extras]
        if site.non_differentiable:
            ctx.mark_non_differentiable(*(outs[i] for i in site.non_differentiable))
        return outs if site.is_tuple else outs[0]

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, *ctx.pydynamo_site.backward(ctx, *grads))


def _run_backward(ctx, *grads):
    site = ctx.pydynamo_site
    if site.bwd is None:  # traced with grad mode off, or no input requiring grad
        raise RuntimeError(f"{site.__name__}: pydynamo traced this autograd.Function where autograd "
                           "records no node for it (grad mode off, as in a backward run without "
                           "create_graph=True), so its backward was not traced; differentiate it "
                           "outside compiled code")
    saved = ctx.saved_tensors if site.read_saved else ()
    inputs = []
    for kind, i in site.bwd_inputs:
        if kind == "grad":
            inputs.append(grads[i].contiguous())  # traced on contiguous stand-ins
        elif kind == "saved":
            inputs.append(saved[i])
        else:
            inputs.append(ctx.pydynamo_extras[i])
    flat = site.bwd.forward(*inputs)
    return tuple(flat[k] if k is not None else None for k in site.grads)
