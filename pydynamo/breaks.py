"""The graph-break catalogue: a stable id, a title, an explanation and a hint per kind of break.

An ``Unsupported`` is raised at some 550 places with a message written for the case at hand
("Tensor.item() needs the tensor's data (data-dependent)"). Those messages say what happened;
they are not stable (they name the user's values) and do not say why pydynamo refuses, nor
what to do in general. This registry sorts them into families with an id that stays the same
across releases, so a user can look a break up (docs/graph-breaks.md, generated from here by
tools/gen_break_docs.py) and tools can count breaks by cause.

An entry matches an exception by its class (``kind``: the exc.py class or one of its bases)
and its reason (``patterns``: regexes searched in ``Unsupported.reason``; none means every
reason of that class). Entries are tried in ``ENTRIES`` order, first match wins: the wrappers
first (a break that could not be made wraps the reason it was for), then the specific entries,
then one catch-all per exception class. Ids never change meaning; a retired family keeps its
id unused. tests/test_break_catalogue.py checks that every message template in pydynamo/
reaches a specific entry.
"""
import functools
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Break:
    id: str
    title: str
    explanation: str
    hint: str
    patterns: tuple = ()  # regexes searched in the reason; () = any reason of `kind`
    kind: str = "Unsupported"  # the exc.py class (or a base of it) this entry applies to
    any_of: tuple = ()  # exc.py classes all of whose reasons belong here, patterns or not
    example: str = ""  # a reason message of this family, for the docs
    catch_all: bool = False  # the fallback of its class, used where nothing specific fits
    _regex: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_regex", re.compile("|".join(f"(?:{p})" for p in self.patterns)))

    def matches(self, exc_class, reason):
        names = {c.__name__ for c in exc_class.__mro__}
        if names.intersection(self.any_of):
            return True
        return self.kind in names and (not self.patterns or self._regex.search(reason) is not None)


ENTRIES = [
    # ---- wrappers: a second failure around the first one, or an exception, decides what happened ---
    Break("PD402", "the graph could not be broken here",
          "A graph break ends the graph before an instruction, runs that instruction in Python and "
          "resumes in a new function. That needs the frame's state at that point to be rebuilt "
          "exactly: the values on the stack, the open `with` blocks and the exception being "
          "handled. Where one of them cannot be (a user's context manager is open, the break "
          "falls in a resume function's own prologue, a torch context manager was entered "
          "without `with`), pydynamo does not guess: the whole frame runs eagerly.",
          "move the code that breaks out of the `with` block (or out of the frame), or remove "
          "the cause of the inner break it names",
          (r"the graph could not be broken there", r"^a graph break inside ",
           r"entered other than by a `with` statement of the frame is active at the graph break",
           r"^argument \S+ missing from the frame's locals",
           r"^closure does not match the code's free variables",
           r"^the instruction consumes a `with` block's exit or an iterator"),
          example="data-dependent control flow: branching on the value of a tensor; the graph "
                  "could not be broken there: a graph break inside a `with` block of a user's "
                  "context manager"),
    Break("PD411", "the graph was broken before the line that made a value it could not rebuild",
          "A graph break needs every value alive at that point rebuilt by generated code. Where "
          "one cannot be (a generator suspended mid-way, an iterator of a type pydynamo does not "
          "rebuild, a function made in the trace held inside another value), the trace is made "
          "again and the graph is broken before the line that made that value: the graph holds "
          "everything before it, and the rest of the frame runs in a resume function (compiled "
          "in turn where it can be). Only a frame whose first line makes such a value runs "
          "wholly eagerly.",
          "nothing to do if the graph before that line is enough; otherwise make the value after "
          "the break, or avoid the break (the first reason named)",
          (r"\(the graph is broken before line \S+: later, ",),
          example="print() is I/O (a side effect) (the graph is broken before line 12: later, a "
                  "generator cannot be returned from compiled code)"),
    Break("PD407", "the traced code raises an exception it does not catch",
          "The trace found that the program raises here for sure (a `raise` statement, a lookup "
          "of a missing constant key...). Exceptions caught by a handler of the same trace are "
          "simulated; one that leaves the compiled frame is not built by generated code, "
          "because its traceback and context would differ. The graph breaks before the "
          "raising instruction so that Python raises it natively.",
          "nothing to do if the exception is expected; otherwise catch it inside the compiled "
          "function or fix its cause",
          (r"^raising ", r"^re-raising ", r"which the compiled frame does not catch"),
          example="raising ValueError('bad shape'), which the compiled frame does not catch: "
                  "Python raises it natively"),
    Break("PD409", "the traced code would raise a Python error here",
          "A model of a builtin, a method or a call found that Python raises here (wrong "
          "arguments, an unhashable key, a missing name, a backward returning the wrong number "
          "of gradients...). Rather than compile code that must raise, the graph breaks there "
          "and Python runs the operation, raising the error with its usual message and "
          "traceback.",
          "fix the error the message names; it happens in eager Python too",
          (r"^(TypeError|ValueError|KeyError|IndexError|RuntimeError|NameError|"
           r"UnboundLocalError|AttributeError|ZeroDivisionError):",
           r"\((autograd|checkpoint) raises", r"\(Python raises it\)", r"\(it raises\)",
           r"\(TypeError\)$", r"^read of an empty closure cell", r"\braised \w+: ",
           r"^zip\(strict=True\) of sequences of different lengths",
           r"\.__len__ returned .* \(not an int", r"^iteration over a 0-d tensor",
           r"^isinstance\(\) with .*, which is not a class"),
          example="TypeError: f() missing argument 'y'"),
    # ---- values that depend on tensor data ---------------------------------------------------
    Break("PD101", "data-dependent control flow on a tensor",
          "A graph is one straight line of tensor operations for every input of the same "
          "shapes. An `if`, `while` or `and` on a tensor's value (x.sum() > 0) picks a Python "
          "branch from data the trace only has as a fake tensor, so no single graph is right "
          "for every input. The graph breaks: the part before it runs, Python decides the "
          "branch, and the rest is captured in a new graph.",
          "use torch.where(cond, a, b) to select values instead of branching",
          (r"^data-dependent control flow",),
          example="data-dependent control flow: branching on the value of a tensor"),
    Break("PD102", "Tensor.item() / .tolist(): a tensor's data read into Python",
          "item(), tolist() and similar calls turn tensor data into Python numbers, which the "
          "rest of the program can use in any way (as a shape, in a branch, as a dict key). A "
          "fake tensor has no data to give, so the trace stops there and Python computes the "
          "number.",
          "keep the value a tensor, move the call out of the compiled region, or set "
          "pydynamo.config.capture_scalar_outputs = True (PYDYNAMO_CAPTURE_SCALAR_OUTPUTS=1) to "
          "keep .item() of a tensor in the graph as a symbolic number",
          (r"\(\) needs the (tensor|array)'s data", r"^Tensor\.tolist\(\)"),
          example="Tensor.item() needs the tensor's data (data-dependent)"),
    Break("PD103", "Python builtins over tensor values ('in', min(), max(), sorted())",
          "`x in t`, min(a, b) or sorted(...) of tensors compare tensor values in Python: the "
          "answer depends on the data, which the trace does not know.",
          "use the torch equivalent: (t == x).any(), torch.maximum / torch.minimum, torch.sort",
          (r"^'in' on an? (tensor|ndarray)", r"\(\) of tensors compares their data",
           r"\(\) of a tensor or ndarray needs its data"),
          example="max() of tensors compares their data (data-dependent)"),
    Break("PD104", "an op whose output size depends on tensor data",
          "nonzero(), x[mask], unique() and similar ops give a tensor whose size is known only "
          "once the data is. The graph's later ops, guards and the generated code need sizes, "
          "so by default the graph breaks at such an op, which then runs in Python.",
          "set pydynamo.config.capture_dynamic_output_shape_ops = True "
          "(PYDYNAMO_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS=1) to keep the op in the graph with a "
          "symbolic size, or use an op of fixed size (torch.where instead of x[mask])",
          (r"output size depends on tensor data", r"output depends on tensor data",
           r"data-dependent output cannot be bound"),
          example="torch.nonzero: output size depends on tensor data"),
    Break("PD105", "a tensor fact that no guard can pin",
          "A compiled entry is reused while its guards hold; every fact the trace read about a "
          "tensor (sizes, strides, storage offset, a non-tensor result of a tensor method) "
          "must follow from what the guards check. Some facts of a computed tensor (the stride "
          "of a size-1 dimension, a storage offset relative to an input, a number computed from "
          "symbolic sizes) depend on the backend or on the next call's inputs, so the trace "
          "refuses to bake them in.",
          "read the fact from an input tensor, or outside the compiled region",
          (r"no guard pins", r"in a way the guards cannot follow",
           r"^stride\(\) of a computed tensor", r"^storage_offset\(\) of a tensor whose storage",
           r"numel\(\) of symbolic sizes"),
          example="Tensor.data_ptr() gives a int result that no guard pins (the next call may "
                  "differ)"),
    # ---- calls, logging, side effects --------------------------------------------------------
    Break("PD203", "a call to a function decorated with pydynamo.disable",
          "pydynamo.disable marks a function that must run as plain Python. The trace does not "
          "look inside it; the graph breaks around the call.",
          "the function is decorated with pydynamo.disable; remove the decorator to capture it",
          (r"decorated with pydynamo\.disable",),
          example="call to helper, which is decorated with pydynamo.disable"),
    Break("PD204", "a call to a torch function that torch never traces",
          "torch marks some functions (optimizer steps, checkpoint internals, global-state "
          "helpers) with torch._disable_dynamo: they must run as plain Python, where their side "
          "effects on global state happen for real. pydynamo honours the mark and breaks around "
          "the call.",
          "call it outside the compiled region",
          (r"torch marks as never traced", r"\.step\(closure\): the closure runs the forward"),
          example="call to torch.optim.Optimizer.zero_grad, which torch marks as never traced "
                  "(torch._disable_dynamo: global state, optimizers, checkpoint internals)"),
    Break("PD205", "an explicit graph break (graph_break(), disallow_in_graph)",
          "The program asked for a break: pydynamo.graph_break() (or torch's own graph_break()), "
          "or a call to a function marked disallow_in_graph.",
          "remove the graph_break() call or the disallow_in_graph mark to capture across it",
          (r"^call to graph_break\(\)", r"marked disallow_in_graph"),
          example="call to graph_break()"),
    Break("PD206", "allow_in_graph / assume_constant_result promise not kept",
          "allow_in_graph puts a call into the graph as one op, which must give tensors; "
          "assume_constant_result folds a call to its result, which must be a constant computed "
          "from constants. A call that breaks that promise cannot be captured as marked.",
          "remove the mark, or make the function fit it",
          (r"marked (allow_in_graph|assume_constant_result)", r"^attribute \S+ of .*, marked "),
          example="helper, marked allow_in_graph, returned no tensor"),
    Break("PD207", "a torch op the trace cannot run on fake tensors",
          "The trace runs every op on fake tensors (shapes and dtypes without data) to learn its "
          "result. An op without a fake-tensor implementation, one that fails there, or one "
          "that returns a type the trace does not model cannot be put in a graph soundly.",
          "use another op, or run this one outside the compiled region",
          (r"does not support fake tensors", r" cannot be traced: ", r" raised \w+ while tracing: ",
           r"^a torch call returned .*, which is not supported"),
          example="torch.ops.mylib.op: operator mylib::op does not support fake tensors"),
    Break("PD208", "a value that cannot be an argument of a graph op",
          "A graph op's arguments must be tensors, symbolic numbers or constants that the "
          "graph can hold and the guards pin. A Python object, a class or a NumPy scalar "
          "passed to a torch op is not one of those.",
          "pass a tensor or a plain constant",
          (r"cannot be an argument of a graph op", r"^the class .* as an argument of a graph op",
           r"^the NumPy scalar .* as an argument of a graph op"),
          example="the class Foo as an argument of a graph op"),
    Break("PD210", "logging and warnings calls",
          "logging and warnings calls are replayed after the graph runs, with the values the "
          "graph computed. That is sound only where the call's effect does not depend on the "
          "moment it runs (stack level, exc_info, a logger's own state) and its arguments are "
          "constants, tensors or classes.",
          "log plain values, or move the call out of the compiled region",
          (r"logging or warnings call", r"^logger\.", r"^logging\.", r"^a logger class",
           r"\bwarn(ings\.warn)?\(\)", r"stacklevel", r"reads the state of the moment it is called",
           r"^warnings\.catch_warnings\(", r"^warnings\.\w+\(\) outside a warnings\.catch_warnings"),
          example="a set as an argument of a logging or warnings call"),
    Break("PD211", "a functools.lru_cache'd function",
          "A call to an lru_cache'd function may answer from its cache, with a result computed "
          "at another time. The trace folds such a call only when it is a pure function of "
          "constants; otherwise what the cache returns and what a traced call computes may "
          "differ.",
          "call the undecorated function (fn.__wrapped__) in compiled code",
          (r"lru_cache",),
          example="an lru_cache'd function whose result is not an immutable constant"),
    Break("PD301", "print() and other I/O",
          "A graph computes tensors; it cannot print. Printing while tracing would print fake "
          "values once, at compile time, instead of real ones on every call.",
          "move print() and other I/O out of the compiled region",
          (r"^print\(\) is I/O",),
          example="print() is I/O (a side effect)"),
    Break("PD303", "an in-place change AOTAutograd would get wrong",
          "A backend such as aot_eager or inductor functionalizes the graph: an in-place change "
          "of an input is replayed as a copy at the end. That is only right for one layout of "
          "memory: when two inputs share memory, when the graph already used the tensor, or "
          "when .data is assigned and then changed, eager and the compiled graph would see "
          "different values. pydynamo refuses those cases instead.",
          "pass tensors that do not overlap, or clone one of them before the call; change a "
          "tensor before assigning it to .data",
          (r"changes an input in place while inputs .* share memory",
           r"after the graph (used|changed) it", r"the frame reads that tensor by another path too",
           r"^assignment to Tensor\.data", r"was assigned, then changed in place",
           r"\.data: a tensor of (another dtype|other sizes)",
           r"\.data in inference mode"),
          example="torch.Tensor.add_ changes an input in place while inputs x and y, two "
                  "objects, share memory"),
    Break("PD304", "global torch state changed or read at the wrong time",
          "A graph runs as one unit after its guards checked the global state (grad mode, "
          "default dtype...). A call that switches global state, or code that reads it later "
          "(an autograd.Function's backward, a subgraph's Python), would see a state different "
          "from eager's.",
          "switch the state outside the compiled region, or with a `with` statement around the "
          "code",
          (r"changes global torch state", r"switches global state", r"reads global state",
           r"a torch function mode other than", r"which no guard compares",
           r"\(global state, read when", r"which its Python code would change again"),
          example="torch.set_default_dtype changes global torch state"),
    # ---- bytecode and control flow -----------------------------------------------------------
    Break("PD401", "an unsupported bytecode instruction",
          "The symbolic interpreter implements most of CPython's bytecode, but not all: class "
          "bodies, async code and a few rare instructions are not modelled. Tracing stops at "
          "the instruction.",
          "move this statement out of the compiled region",
          (r"^opcode \S+ is not supported", r"^CALL_INTRINSIC_1 ", r"^CALL_FUNCTION_EX without NULL",
           r"^SET_FUNCTION_ATTRIBUTE ", r"^CALL_KW with keyword names ",
           r"^\*\*.* in a call$", r"^LOAD_FROM_DICT_OR_DEREF outside a class body"),
          any_of=("UnsupportedOpcodeError",),
          example="opcode GET_AWAITABLE is not supported: coroutines"),
    Break("PD403", "generators and coroutines",
          "A generator made and used inside the traced code is simulated. One that escapes the "
          "frame (returned, left suspended inside a try or with block, sent values from "
          "outside), a coroutine or an async generator would need its Python frame to exist at "
          "run time, which generated code cannot build.",
          "consume the generator inside the compiled function (list(gen)), or move async code "
          "out of it",
          (r"generator", r"coroutine", r"^yield in a frame", r"^sending .* into "),
          example="a generator cannot be returned from compiled code"),
    Break("PD404", "the trace is too deep or too long",
          "Inlining stops past config.inline_depth_limit nested calls (deep recursion) and a "
          "frame stops past config.max_instructions instructions (a long Python loop unrolled "
          "into the graph). Both limits keep compile time and graph size bounded.",
          "raise pydynamo.config.inline_depth_limit / max_instructions, or turn the loop into "
          "tensor ops",
          (r"^inlining deeper than ", r"^more than \S+ instructions traced"),
          example="more than 200000 instructions traced in one frame (a long loop?)"),
    Break("PD405", "an import inside compiled code",
          "An import that runs a module's code for the first time (or through a replaced "
          "__import__) is a side effect the graph cannot hold.",
          "import at module level",
          (r"^import ", r"^relative import ", r"^from-import "),
          example="import of mypkg.sub, which is not imported yet"),
    Break("PD406", "a context manager the trace cannot follow",
          "Torch's context managers (no_grad, autocast...) and user classes with __enter__ / "
          "__exit__ are modelled in `with` statements. Entering one twice, leaving them out of "
          "order, keeping one open when the frame returns or using its object as a value "
          "would need generated code to recreate its state, which it cannot.",
          "use the context manager in a plain `with` statement inside the function",
          (r"^`with` on ", r"^a `with` block on .* left by an exception",
           r"is still entered when the frame returns", r"which is not the torch context manager entered last",
           r"while it is already entered",
           r"entered in the trace, as a value", r"of a torch context manager$"),
          example="torch.no_grad() is still entered when the frame returns"),
    Break("PD408", "an exception object the trace cannot model",
          "The trace simulates plain exceptions: created, raised and caught inside the frame. An "
          "exception class with Python-level construction, the exception the caller is "
          "handling, an exception's __context__ or traceback used after the fact cannot be "
          "rebuilt faithfully.",
          "raise and catch plain exception classes inside the compiled function, or handle "
          "the exception outside it",
          (r"bare `raise`", r"raised in the trace, used after it", r"handled by the compiled function's caller",
           r"^__context__ of an exception", r"raised inside the handling of its own context",
           r"^creating the exception ", r"an exception class with Python-level construction",
           r"which is not a modelled exception"),
          example="a bare `raise` while no exception of the trace is handled"),
    Break("PD410", "a match statement pattern not modelled",
          "`match` statements are simulated for sequences, constants and classes with plain "
          "__match_args__. A mapping pattern on an object the trace cannot enumerate is not.",
          "match on a plain dict, or move the match out of the compiled region",
          (r"^a mapping pattern on ", r"match pattern", r"sub-patterns"),
          example="a mapping pattern on MyMapping()"),
    # ---- tensors and NumPy -------------------------------------------------------------------
    Break("PD904", "mixing torch and NumPy",
          "NumPy code is traced through torch's NumPy layer (torch._numpy); torch ops take "
          "tensors. Values crossing between the two (Tensor.numpy() of an unusual tensor, a "
          "tensor passed to a NumPy function, an ndarray to a torch function) have no sound "
          "translation here.",
          "convert explicitly with torch.from_numpy / Tensor.numpy() on plain CPU tensors, "
          "keeping each computation in one library",
          (r"^Tensor\.numpy\(", r"mixing tensors and ndarrays", r"called with an ndarray",
           r"^torch\.\S+ of an ndarray", r"^torch\.\S+ of a NumPy scalar"),
          example="numpy add called with a torch.Tensor (mixing tensors and ndarrays is not "
                  "modelled)"),
    Break("PD503", "tensor hooks registered in compiled code",
          "Tensor.register_hook and friends add Python code that autograd calls during "
          "backward. A hook on a tensor computed in the graph would belong to the graph's "
          "backward, and a hook registered after a break would miss gradients that flow "
          "through earlier uses; neither can be captured faithfully.",
          "register the hook outside the compiled region, on an input",
          (r"^Tensor\.\S+\(\) of a tensor computed in the graph \(what it registers",
           r"^Tensor\.\S+\(\) of an input changed in place", r"handle returned by Tensor\.",
           r"bypass a hook registered after a graph break"),
          example="Tensor.register_hook() of a tensor computed in the graph (what it registers "
                  "would belong to the graph's backward: not captured)"),
    Break("PD501", "a kind of tensor pydynamo does not trace",
          "Guards and fake tensors describe dense, unnamed, non-quantized torch.Tensor objects "
          "and the subclasses torch itself handles. A tensor subclass, a quantized or named "
          "tensor, a sparse layout or an inference tensor carries state the guards do not "
          "check.",
          "convert to a plain dense tensor before the compiled region",
          (r"^tensor subclass ", r"^tensors with layout ", r"^quantized tensors", r"^named tensors",
           r"inference mode or with an inference tensor", r"^isinstance of a tensor marked ",
           r"whose class customises attribute access", r"^Tensor\.as_subclass\(",
           r"\(a __torch_function__ subclass\): not offered", r"^handle_torch_function with no ",
           r"^DTensor\.\w+ with no tensor argument|^\S+ with no tensor argument$",
           r": argument .* is neither a tensor nor a constant$", r"^a jagged NestedTensor input needs torch "),
          example="tensor subclass MyTensor"),
    Break("PD502", "a tensor attribute or method pydynamo does not model",
          "Tensor methods become graph ops; attributes are read from the fake tensor where "
          "guards pin them. A few are neither: autograd state (grad_fn, _version, .grad of a "
          "computed tensor), pickling, methods with arguments the model does not take.",
          "read the attribute outside the compiled region",
          (r"^Tensor attribute ", r"^Tensor\.\S+( while tracing| with arguments| with non-constant "
           r"arguments)?$", r"^Tensor\.\S+\(\) of a tensor computed in the graph$",
           r"^Tensor\.__len__ ", r"^assignment to Tensor\.", r"^\S+\.\S+ shadowed by "),
          example="Tensor.grad_fn while tracing"),
    Break("PD901", "a NumPy call whose result differs from torch's NumPy layer",
          "Each NumPy call is checked at trace time against NumPy itself, run on stand-in arrays "
          "of the same dtypes and shapes. Where NumPy gives another dtype, shape, scalar kind, "
          "or a view where the layer copies (or the reverse), the graph would compute something "
          "NumPy does not, so the call is refused. So is NumPy code under numpy.seterr set to "
          "raise or call a handler: the layer never does either.",
          "cast explicitly (astype) or use an equivalent call whose result both agree on",
          (r"where torch's NumPy layer gives", r"torch's NumPy layer a (copy|new array)",
           r"^numpy \S+ gives ", r"on stand-in arrays", r"^NumPy code under numpy\.seterr"),
          example="numpy mean gives float32 where torch's NumPy layer gives float64"),
    Break("PD902", "a NumPy function or attribute with no equivalent in torch's NumPy layer",
          "Only what torch._numpy implements can become graph ops; other NumPy functions, "
          "methods and attributes (and array memory details such as ctypes) are not traced.",
          "use a function torch._numpy implements, or call NumPy outside the compiled region",
          (r"has no equivalent in torch's NumPy layer", r"^numpy\.\S+ (with these arguments|gave a )",
           r"^ndarray attribute ", r"^ndarray\.\S+ while tracing", r"as an argument of a NumPy call",
           r"NumPy scalar inside a container"),
          example="numpy.fft.fft has no equivalent in torch's NumPy layer"),
    Break("PD903", "an ndarray input torch cannot take",
          "An ndarray input becomes a tensor sharing its memory (torch.from_numpy). Dtypes "
          "torch lacks, read-only or unaligned arrays, and NumPy scalars of such dtypes cannot "
          "be viewed; two ndarray inputs' identity is not guarded.",
          "pass a writable, aligned array of a dtype torch supports",
          (r"^an ndarray (of dtype|that is read-only|torch cannot view)", r"^a NumPy scalar of dtype ",
           r"^identity of two ndarray inputs"),
          example="an ndarray of dtype <U3 (torch's NumPy layer does not take it)"),
    # ---- nn.Module, autograd, torch's context managers (region messages before the owners' names) ---
    Break("PD701", "creating an nn.Module inside compiled code",
          "A module created by the trace is rebuilt by generated code from the constructor's "
          "arguments. That is sound only when the constructor is torch's own and deterministic: "
          "parameters initialised at random, hooks, user overrides of torch's methods or "
          "arguments that are not immutable constants would make the rebuilt module differ.",
          "create the module once, outside the compiled region (in __init__), and call it "
          "inside",
          (r"^creating the nn\.Module ", r"created in compiled code", r"module created in (compiled|traced) code",
           r"^reading \S+ of a module created", r"read before nn\.Module\.__init__",
           # the suffixes of "creating the nn.Module ... inside compiled code: <why>"
           r": its constructor (creates|registers) ", r"is not the constructor of a torch base class",
           r": \S+ overrides torch's ", r", which \S+ could (run|use)$", r"passed to torch's constructor",
           r": its attribute \S+ is a .*, not an immutable constant$"),
          example="creating the nn.Module Linear inside compiled code: its constructor creates "
                  "parameters (weight, bias), initialised at run time (create the module outside "
                  "the compiled code)"),
    Break("PD702", "nn.Module hooks and hook tables",
          "Module calls are inlined through nn.Module._call_impl, with the hooks read from the "
          "module's tables and guarded. Backward hooks (which wrap inputs and outputs in an "
          "autograd Function calling Python at backward time), hook tables that are not "
          "torch's, and overrides of _call_impl / named_modules cannot be captured.",
          "register backward hooks outside compiled modules, or use forward hooks only",
          (r"nn\.Module wraps its inputs and outputs", r"hook table", r"_call_impl is not nn\.Module's",
           r"overrides (named_modules|_named_members)", r"is reassigned by the compiled code",
           r"not made by nn\.Module\.__init__", r"made in the trace has "),
          example="Net has _backward_hooks: nn.Module wraps its inputs and outputs in an autograd "
                  "Function calling Python hooks at backward time, which a graph cannot hold "
                  "(torch.compile breaks here too)"),
    Break("PD703", "an nn.Module API or container use not modelled",
          "Module containers (Sequential, ModuleList, ModuleDict) and the nn.Module API "
          "(named_modules, parameters...) are modelled for their common forms. Slicing a "
          "container subclass, a module's truth value or unusual arguments run code the "
          "trace does not follow.",
          "use the container's common forms, or call the API outside the compiled region",
          (r"^nn\.Module\.", r"of a sliced ", r"^slicing ", r"^indexing \S+ with "),
          example="slicing MyList (a subclass: its constructor would run)"),
    Break("PD704", "a DistributedDataParallel or FSDP2 module called in traced code",
          "DDP's forward drives its reducer (C++ state, autograd hooks) and FSDP2's hooks "
          "all-gather, reshard and switch streams: they run natively, as under torch.compile. "
          "The call breaks the graph; the module they wrap is compiled as a frame of its own "
          "(with DDP, split at its gradient buckets).",
          "nothing to do: compile the model (pydynamo.compile(ddp_model), DDP(pydynamo.compile("
          "model)), or each block before fully_shard); the break only ends the caller's graph",
          (r"^a call of a DistributedDataParallel module", r"managed by FSDP2's fully_shard"),
          example="a call of FSDPBlock, managed by FSDP2's fully_shard (its hooks all-gather and "
                  "reshard natively, as under torch.compile; its forward is compiled on its own)"),
    Break("PD705", "a torch.distributed call in a form not captured",
          "Collectives in traced code become torch's functional collectives in the graph "
          "(an in-place dist.all_reduce is the functional op followed by copy_ into its "
          "tensor). Forms whose effect that would not reproduce exactly run natively: "
          "async_op=True (its Work handle), tensors that require grad (the c10d ops are not "
          "differentiable), non-contiguous tensors, other layouts, symbolic sizes, groups given "
          "by name, rank list or device mesh, and reduce ops other than SUM, AVG, PRODUCT, MIN, "
          "MAX.",
          "use the synchronous form on a contiguous tensor with a ProcessGroup (or None), or a "
          "functional collective (torch.distributed._functional_collectives)",
          (r"^torch\.distributed", r"^functional (collective|all_gather|reduce_scatter|broadcast)",
           r"^ProcessGroup\."),
          example="torch.distributed collective with async_op=True (its Work handle is not modelled)"),
    Break("PD805", "a traced subgraph (higher-order op) does something a subgraph cannot hold",
          "Some calls are traced into a subgraph of their own (checkpoint bodies, an "
          "autograd.Function's forward and backward). A subgraph must be a pure "
          "function of its inputs: it may not change state outside it, raise, leave a context "
          "manager entered or let a value it computed escape.",
          "keep side effects and exceptions out of the function traced as a subgraph",
          (r"changes state outside it", r"a value computed in .* is (used|kept) outside it",
           r" escapes ", r"changes a tensor in place that it did not create",
           r" raises \w+(\(.*\))?$", r"leaves a context manager entered"),
          example="the checkpointed function changes state outside it (a side effect the "
                  "subgraph cannot replay)"),
    Break("PD806", "a higher-order operator called in a form not captured",
          "torch.cond, while_loop, scan, associative_scan, control_flow.map, flex_attention, "
          "the torch.func transforms and nested_compile_region take functions, which are traced "
          "whole into subgraphs: each body must be a pure function of tensors, returning "
          "tensors that are not its inputs, and the operator's own arguments must be known while "
          "tracing (dims, options, a BlockMask made outside the compiled code). A body that "
          "cannot be captured whole makes the whole call run natively (torch requires the whole "
          "body), or, for a nested compile region, the call is inlined.",
          "keep the bodies plain tensor code (no prints, no .item(), no side effects), return "
          "fresh tensors (a clone instead of an input), and pass the operator's options as "
          "constants",
          (r"^torch\.cond", r"^while_loop", r"^scan", r"^associative_scan", r"^map('s| without)",
           r"^torch\.func", r"flex_attention", r"block mask", r"^functional_call",
           r"nested compile region", r"^a body returns", r"^keyword arguments to a (vmapped|torch\.func)",
           r"^a function nested in torch\.func", r"^the function (returned by )?torch\.func",
           r"cannot be captured whole", r"^what .* returns must be tensors",
           r"^a module's parameter or buffer tables walked inside functional_call", r"^higher-order op",
           r"^keyword arguments to torch\.func", r"^the replacement of .* is not a Python function"),
          example="torch.cond's true_fn (model.py:12) cannot be captured whole (torch traces the whole "
                  "body): print() is not captured"),
    Break("PD801", "an autograd.Function the trace cannot capture",
          "A custom autograd.Function's forward is traced into the graph and its backward into "
          "a separate graph autograd calls later. That needs forward and backward to be plain "
          "functions of tensors, with apply's usual calling convention, outside functorch "
          "transforms.",
          "make forward / backward plain tensor code, or call the Function outside the compiled "
          "region",
          (r"^\S+\.(forward|backward|apply|boxed_grads_call)\b", r"overrides autograd\.Function\.apply",
           r"implements (no backward|both backward and vjp)"),
          example="MyFn.forward returns no tensor"),
    Break("PD802", "a use of ctx in an autograd.Function not modelled",
          "The ctx of a traced autograd.Function is simulated: save_for_backward, saved "
          "tensors, attributes set in forward and read in backward, mark_non_differentiable. "
          "Uses whose effect autograd sees later (set_materialize_grads(False), mark_dirty, "
          "attributes changed in backward) cannot be replayed by a compiled backward.",
          "keep ctx to save_for_backward and plain attributes set in forward",
          (r"^ctx\.", r"^hasattr\(ctx, ", r"ctx\.mark_non_differentiable", r"^assignment to ctx\."),
          example="ctx.set_materialize_grads(False): the compiled backward would get zero tensors "
                  "where eager passes None for unused outputs"),
    Break("PD803", "activation checkpointing in a form not captured",
          "torch.utils.checkpoint is captured as a subgraph re-run in backward, with "
          "use_reentrant=False semantics. The reentrant variant, custom context_fn, functions "
          "that change grad mode or return values they computed, and checkpoints inside a "
          "backward would not behave as they do in eager, so they are not captured.",
          "pass use_reentrant=False, and keep the checkpointed function a plain function of "
          "tensors",
          (r"checkpoint",),
          example="checkpoint(use_reentrant=True) is not captured (its autograd semantics "
                  "differ: pass use_reentrant=False)"),
    Break("PD804", "torch context manager arguments not modelled",
          "no_grad, enable_grad, set_grad_enabled, inference_mode, autocast, sdpa_kernel and "
          "record_function are modelled with constant arguments on the devices pydynamo "
          "knows. A mode that depends on run-time values, or an unusual device or option, "
          "would change what the graph computes behind the guards.",
          "pass constant arguments, or enter the context outside the compiled region",
          (r"^torch\.set_grad_enabled\(", r"^torch\.inference_mode\(", r"autocast", r"sdpa_kernel",
           r"^record_function\(", r"^torch\.\S+ with (arguments|keywords)", r"^\S+ applied to "),
          example="autocast on device mps"),
    # ---- Python objects ----------------------------------------------------------------------
    Break("PD610", "copy and pickle protocols",
          "copy.copy / copy.deepcopy / pickling go through __reduce_ex__, __getstate__ and "
          "copyreg; the trace follows the default object paths only. Custom reductions, "
          "metaclasses and C objects run code it does not see.",
          "copy the object outside the compiled region",
          (r"__reduce_ex__", r"__getstate__", r"copyreg", r"cannot pickle", r"__slotnames__",
           r"__getnewargs", r"copy\.deepcopy"),
          example="object.__reduce_ex__ of a Foo, whose __reduce__ is a builtin_function_or_method"),
    Break("PD601", "a class with custom attribute access or a custom metaclass",
          "The trace reads attributes the way type.__getattribute__ / object.__getattribute__ "
          "do and guards what it read. A class that overrides __getattribute__, __setattr__, "
          "__delattr__, __instancecheck__, item lookup, or a metaclass that changes "
          "construction runs arbitrary code on every access, which those guards do not cover.",
          "use plain attributes (or __getattr__ for missing ones only), or access the object "
          "outside the compiled region",
          (r"__getattribute__", r"__setattr__ is", r"__delattr__ is", r"metaclass",
           r"__instancecheck__", r"whose class changes item lookup", r"after a Python special method"),
          example="Config.__getattribute__ is a function, not modelled"),
    Break("PD602", "a descriptor or property the trace cannot follow",
          "Attribute reads through descriptors (properties, cached_property, classmethods, "
          "custom __get__) are inlined when the descriptor is a Python function. C-level "
          "descriptors of unknown behaviour, and hasattr() that would run a descriptor, are "
          "not modelled.",
          "use a plain attribute or a Python property",
          (r"^descriptor ", r"runs a descriptor's code", r"cached_property",
           r"a descriptor of that name", r"read through (the|a) class", r"^classmethod of ",
           r"^\S+ of \w+ [\w.]+\.\w+$"),
          example="descriptor member_descriptor Foo.x"),
    Break("PD609", "function objects: functools.wraps, annotations, closures",
          "A function created while tracing is rebuilt by generated code from its code object, "
          "defaults and closure. Attributes added by functools.wraps / update_wrapper, "
          "non-constant annotations or a function from a module whose origin is unknown cannot "
          "be rebuilt.",
          "define the function outside the compiled region",
          (r"functools\.wraps", r"functools\.update_wrapper", r"^annotations of ",
           r"^attribute .* of a function made while tracing", r"^function attribute ",
           r"^call of a function from another module whose origin is unknown",
           r"^functools\.partial of "),
          example="attribute __wrapped__ copied by functools.wraps is not modelled"),
    Break("PD305", "a value the generated code cannot rebuild",
          "After a graph break, or where the frame returns, generated code must recreate every "
          "live Python value from the frame's inputs and the graph's outputs. A value that is "
          "not reachable from the inputs (a constant tensor inside a torch module), an object "
          "made by the trace whose construction is not modelled, or a set whose iteration order "
          "cannot be reproduced cannot be recreated.",
          "return tensors and plain containers, or keep the value outside the compiled region",
          (r"cannot be rebuilt", r"cannot be returned", r"holds a value at the break",
           r"is shared by several values live at the break", r"is neither a graph output nor an input",
           r"would be given to the rest of the frame as a new object on each call",
           r"as a value of the generated code", r"^a set with too long a history",
           r"^a set computed by constant folding", r"not reachable from the frame's inputs"),
          example="a tensor that is not reachable from the frame's inputs (e.g. a constant "
                  "inside a torch module)"),
    Break("PD612", "a class statement the trace cannot make",
          "A class statement inside compiled code is traced: its body runs like a function "
          "with its own namespace, and the class is made for real while tracing, from the "
          "namespace made real (constants, functions, objects read from the inputs). That is "
          "sound only where making it runs no code of the user's (a metaclass other than type or "
          "ABCMeta, a base's __init_subclass__, a value's Python __set_name__) and where the "
          "class and what it made stay inside the trace: eager execution makes a new class at "
          "each call, which generated code cannot return.",
          "define the class at module level, or keep the class and its instances inside the "
          "compiled region (return tensors computed with them)",
          (r"class statement", r"^__build_class__ ", r"^a class body returning",
           r"^class \S+: \w+: ", r"as a class attribute \(only", r"of a method in a class body",
           r"of a function made in a class body", r"^method \S+: a closure of",
           r"^dataclasses\.(dataclass|field)", r"^a dataclass decorator with options",
           r"whose __set_name__ would run while tracing", r"changed by the trace, as a class attribute"),
          example="the class C, made by a class statement in compiled code, outlives the trace "
                  "(eager execution makes a new one at each call)"),
    Break("PD611", "a value of a type pydynamo does not model",
          "Every value the trace reads (an input, a global, an attribute) is wrapped in a "
          "tracker that models its type and is guarded. Objects of a type with no tracker (a "
          "C extension's objects, a bound method of a builtin, some standard-library internals) "
          "cannot be followed soundly.",
          "pass tensors, plain containers and user objects into the compiled region",
          (r"read from the frame's inputs", r"^a value of type .* computed while tracing",
           r"^bound method of a builtin"),
          example="a mmap object read from the frame's inputs"),
    Break("PD606", "object identity (`is`, id()) not known while tracing",
          "Guards pin which inputs are the same object, but an id() used as a number, compared "
          "with the id of an object that may be gone, or looked up in a dict keyed by id() "
          "depends on memory addresses that change between calls.",
          "compare objects with `is`, or key dicts by the objects themselves",
          (r"\bid\(\)", r"^identity of ", r"are one object"),
          example="id() of Foo() used as a number (its identity is not pinned: only comparisons "
                  "of ids and dict keys are modelled for it)"),
    Break("PD607", "hashing, dict keys and sets the trace cannot model",
          "A dict or set is modelled with keys the trace can compare: constants and objects "
          "hashed by identity. Keys with their own __hash__ / __eq__, values not known while "
          "tracing, and the iteration order of sets computed from inputs depend on hashes "
          "the guards do not check.",
          "use constants or objects without custom __hash__ as keys, and lists where order "
          "matters",
          (r"\bdict key", r"unhashable", r"^hash\(\) of ", r"set element", r"\bthe contents of ",
           r"iteration order", r": which item comes first", r"as an operand of a set operator",
           r"with elements other than plain constants", r"^dict with a key of type ",
           r"a set computed from an input set", r"^the entries of ", r"^instance __dict__ key ",
           r"^a tensor as a key of ", r"keyed by tensors"),
          example="dict key of type Point (it defines its own hash or equality)"),
    Break("PD605", "super() in a form pydynamo does not model",
          "super() is modelled in methods, with the class and instance bound as Python binds "
          "them. super() outside a method, with unbound arguments, or resolving to something "
          "other than a method is not.",
          "call the base class's method directly (Base.method(self, ...))",
          (r"^super\(",),
          example="super() outside a method (or with one argument)"),
    Break("PD604", "creating an object the trace does not model",
          "Objects made while tracing are simulated, then rebuilt by generated code. That "
          "needs construction to be plain Python (__new__ and __init__ the trace can inline). "
          "Instances of builtin or C classes, __new__ overrides of unknown behaviour and "
          "similar cannot be simulated.",
          "create the object outside the compiled region and pass it in",
          (r"^creating ", r"__new__", r"__init__ of a tuple subclass", r"^list\.__init__ ",
           r"^calling the enum ", r", whose __call__ is a "),
          example="creating a socket (an instance of builtin socket) while tracing"),
    Break("PD302", "a mutation pydynamo cannot replay",
          "Changes to Python objects (attributes, globals, cells, sets) are recorded and "
          "replayed by generated code after the graph runs. That needs a way to reach the "
          "object from the frame (a source) and a model of the change. Attributes of objects "
          "reachable only through C code, globals of another module, cells of closures the "
          "trace cannot name and sets made before the frame are not replayed: pydynamo breaks "
          "rather than lose the change.",
          "do the mutation outside the compiled region, or on an object the function receives "
          "as an argument",
          (r"^assignment to (?!Tensor\.)", r"^deletion of attribute ", r"^delattr\(\) on ",
           r"^attribute assignment on ", r"which has no source to replay it",
           r"after the trace assigned it on a class", r"nonlocal side effect",
           r"^a closure cell ", r"a set that existed before the frame",
           r"^mutation of ", r"after the trace reassigned a buffer"),
          example="assignment to global counter of another module"),
    # ---- generic families, tried after the specific ones -------------------------------------
    Break("PD201", "a call to a C or library function pydynamo does not model",
          "The trace inlines Python functions and models builtins and torch ops. A function "
          "written in C (or a library's compiled code) that it does not model could do "
          "anything: read or change state, depend on values the trace only has symbolically. "
          "The graph breaks and Python makes the call.",
          "use a torch operation instead, or decorate the caller's helper with "
          "pydynamo.disable to make the break explicit",
          (r"a C or library function pydynamo does not model",
           r"^builtin \S+ with arguments .* is not supported", r"^calling ",
           r"^object\.\S+ is not modelled", r", a C method, of "),
          example="call to time.time, a C or library function pydynamo does not model"),
    Break("PD608", "the type, truth value or iteration of a value not known while tracing",
          "Python decides `type(x)`, `if x:`, `for v in x` and indexing from the value's type and "
          "contents. For a value the trace models only partly (an iterator of unknown type, a "
          "user object without __iter__, an object whose contents are not tracked), those "
          "answers are not known.",
          "convert to a list or tuple first, or keep such values outside the compiled region",
          (r"^the type of ", r"^(the )?truth value of ", r"^iterating over ", r"^iteration over ",
           r"^next\(\) of ", r"^reversed\(\) of ", r"^iterator .* returned by ", r"^indexing ",
           r"^\S+ index ", r"^formatting .* into a string", r"^operator\.\S+ on ", r"^operator\.length_hint\(\) of ",
           r"^the __dict__ of "),
          example="iteration over Foo() (no __iter__)"),
    Break("PD603", "an attribute or method of an object pydynamo does not model",
          "Attributes of user objects, modules and classes are read with guards; builtin "
          "objects (ranges, deques, dict views, mappingproxies, iterators...) are modelled "
          "method by method. An attribute or method outside those models is not read, since "
          "its value could not be guarded.",
          "read the attribute outside the compiled region",
          (r"has no (attribute|method) ", r"^attribute \S+ of ", r"^method \S+ of ",
           r"^hasattr\(", r"^hasattr on ", r"^vars\(\) of ", r"^mappingproxy",
           r"^(range|deque|dict_\w+|__dict__|object|dict|torch\.Size|module\.__dict__)[. ]", r"^\w+\.\w+$",
           r"^\w+ attribute \S+$"),
          example="attribute 'foo' of a range_iterator object"),
    Break("PD209", "a Python computation on values only known at run time",
          "Builtins and container methods are folded at trace time when their operands are "
          "constants; a result computed from graph values must be a graph op. Operands that "
          "are neither (a user object, a symbolic value where a constant is needed) cannot "
          "be folded or captured.",
          "compute the value with torch ops, or outside the compiled region",
          (r"not known while tracing", r"not a constant", r"non-constant", r"as a constant$",
           r"^sorted\(\) of values"),
          example="sorted() of values that are not known while tracing"),
    Break("PD202", "a call with argument forms the model does not cover",
          "Builtins, container methods and torch functions that pydynamo evaluates itself "
          "take exactly the argument forms their model implements (and the real function "
          "accepts). Other forms (keywords, unusual types) are not guessed.",
          "call it with plain positional arguments, or outside the compiled region",
          (r"with (these |keyword |non-constant )?arguments", r"with keywords", r"is not modelled$",
           r"is not supported$", r"is not captured", r"^[\w.]+\(\) (with|of) .*(is not|other than) ",
           r"^[\w.]+\(\) with \S+ arguments$", r"must have at least \w+ arguments",
           r"^a heapq function on ", r"^heapify\(\) of more than ", r"is not the data form$",
           r"^torch\._C\._group_tensors_by_device_and_dtype "),
          example="islice() with a step that is not a positive int or None"),
    # ---- catch-alls, one per exception class -------------------------------------------------
    Break("PD002", "data-dependent (other)",
          "The operation needs a tensor's values, which the trace does not have.",
          "keep the value a tensor (torch.where(cond, a, b) instead of `if`), or move "
          ".item()/.tolist() out of the compiled region",
          kind="DataDependentError", catch_all=True),
    Break("PD003", "a side effect (other)",
          "The operation has an effect on Python state or the outside world that the graph "
          "cannot replay.",
          "move the side effect out of the compiled region",
          kind="SideEffectError", catch_all=True),
    Break("PD004", "an unmodelled call (other)",
          "A C or library function (or class) the tracer does not model.",
          "use a torch operation instead, or decorate the caller's helper with "
          "pydynamo.disable to make the break explicit",
          kind="UnmodelledCallError", catch_all=True),
    Break("PD005", "a disabled function (other)",
          "A function that must run as plain Python.",
          "call it outside the compiled region",
          kind="DisabledFunctionError", catch_all=True),
    Break("PD010", "the backend compiler failed",
          "The graph was captured, but the backend raised while compiling it. This is not a "
          "graph break: with config.suppress_errors the frame runs eagerly with a warning, "
          "otherwise BackendCompilerFailed reaches the caller.",
          "try another backend (\"eager\", \"aot_eager\") to find which stage fails, and report "
          "the backend's error",
          kind="BackendCompilerFailed", catch_all=True),
    Break("PD001", "not captured (other)",
          "Something pydynamo does not capture here: tracing stops, the graph breaks (or the "
          "frame runs eagerly) and Python runs the code. The message says what it was.",
          "move the code the message names out of the compiled region",
          catch_all=True),
]

BY_ID = {e.id: e for e in ENTRIES}


@functools.lru_cache(maxsize=4096)
def entry_for(exc_class, reason):
    """The first entry matching an exception of ``exc_class`` with ``reason``, or None (for a
    class outside the catalogue). Cached: a break repeated in a loop is looked up once."""
    return next((e for e in ENTRIES if e.matches(exc_class, reason)), None)


def lookup(exc):
    """The catalogue entry of ``exc`` (an Unsupported, or BackendCompilerFailed)."""
    reason = getattr(exc, "reason", None) or (exc.args[0] if exc.args else "")
    return entry_for(type(exc), str(reason))
