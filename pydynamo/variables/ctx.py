"""Torch's context managers that switch global state while a block runs, in `with` and in
decorator form: grad mode (``torch.no_grad()``, ``enable_grad()``, ``set_grad_enabled(mode)``),
``torch.inference_mode(mode)``, autocast (``torch.autocast`` / ``torch.amp.autocast``,
``torch.cpu.amp.autocast``, ``torch.cuda.amp.autocast``), profiler ranges
(``torch.profiler.record_function``) and ``torch.nn.attention.sdpa_kernel``.

Entering or leaving one records the switch in the graph, with the nodes torch.compile's graphs
hold (``torch._C._set_grad_enabled``, ``torch.amp.autocast_mode._enter_autocast`` /
``_exit_autocast``, ``torch.autograd.grad_mode._enter_inference_mode`` / ``_exit_...``,
``torch.ops.profiler._record_function_enter_new`` / ``_record_function_exit``,
``torch.nn.attention._sdpa_kernel``), and makes the switch for real while tracing, so fake
tensors propagate what eager computes (dtypes under autocast, requires_grad, inference bits).
The managers entered are kept per trace (``_TraceState.active``), innermost last: they must be
left in that order, a trace that stops inside one leaves it for real (``leave_all``), and a
graph break inside `with` blocks (``close_blocks``) leaves them in the graph, so every graph
begins and ends in the state of the frame's entry; the new code enters them again natively
around the instruction it runs (``codegen_enter`` / ``codegen_exit``), and the resume
function's prologue enters them again from ``reentry()``.

What the trace depends on of the global state at the frame's entry is guarded: grad mode and
autocast (on the devices this process has) at every entry (translator.convert, guards.py);
inference mode, another device's autocast, an autocast dtype, the autocast cache flag and the
SDPA backend flags where read, by their values at the entry (``_TraceState``).
"""
import contextlib
import warnings
import weakref

import torch

from ..exc import Unsupported
from .base import VariableTracker, signature
from .constant import ConstantVariable


def set_grad_mode(tx, mode):
    torch._C._set_grad_enabled(mode)
    tx.output.graph.call_function(torch._C._set_grad_enabled, (mode,))


# ---- per-trace state ------------------------------------------------------------------------

def _sdp_state():
    from torch.nn.attention import _cur_sdpa_kernel_backends
    return (tuple(b.name for b in _cur_sdpa_kernel_backends()), tuple(torch._C._get_sdp_priority_order()))


class _TraceState:
    """The managers a trace has entered (innermost last), and the global state it began in,
    taken before any manager switched it."""

    def __init__(self):
        self.active = []
        self.entry_autocast_dtype, self.entry_autocast_enabled = {}, {}
        self.entry_cache_enabled = torch.is_autocast_cache_enabled()
        self.entry_inference = torch.is_inference_mode_enabled()
        self.entry_sdp = _sdp_state()
        from ..guards import AUTOCAST_DEVICES
        for device in AUTOCAST_DEVICES:
            self.entry_autocast_dtype[device] = torch.get_autocast_dtype(device)
            self.entry_autocast_enabled[device] = torch.is_autocast_enabled(device)


_states = weakref.WeakKeyDictionary()  # OutputGraph -> _TraceState


def _state(tx):
    output = tx.output
    state = _states.get(output)
    if state is None:
        state = _states[output] = _TraceState()
    return state


def _guard_call(tx, fn, args, value, text=None):
    from ..guards import CallIs
    shown = ", ".join(repr(a) for a in args)
    tx.output.guards.PREDICATE(None, CallIs(fn, args, value),
                               text or f"torch.{fn.__name__}({shown}) == {value!r}")


def guard_entry_autocast_dtype(tx, device):
    state = _state(tx)
    if device not in state.entry_autocast_dtype:
        raise Unsupported(f"autocast on device {device!r}")
    _guard_call(tx, torch.get_autocast_dtype, (device,), state.entry_autocast_dtype[device])


def guard_entry_autocast_enabled(tx, device):
    """Whether autocast was enabled on ``device`` at the frame's entry: guarded at every entry
    for the devices of guards.ambient_autocast_devices(), here for another."""
    from ..guards import ambient_autocast_devices
    state = _state(tx)
    if device not in state.entry_autocast_enabled:
        raise Unsupported(f"autocast on device {device!r}")
    if device not in ambient_autocast_devices():
        _guard_call(tx, torch.is_autocast_enabled, (device,), state.entry_autocast_enabled[device])


def guard_entry_inference_mode(tx):
    tx.output.guards.INFERENCE_MODE(None, _state(tx).entry_inference)


def guard_entry_cache_enabled(tx):
    _guard_call(tx, torch.is_autocast_cache_enabled, (), _state(tx).entry_cache_enabled)


def sdpa_block_active(tx):
    """Whether the trace is inside an sdpa_kernel block (which guarded the SDPA flags on entering)."""
    return any(isinstance(c, SdpaKernelVariable) for c in _state(tx).active)


def leave_all(output):
    """Undo, for real, the switches of the managers a trace left entered (it stopped inside
    their blocks), innermost first."""
    state = _states.get(output)
    failure = None
    while state is not None and state.active:
        try:
            state.active.pop().leave_real_once()
        except Exception as e:  # noqa: BLE001 - the outer ones are still restored
            failure = failure or e
    if failure is not None:
        raise failure


def check_all_closed(tx):
    state = _states.get(tx.output)
    if state is not None and state.active:
        raise Unsupported(f"{state.active[-1]} is still entered when the frame returns")


# ---- the trackers ---------------------------------------------------------------------------

class ContextManagerVariable(VariableTracker):
    """A torch context manager. ``obj`` is the real object for one read from the frame's inputs
    (with ``source``): a decorator's, or one made before the call; None for one made in the
    trace. Subclasses give ``_enter`` / ``_exit`` (graph nodes and the real switch),
    ``leave_real`` (the real switch undone), ``reentry()`` (``(fn, args)``: ``fn(*args)`` is
    an equivalent new manager, for generated code) and ``grad_inside``."""

    cls = None

    def __init__(self, source=None, obj=None):
        super().__init__(source)
        self.obj = obj
        self.entered = False
        self.used = False  # entered once: its object is no longer a fresh one
        self.outer_grad = None  # the grad mode it was entered in
        self.enter_nodes = []

    def python_type(self):
        return self.cls

    def _exit(self, tx):
        """For managers whose enter returns an object (``self.real``) that ``_exit_fn()`` takes to
        undo the switch, for real and in the graph (inference mode, autocast)."""
        self.leave_real_once()
        self._record_exit(tx, (self._exit_fn(), (self.enter_nodes[-1],)))

    def leave_real(self):
        real, self.real = self.real, None
        self._exit_fn()(real)

    def leave_real_once(self):
        """``leave_real`` unless already done for this entry (an exit that failed after undoing
        the switch is not undone twice when the trace's managers are all left)."""
        if not getattr(self, "real_left", True):
            self.real_left = True
            self.leave_real()

    def grad_inside(self, outer):
        """The grad mode right after entering it natively in grad mode ``outer``."""
        return outer

    def enter(self, tx):
        if self.entered:
            raise Unsupported(f"entering {self} while it is already entered")
        state = _state(tx)
        self.outer_grad = torch.is_grad_enabled()
        self.real_left = False
        result = self._enter(tx)
        self.entered = self.used = True
        state.active.append(self)
        return result

    def exit(self, tx):
        active = _state(tx).active
        if not active or active[-1] is not self:
            raise Unsupported(f"leaving {self}, which is not the torch context manager entered last")
        self._exit(tx)
        active.pop()
        self.entered = False
        return ConstantVariable(None)

    def _record_enter(self, tx, *calls):
        """Graph nodes ``fn(*args)`` for each ``(fn, args)``, in order; the last one's node."""
        self.enter_nodes = [tx.output.graph.call_function(fn, args) for fn, args in calls]
        return self.enter_nodes[-1]

    def _record_exit(self, tx, *calls):
        """The exit's nodes, or none at all where nothing was recorded since the enter: an empty
        region (a block around no graph work) leaves the graph as it was."""
        graph = tx.output.graph
        if self.enter_nodes and next(iter(reversed(graph.nodes))) is self.enter_nodes[-1]:
            for node in reversed(self.enter_nodes):
                graph.erase_node(node)
        else:
            for fn, args in calls:
                graph.call_function(fn, args)
        self.enter_nodes = []

    def call_method(self, tx, name, args, kwargs):
        if name == "__enter__" and not args and not kwargs:
            return self.enter(tx)
        if name == "__exit__" and len(args) == 3 and not kwargs:
            return self.exit(tx)
        if name == "_recreate_cm" and not args and not kwargs and self.obj is not None and \
                getattr(type(self.obj), "_recreate_cm", None) is contextlib.ContextDecorator._recreate_cm:
            return self  # a ContextDecorator's (record_function's) call enters the object itself
        raise Unsupported(f"{type(self.obj or self).__name__}.{name} of a torch context manager")

    def var_getattr(self, tx, name):
        """Attributes of the real object (its instance dict and class, guarded where read);
        methods are looked up on it as calls of ``call_method``."""
        from .base import GetAttrVariable
        from .builder import wrap_value
        from ..source import AttrSource
        if name in ("__enter__", "__exit__", "_recreate_cm"):
            return GetAttrVariable(self, name)
        if name == "__class__" and self.python_type() is not None:  # (a decorator's clone())
            return wrap_value(tx, self.python_type(), AttrSource(self.source, name) if self.source else None)
        if self.obj is None or self.source is None:
            raise Unsupported(f"attribute {name!r} of {self}")
        if name == "__class__" or name in vars(self.obj):
            return wrap_value(tx, getattr(self.obj, name), AttrSource(self.source, name))
        if callable(getattr(type(self.obj), name, None)):
            return GetAttrVariable(self, name)
        raise Unsupported(f"attribute {name!r} of {self}")

    def _store_attr(self, tx, name, value):
        """An attribute the real ``__enter__`` writes on an object read from the inputs."""
        if self.obj is not None and self.source is not None:
            tx.output.side_effects.store_attr(self, name, ConstantVariable(value))

    def reconstruct(self, codegen):
        if self.source is not None:
            return self.source.reconstruct(codegen)
        if self.used or getattr(self, "entered_on_create", False):
            raise Unsupported(f"{self}, entered in the trace, as a value of the generated code")
        fn, args = self.reentry()
        codegen.load_function(fn)
        for a in args:
            codegen.load_const(a)
        codegen.append_call(len(args))


class DecoratorForm:
    """``@torch.no_grad()`` (or enable_grad, set_grad_enabled, inference_mode) applied to a
    function in the trace: what torch's _DecoratorContextManager.__call__ makes, a function
    running the wrapped one inside a fresh equal manager (``reentry``)."""

    def call_function(self, tx, args, kwargs):
        from ..bytecode_utils import is_generator
        from .functions import NestedUserFunctionVariable, UserFunctionVariable, UserMethodVariable
        if kwargs or len(args) != 1:
            raise Unsupported(f"calling {self} with these arguments")
        fn = args[0]
        code = fn.code if isinstance(fn, NestedUserFunctionVariable) else \
            fn.value.__code__ if isinstance(fn, UserFunctionVariable) else \
            fn.fn.__code__ if isinstance(fn, UserMethodVariable) else None
        if code is None or is_generator(code):  # torch wraps generator functions otherwise
            raise Unsupported(f"{self} applied to {fn}")
        return ContextDecoratedVariable(self.reentry(), fn)


class ContextDecoratedVariable(VariableTracker):
    """A function decorated in the trace by a torch context manager (``DecoratorForm``): each
    call enters a new manager ``factory(*args)``, calls the function, and leaves it, also when the
    function raises."""

    def __init__(self, reentry, fn):
        super().__init__(None)
        self.reentry_call, self.fn = reentry, fn

    def python_type(self):
        import types
        return types.FunctionType

    def call_function(self, tx, args, kwargs):
        from ..exc import ExceptionRaised
        transparent = tx.transparent_call  # an exception of the function passes through unchanged
        factory, fargs = self.reentry_call
        manager = create(tx, factory, [ConstantVariable(a) for a in fargs], {})
        manager.enter(tx)
        try:
            tx.transparent_call = transparent
            result = self.fn.call_function(tx, args, kwargs)
        except ExceptionRaised:
            manager.exit(tx)
            raise
        manager.exit(tx)
        return result

    def _repr_value(self):
        return f"{self.reentry_call[0].__name__} over {self.fn}"


class GradModeVariable(DecoratorForm, ContextManagerVariable):
    """torch.no_grad(), enable_grad(), set_grad_enabled(mode): the grad mode ``target`` inside;
    ``initial`` the mode its exit restores (set_grad_enabled switches when it is made, and
    restores the mode of that moment)."""

    def __init__(self, target, initial, entered_on_create, cls=None, source=None, obj=None):
        super().__init__(source, obj)
        self.target, self.initial = target, initial
        self.entered_on_create = entered_on_create
        self.cls = cls or (torch.set_grad_enabled if entered_on_create else
                           torch.enable_grad if target else torch.no_grad)

    @staticmethod
    def create(tx, fn, args, kwargs):
        if fn is torch.set_grad_enabled:
            mode = _bind(fn, args, kwargs)["mode"]
            if type(mode) is not bool:
                raise Unsupported(f"torch.set_grad_enabled({mode!r})")
            # like eager, set_grad_enabled(mode) switches at once, even without `with`
            var = GradModeVariable(mode, torch.is_grad_enabled(), True)
            set_grad_mode(tx, var.target)
            return var
        if args or kwargs:
            raise Unsupported(f"{fn.__name__} with arguments")
        return GradModeVariable(fn is torch.enable_grad, torch.is_grad_enabled(), False, fn)

    def _enter(self, tx):
        if self.entered_on_create:
            self.outer_grad = self.initial
            return ConstantVariable(None)
        self.initial = torch.is_grad_enabled()
        self._store_attr(tx, "prev", self.initial)
        from .subgraph import in_backward
        if in_backward(tx):
            self._enter_in_backward(tx)
        else:
            set_grad_mode(tx, self.target)
        return ConstantVariable(None)

    def _enter_in_backward(self, tx):
        """Inside an autograd.Function's backward, whose grad mode autograd decides when it runs
        (create_graph): the block switches at run time and restores the mode it found then, not
        the mode the trace assumed (autograd_function._trace_backward keeps these nodes)."""
        graph = tx.output.graph
        self.prev_node = graph.call_function(torch.is_grad_enabled, ())
        torch._C._set_grad_enabled(self.target)
        switch = graph.call_function(torch._C._set_grad_enabled, (self.target,))
        for node in (self.prev_node, switch):
            node.meta["pydynamo_backward_grad_block"] = True

    def _exit(self, tx):
        prev = getattr(self, "prev_node", None)
        if prev is None:
            return set_grad_mode(tx, self.initial)
        torch._C._set_grad_enabled(self.initial)
        node = tx.output.graph.call_function(torch._C._set_grad_enabled, (prev,))
        node.meta["pydynamo_backward_grad_block"] = True
        self.prev_node = None

    def leave_real(self):
        torch._C._set_grad_enabled(self.initial)

    def grad_inside(self, outer):
        return self.target

    def reentry(self):
        return (torch.enable_grad if self.target else torch.no_grad), ()

    def _repr_value(self):
        return f"grad_enabled={self.target}"


class InferenceModeVariable(DecoratorForm, ContextManagerVariable):
    cls = torch.inference_mode

    def __init__(self, mode, source=None, obj=None):
        super().__init__(source, obj)
        self.mode = mode
        self.real = None

    @staticmethod
    def create(tx, fn, args, kwargs):
        mode = _bind(torch.inference_mode.__init__, args, kwargs, method=True)["mode"]
        if type(mode) is not bool:  # inference_mode(fn): a decorated function
            raise Unsupported(f"torch.inference_mode({mode!r})")
        return InferenceModeVariable(mode)

    def _enter(self, tx):
        from torch.autograd.grad_mode import _enter_inference_mode
        self.real = _enter_inference_mode(self.mode)  # inside: this mode, whatever the ambient one
        self._record_enter(tx, (_enter_inference_mode, (self.mode,)))
        return ConstantVariable(None)

    @staticmethod
    def _exit_fn():
        from torch.autograd.grad_mode import _exit_inference_mode
        return _exit_inference_mode

    def grad_inside(self, outer):
        return False if self.mode else outer

    def reentry(self):
        return torch.inference_mode, (self.mode,)

    def _repr_value(self):
        return f"inference_mode={self.mode}"


_AUTOCAST_CLASSES = {torch.amp.autocast_mode.autocast: None, torch.cpu.amp.autocast: "cpu",
                     torch.cuda.amp.autocast: "cuda"}


class AutocastVariable(ContextManagerVariable):
    """``args``: ``(device_type, dtype, enabled, cache_enabled)`` as the constructor settled
    them (a dtype or cache flag not given: the current one; CUDA unavailable: disabled), which
    ``_enter_autocast`` takes."""

    def __init__(self, args, cls, source=None, obj=None):
        super().__init__(source, obj)
        self.args, self.cls = args, cls
        self.real = None

    @staticmethod
    def create(tx, cls, args, kwargs):
        bound = _bind(cls.__init__, args, kwargs, method=True)
        device = _AUTOCAST_CLASSES[cls] or bound["device_type"]
        values = (device, bound["dtype"], bound["enabled"], bound["cache_enabled"])
        if type(device) is not str or not isinstance(values[1], (torch.dtype, type(None))) \
                or type(values[2]) is not bool or type(values[3]) not in (bool, type(None)):
            raise Unsupported(f"{cls.__qualname__} with arguments {values!r}")
        if values[1] is None:  # read now: the frame's entry value, or the trace's own blocks'
            guard_entry_autocast_dtype(tx, device)
        if values[3] is None:
            guard_entry_cache_enabled(tx)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # eager warns when its code runs, not the trace
                obj = torch.amp.autocast_mode.autocast(*values)
        except Exception as e:  # an unsupported device or dtype: eager raises it
            raise Unsupported(f"torch.autocast{values!r} raises {type(e).__name__}: {e}") from None
        return AutocastVariable((device, obj.fast_dtype, obj._enabled, obj._cache_enabled), cls)

    def _enter(self, tx):
        from torch.amp.autocast_mode import _enter_autocast
        device = self.args[0]
        if device not in _state(tx).entry_autocast_dtype:
            raise Unsupported(f"autocast on device {device!r}")
        if self.obj is not None and self.source is not None:  # __enter__ keeps what it restores
            guard_entry_autocast_enabled(tx, device)
            guard_entry_autocast_dtype(tx, device)
            guard_entry_cache_enabled(tx)
            self._store_attr(tx, "prev_cache_enabled", torch.is_autocast_cache_enabled())
            self._store_attr(tx, "prev", torch.is_autocast_enabled(device))
            self._store_attr(tx, "prev_fastdtype", torch.get_autocast_dtype(device))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.real = _enter_autocast(*self.args)
        self._record_enter(tx, (_enter_autocast, self.args))
        return self

    @staticmethod
    def _exit_fn():
        from torch.amp.autocast_mode import _exit_autocast
        return _exit_autocast

    def reentry(self):
        return torch.amp.autocast_mode.autocast, self.args

    def _repr_value(self):
        return f"autocast{self.args!r}"


class RecordFunctionVariable(ContextManagerVariable):
    """A profiler range: its enter and exit ops go in the graph (nothing to switch while
    tracing). A graph break inside it splits the range in three: the graph's part, the
    natively run instruction's, the resume function's."""

    cls = torch.autograd.profiler.record_function

    def __init__(self, name, args, source=None, obj=None):
        super().__init__(source, obj)
        self.name, self.args = name, args

    @staticmethod
    def create(tx, fn, args, kwargs):
        bound = _bind(fn.__init__, args, kwargs, method=True)
        name, rf_args = bound["name"], bound["args"]
        if type(name) is not str or type(rf_args) not in (str, type(None)):
            raise Unsupported(f"record_function({name!r}, {rf_args!r})")
        return RecordFunctionVariable(name, rf_args)

    def _enter(self, tx):
        self._record_enter(tx, (torch.ops.profiler._record_function_enter_new, (self.name, self.args)))
        return self

    def _exit(self, tx):
        exit_op = torch.ops.profiler._record_function_exit._RecordFunction
        self._record_exit(tx, (exit_op, (self.enter_nodes[-1],)))

    def leave_real(self):
        pass

    def reentry(self):
        return torch.autograd.profiler.record_function, (self.name, self.args)

    def _repr_value(self):
        return f"record_function({self.name!r})"


def reenter_sdpa_kernel(backend_names, set_priority):
    """``sdpa_kernel`` of the backends named (generated code enters an sdpa_kernel block again
    with it: its arguments are constants)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([getattr(SDPBackend, n) for n in backend_names], set_priority)


class SdpaKernelVariable(ContextManagerVariable):
    """``torch.nn.attention.sdpa_kernel(backends, set_priority)``: the SDPA backends allowed
    inside (and their priority). What its exit restores is read when it is entered, from the
    flags of the frame's entry (guarded)."""

    cls = contextlib._GeneratorContextManager

    def __init__(self, names, set_priority, source=None, obj=None):
        super().__init__(source, obj)
        self.names, self.set_priority = names, set_priority
        self.previous = None

    @staticmethod
    def create(tx, fn, args, kwargs):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        if fn is reenter_sdpa_kernel:
            return SdpaKernelVariable(*(a.as_python_constant() for a in args))
        bound = _bind(sdpa_kernel.__wrapped__, args, kwargs, constants=False)
        backends, set_priority = bound["backends"], bound["set_priority"].as_python_constant()
        from .lists import ListVariable

        def backend(var):  # an SDPBackend member (a pybind object): pinned by identity
            value = getattr(var, "value", None)
            if type(value) is not SDPBackend:
                raise Unsupported(f"sdpa_kernel of {var}")
            if var.source is not None:
                tx.output.guards.ID_MATCH(var.source, value)
            return value
        backends = [backend(b) for b in backends.items] if type(backends) is ListVariable \
            else [backend(backends)]
        if type(set_priority) is not bool:
            raise Unsupported(f"sdpa_kernel(set_priority={set_priority!r})")
        return SdpaKernelVariable(tuple(dict.fromkeys(b.name for b in backends)), set_priority)

    def _backends(self, names):
        from torch.nn.attention import SDPBackend
        return [getattr(SDPBackend, n) for n in names]

    def _enter(self, tx):
        from torch.nn.attention import _backend_from_string, _cur_sdpa_kernel_backends, _sdpa_kernel
        if self.obj is not None:
            raise Unsupported("entering an sdpa_kernel(...) object made before the call (one-shot)")
        entry = _state(tx).entry_sdp
        _guard_call(tx, _sdp_state, (), entry, f"SDPA backends and priority == {entry!r}")
        self.previous = tuple(b.name for b in _cur_sdpa_kernel_backends(with_priority=self.set_priority))
        _sdpa_kernel(self._backends(self.names), self.set_priority)
        graph = tx.output.graph
        nodes = [graph.call_function(_backend_from_string, (n,)) for n in self.names]
        self.enter_nodes = nodes + [graph.call_function(_sdpa_kernel, (nodes, self.set_priority))]
        from .dicts import DictVariable
        return DictVariable({})

    def _exit(self, tx):
        from torch.nn.attention import _backend_from_string, _sdpa_kernel
        self.leave_real_once()
        graph = tx.output.graph
        if self.enter_nodes and next(iter(reversed(graph.nodes))) is self.enter_nodes[-1]:
            self._record_exit(tx)
            return
        self.enter_nodes = []
        nodes = [graph.call_function(_backend_from_string, (n,)) for n in self.previous]
        graph.call_function(_sdpa_kernel, (nodes, self.set_priority))

    def leave_real(self):
        from torch.nn.attention import _sdpa_kernel
        _sdpa_kernel(self._backends(self.previous), self.set_priority)

    def call_method(self, tx, name, args, kwargs):
        if name == "_recreate_cm" and not args and not kwargs:  # ContextDecorator's call
            return SdpaKernelVariable(self.names, self.set_priority)
        return super().call_method(tx, name, args, kwargs)

    def reentry(self):
        return reenter_sdpa_kernel, (self.names, self.set_priority)

    def _repr_value(self):
        return f"sdpa_kernel({list(self.names)}, set_priority={self.set_priority})"


def _bind(fn, args, kwargs, method=False, constants=True):
    """The arguments of a call of ``fn`` (a method: ``self`` left out) by name, defaults
    applied: trace-time constants, or trackers where ``constants`` is False."""
    try:
        if constants:
            args = [a.as_python_constant() for a in args]
            kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
        bound = signature(fn).bind(*((None,) if method else ()), *args, **kwargs)
    except TypeError as e:
        raise Unsupported(f"{getattr(fn, '__qualname__', fn)}: {e}") from None
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop("self", None)
    if not constants:
        return {k: v if isinstance(v, VariableTracker) else ConstantVariable(v) for k, v in arguments.items()}
    return arguments


# ---- what creates them ----------------------------------------------------------------------

def _sdpa_kernel_fn():
    from torch.nn.attention import sdpa_kernel
    return sdpa_kernel


_DISABLE_TORCH_FUNCTION = (torch._C.DisableTorchFunctionSubclass, torch._C.DisableTorchFunction)
FACTORIES = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled, torch.inference_mode,
             *_AUTOCAST_CLASSES, torch.autograd.profiler.record_function, _sdpa_kernel_fn(),
             reenter_sdpa_kernel, *_DISABLE_TORCH_FUNCTION)


def is_factory(fn):
    return any(fn is f for f in FACTORIES)


def create(tx, fn, args, kwargs):
    """``fn(*args, **kwargs)`` for ``fn`` in FACTORIES: a new, not yet entered manager."""
    if fn in (torch.no_grad, torch.enable_grad, torch.set_grad_enabled):
        return GradModeVariable.create(tx, fn, args, kwargs)
    if fn is torch.inference_mode:
        return InferenceModeVariable.create(tx, fn, args, kwargs)
    if fn in _AUTOCAST_CLASSES:
        return AutocastVariable.create(tx, fn, args, kwargs)
    if fn is torch.autograd.profiler.record_function:
        return RecordFunctionVariable.create(tx, fn, args, kwargs)
    if fn in _DISABLE_TORCH_FUNCTION:
        return DisableTorchFunctionVariable.create(tx, fn, args, kwargs)
    return SdpaKernelVariable.create(tx, fn, args, kwargs)


def is_context_manager_object(value):
    """A torch context manager made before the call (a decorator's, a global's): exactly one of
    torch's classes, whose methods are torch's own."""
    t = type(value)
    if t in (torch.no_grad, torch.enable_grad, torch.set_grad_enabled, torch.inference_mode,
             torch.autograd.profiler.record_function) or t in _AUTOCAST_CLASSES:
        return True
    return t is contextlib._GeneratorContextManager and \
        getattr(value, "func", None) is _sdpa_kernel_fn().__wrapped__


def wrap_context_manager(tx, value, source):
    """The tracker of a torch context manager object read from ``source``: its type and the
    attributes its methods read are guarded."""
    from .builder import wrap_value
    from ..source import AttrSource

    def attr(name, src=source, obj=value):
        sub = AttrSource(src, name) if src is not None else None
        return wrap_value(tx, getattr(obj, name), sub).as_python_constant()
    if source is not None:
        tx.output.guards.TYPE_MATCH(source, value)
    t = type(value)
    if t in (torch.no_grad, torch.enable_grad):
        return GradModeVariable(t is torch.enable_grad, None, False, t, source, value)
    if t is torch.set_grad_enabled:  # switched when made: its exit restores the mode of then
        return GradModeVariable(attr("mode"), attr("prev"), True, t, source, value)
    if t is torch.inference_mode:
        return InferenceModeVariable(attr("mode"), source, value)
    if t in _AUTOCAST_CLASSES:
        args = (attr("device"), attr("fast_dtype"), attr("_enabled"), attr("_cache_enabled"))
        return AutocastVariable(args, t, source, value)
    if t is torch.autograd.profiler.record_function:
        return RecordFunctionVariable(attr("name"), attr("args"), source, value)
    # sdpa_kernel(...)'s object: only made again (a decorator's _recreate_cm), never entered
    args_src = AttrSource(source, "args") if source is not None else None
    kwds_src = AttrSource(source, "kwds") if source is not None else None
    args = wrap_value(tx, value.args, args_src)
    kwds = wrap_value(tx, value.kwds, kwds_src)
    made = SdpaKernelVariable.create(tx, _sdpa_kernel_fn(), list(args.unpack_var_sequence(tx)),
                                     dict(kwds.items))
    return SdpaKernelVariable(made.names, made.set_priority, source, value)


# ---- readers of the state -------------------------------------------------------------------

def _device_of_reader(fn, args):
    consts = [a.as_python_constant() for a in args]
    if len(consts) == 1 and type(consts[0]) is str:
        return consts[0]
    raise Unsupported(f"torch.{fn.__name__} with arguments {consts!r}")


READERS = (torch.is_autocast_enabled, torch.get_autocast_dtype, torch.is_autocast_cache_enabled)


def read_state(tx, fn, args, kwargs):
    """``torch.is_autocast_enabled(device)``, ``get_autocast_dtype(device)``,
    ``is_autocast_cache_enabled()``: answered now; what they depend on of the frame's entry state
    is guarded (autocast's enabled flags are guarded at every frame's entry)."""
    if kwargs:
        raise Unsupported(f"torch.{fn.__name__} with keywords")
    if fn is torch.is_autocast_cache_enabled and not args:
        guard_entry_cache_enabled(tx)
        return ConstantVariable(fn())
    device = "cuda" if not args and fn is torch.is_autocast_enabled else _device_of_reader(fn, args)
    if fn is torch.get_autocast_dtype:
        guard_entry_autocast_dtype(tx, device)
    else:
        guard_entry_autocast_enabled(tx, device)
    return ConstantVariable(fn(*(a.as_python_constant() for a in args)))


# ---- `with` blocks and graph breaks ---------------------------------------------------------

class WithExitVariable(VariableTracker):
    """The ``__exit__`` that BEFORE_WITH leaves on the stack."""

    def __init__(self, ctx):
        super().__init__(None)
        self.ctx = ctx

    def call_function(self, tx, args, kwargs):
        return self.ctx.exit(tx)


class BreakBlocks:
    """The `with` blocks open at a graph break (outermost first) and the grad mode there."""

    def __init__(self, ctxs, grad, slots):
        self.ctxs, self.grad, self.slots = ctxs, grad, slots
        self.temps = []  # the locals holding the managers the new code entered

    def slot(self, ctx):
        return self.slots[id(ctx)]


def close_blocks(tx):
    """At a graph break: the `with` blocks on the stack are left in the graph and for real (the
    graph ends in the state it began in, whichever backend runs it, and the backend compiles in
    that state); grad mode is set back to the frame's entry. Every manager still entered must be
    one of those blocks. Each block's resume slot is ``("ctx", fn, args, grad)``: enter
    ``fn(*args)``, then set grad mode ``grad`` (None: the one entering it gives) for the next
    block, or for the code at the break after the last."""
    ctxs = [v.ctx for v in tx.stack if isinstance(v, WithExitVariable)]
    active = _state(tx).active
    if [id(c) for c in active] != [id(c) for c in ctxs]:
        raise Unsupported("a torch context manager entered other than by a `with` statement of "
                          "the frame is active at the graph break")
    grad = torch.is_grad_enabled()
    for c in reversed(ctxs):
        c.exit(tx)
    torch._C._set_grad_enabled(tx.output.initial_grad_mode)
    slots = {}
    for i, c in enumerate(ctxs):
        after = ctxs[i + 1].outer_grad if i + 1 < len(ctxs) else grad
        fn, args = c.reentry()
        slots[id(c)] = ("ctx", fn, args, None if after == c.grad_inside(c.outer_grad) else after)
    return BreakBlocks(ctxs, grad, slots)


def codegen_enter(cg, blocks):
    """Enter each block's manager natively (a new one, kept in a temporary local), each from the
    grad mode it was entered in, then set the grad mode of the break."""
    from .. import bytecode_utils as bu
    mode = None  # unknown after the graph (backends differ): set before the first
    for c in blocks.ctxs:
        if c.outer_grad != mode:
            cg.set_grad_enabled(c.outer_grad)
        mode = c.grad_inside(c.outer_grad)
        fn, args = c.reentry()
        cg.load_function(fn)
        for a in args:
            cg.load_const(a)
        cg.append_call(len(args))
        temp = cg.new_temp()
        cg.append(bu.create_instruction("COPY", 1))
        cg.store_local(temp)
        cg.append_call_method("__enter__", 0)
        cg.append_pop_top()
        blocks.temps.append(temp)
    if blocks.grad != mode:
        cg.set_grad_enabled(blocks.grad)


def codegen_exit(cg, blocks):
    """``__exit__(None, None, None)`` of the managers ``codegen_enter`` entered, innermost first."""
    from .. import bytecode_utils as bu
    for temp in reversed(blocks.temps):
        cg.load_local(temp)
        cg.append(bu.create_load_method("__exit__"))
        for _ in range(3):
            cg.load_const(None)
        cg.append_call(3)
        cg.append_pop_top()


class DisableTorchFunctionVariable(ContextManagerVariable):
    """``torch._C.DisableTorchFunctionSubclass()`` / ``DisableTorchFunction()``: inside, torch calls
    on ``__torch_function__`` subclasses are not offered to their classes (subclasses.py). Only
    the trace's count changes (no graph node: dispatch happens while tracing); a break inside
    enters the real manager again around the instruction it runs."""

    def __init__(self, fn, source=None, obj=None):
        super().__init__(source, obj)
        self.fn = self.cls = fn

    @staticmethod
    def create(tx, fn, args, kwargs):
        if args or kwargs:
            raise Unsupported(f"TypeError: {fn.__name__}() takes no arguments")
        return DisableTorchFunctionVariable(fn)

    def _enter(self, tx):
        tx.output.torch_function_subclass_disabled += 1
        self._counted = tx.output
        return ConstantVariable(None)

    def _exit(self, tx):
        self.leave_real_once()

    def leave_real(self):
        out, self._counted = getattr(self, "_counted", None), None
        if out is not None:
            out.torch_function_subclass_disabled -= 1

    def reentry(self):
        return self.fn, ()
