"""pydynamo.explain(fn)(*args, **kwargs): what pydynamo captures of one call, and why not more.

It resets pydynamo before and after (like torch._dynamo.explain), so the report describes a
fresh compile and nothing stays cached or switched on behind it.
"""
import linecache
from dataclasses import dataclass, field

from . import convert_frame
from .eval_frame import optimize


@dataclass
class BreakReason:
    """One graph break (or one frame that ran eagerly): why, and where in the user's code."""
    reason: str
    user_stack: list  # (filename, lineno, function name), innermost first
    hint: str = None
    kind: str = "Unsupported"  # the exc.py class of the cause
    id: str = None  # its graph-break catalogue id (breaks.py, docs/graph-breaks.md)

    @property
    def location(self):
        return f"{self.user_stack[0][0]}:{self.user_stack[0][1]}" if self.user_stack else "<unknown>"

    @property
    def source_line(self):
        if not self.user_stack:
            return ""
        return linecache.getline(self.user_stack[0][0], self.user_stack[0][1]).strip()

    def __str__(self):
        lines = [f"Reason{f' [{self.id}]' if self.id else ''}: {self.reason}", "User Stack:"]
        for f, n, name in self.user_stack:
            src = linecache.getline(f, n or 0).strip()
            lines.append(f"  {f}:{n} in {name}" + (f": {src}" if src else ""))
        if self.hint:
            lines.append(f"Hint: {self.hint}")
        return "\n".join(lines)


@dataclass
class ExplainOutput:
    graphs: list = field(default_factory=list)
    break_reasons: list = field(default_factory=list)
    ops_per_graph: list = field(default_factory=list)
    out_guards: list = field(default_factory=list)
    compile_times: list = field(default_factory=list)  # (function name, seconds)

    @property
    def graph_count(self):
        return len(self.graphs)

    @property
    def graph_break_count(self):
        return len(self.break_reasons)

    @property
    def op_count(self):
        return sum(len(ops) for ops in self.ops_per_graph)

    def __str__(self):
        out = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
               f"Op Count: {self.op_count}", "Break Reasons:"]
        for i, br in enumerate(self.break_reasons, 1):
            out.append(f"  Break Reason {i}:\n    " + str(br).replace("\n", "\n    "))
        out.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            out.append(f"  Ops {i}:")
            out += [f"    {op}" for op in ops]
        out.append("Out Guards:")
        out += [f"  Guard {i}: {g}" for i, g in enumerate(self.out_guards, 1)]
        out.append("Compile Times: " + ", ".join(f"{name}: {secs:.4f}s" for name, secs in self.compile_times))
        return "\n".join(out)


def _op_name(node):
    """How an op reads in the report: torch.relu, Tensor.sum, operator.mul, torch.nn.functional.gelu."""
    target = node.target
    if node.op != "call_function":
        return f"Tensor.{target}" if node.op == "call_method" else str(target)
    name = getattr(target, "__name__", str(target))
    module = getattr(target, "__module__", None) or ""
    if module in ("", "torch._C._VariableFunctions") or "_VariableFunctionsClass" in getattr(target, "__qualname__", ""):
        return f"torch.{name}"
    return f"{module.lstrip('_')}.{name}"


class _Recorder:
    def __init__(self):
        self.out = ExplainOutput()

    def backend(self, gm, example_inputs):
        self.out.graphs.append(gm)
        self.out.ops_per_graph.append([_op_name(n) for n in gm.graph.nodes
                                       if n.op in ("call_function", "call_method", "call_module")])
        return gm.forward

    def on_entry(self, code, guards, seconds):
        self.out.out_guards.extend(guards.texts())
        self.out.compile_times.append((code.co_qualname, seconds))

    def on_break(self, exc):
        self.out.break_reasons.append(BreakReason(exc.reason, list(exc.user_stack), exc.hint,
                                                  type(exc).__name__, exc.id))


def explain(fn):
    """``explain(fn)(*args, **kwargs) -> ExplainOutput``; runs fn once, eagerly where needed."""
    from . import reset

    def run(*args, **kwargs):
        rec = _Recorder()
        reset()
        convert_frame.observers.append(rec)
        try:
            optimize(rec.backend)(fn)(*args, **kwargs)
        finally:
            convert_frame.observers.remove(rec)
            reset()
        return rec.out
    return run
