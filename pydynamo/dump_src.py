"""pydynamo.debug.dump_src: the code pydynamo runs, written out as Python files.

``with pydynamo.debug.dump_src(dir):`` or ``PYDYNAMO_DUMP_SRC=dir`` (read when pydynamo is
imported) writes into ``dir``, for each frame compiled meanwhile:

* ``frame_<n>_<function>.py``: the new code as Python (decompile.py): the graph call, the values
  and side effects rebuilt, at a graph break the breaking instruction and the resume call. The
  code object that runs gets this file as co_filename and its lines (the header names the user's
  lines), so tracebacks, pdb and coverage tools step through these statements.
* ``frame_<n>_<function>.guards.txt``: the guards under which that code runs.
* ``__compiled_fn_<k>.py``: each graph as FX prints it, with the source of each input.
* one file per resume function (the rest of a function after a break): its arguments, what its
  prologue puts on the stack, and the user's source from the line it resumes at. Where that is
  a whole statement of the function's body and the stack is empty, the ``def`` is that source
  and runs as the resume function does; otherwise (a loop, a block) it only raises, and comments
  show where the bytecode resumes. A resume function keeps the user's file and lines; the hook
  compiles it like any function, into more ``frame_`` files.

Code the decompiler cannot write keeps its co_filename and is dumped as a ``dis`` listing.
With dumping off nothing here runs: output_graph tests ``dumper`` once per compile.
"""
import ast
import contextlib
import dataclasses
import dis
import inspect
import io
import itertools
import os
import textwrap
import threading
import types
import weakref
from typing import List, Optional

from . import bytecode_utils as bu
from . import decompile as dc
from . import logs

# The active Dumper, or None. output_graph.finish tests it.
dumper = None


@contextlib.contextmanager
def dump_src(directory):
    """Dump every compile inside the block into ``directory``; yields the Dumper (its ``frames``
    list the files written per compile). Dumps nest: the inner one gets the compiles meanwhile."""
    d = start(directory)
    try:
        yield d
    finally:
        stop(d)


def start(directory):
    global dumper
    dumper = Dumper(directory, previous=dumper)
    return dumper


def stop(d=None):
    global dumper
    d = d or dumper
    if d is None or d.closed:
        return
    d.close()
    while dumper is not None and dumper.closed:
        dumper = dumper.previous


def start_from_env():
    directory = os.environ.get("PYDYNAMO_DUMP_SRC")
    if directory and dumper is None:
        start(directory)


@dataclasses.dataclass
class DumpedFrame:
    """The files of one compile. ``name``: the function the frame file defines (for code with
    free variables, ``___closure_of_<name>`` takes their values and returns it)."""
    function: str
    path: str
    name: str
    decompiled: bool
    guards: str
    graph: Optional[str] = None
    resumes: List[str] = dataclasses.field(default_factory=list)


class Dumper:
    def __init__(self, directory, previous=None):
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.previous, self.closed = previous, False
        self.frames = []  # a DumpedFrame per compile, in order
        self._lock = threading.Lock()
        self._resumes = weakref.WeakKeyDictionary()  # resume code -> its file
        self._pending = weakref.WeakKeyDictionary()  # original code -> DumpedFrames awaiting guards
        self._observing = False
        self._count = itertools.count(1)

    def close(self):
        from . import convert_frame
        if self in convert_frame.observers:
            convert_frame.observers.remove(self)
        self.closed = True

    # ---- hooks ----

    def on_output(self, output):
        """output_graph.finish: dump ``output.new_code``; returns the code to install (the same
        instructions, pointed at the dumped file)."""
        if not self._observing:  # guards come later, through convert_frame's observers
            from . import convert_frame
            convert_frame.observers.append(self)
            self._observing = True
        try:
            frame, code = self._dump(output)
        except Exception as e:  # a debugging aid never stops a compile
            logs.get("errors").warning("pydynamo.debug.dump_src could not dump %s: %s: %s",
                                       output.code.co_qualname, type(e).__name__, e)
            return output.new_code
        with self._lock:
            self.frames.append(frame)
            self._pending.setdefault(output.code, []).append(frame)
        return code

    def on_entry(self, code, guards, seconds):
        with self._lock:
            waiting = self._pending.get(code)
            frame = waiting.pop() if waiting else None
        if frame is None:
            return
        texts = guards.texts() if hasattr(guards, "texts") else [repr(guards)]
        with open(frame.guards, "w", encoding="utf-8") as f:
            f.write(f"# guards of {os.path.basename(frame.path)} ({frame.function}): all must hold\n")
            f.write("\n".join(texts) + "\n")

    def on_break(self, exc):
        pass

    # ---- files ----

    def _reserve(self, names):
        """A new file: the first of ``names`` not taken."""
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                return path, open(path, "x", encoding="utf-8")
            except FileExistsError:
                continue

    def _write(self, stem, lines):
        path, f = self._reserve(f"{stem}.py" if k == 1 else f"{stem}-{k}.py" for k in itertools.count(1))
        with f:
            f.write("\n".join(lines) + "\n")
        return path

    def _dump(self, output):
        code, orig = output.new_code, output.code
        name = dc.safe_name(orig.co_name)
        graph = self._write_graph(output) if output.graph_module is not None else None
        resumes = [(label, self._resume_file(rcode, label)) for label, rcode in _resumes_of(code, output.f_globals)]
        try:
            fn, why = dc.decompile(code, output.f_globals), None
        except dc.Undecompilable as e:
            fn, why = None, str(e)
        path, f = self._reserve(f"frame_{next(self._count)}_{name}.py" for _ in itertools.count())
        guards = path[:-3] + ".guards.txt"
        lines = _frame_header(orig, code, guards, graph, resumes)
        if fn is not None:
            lines += ["# Below: that code written as Python (pydynamo/decompile.py); the code object has this",
                      "# file as co_filename and these lines.", *fn.constant_lines(), "", ""]
            offset = len(lines)
            lines += fn.lines
        else:
            lines += [f"# The decompiler could not write that code ({why}); its bytecode:"]
            lines += ["#   " + line for line in _dis(code)]
            lines += ["", ""] + dc.function_lines(code, name, [f"    raise NotImplementedError({why!r})"])[0]
        with f:
            f.write("\n".join(lines) + "\n")
        new = code
        if fn is not None:
            new = dc.relocate(code, path, offset + fn.def_line + 1, [offset + i + 1 for i in fn.inst_lines])
        frame = DumpedFrame(orig.co_qualname, path, name, fn is not None, guards, graph, [p for _, p in resumes])
        if code.co_freevars:
            frame.name = f"___closure_of_{name}"
        return frame, new

    def _write_graph(self, output):
        gm, name = output.graph_module, output.compiled_fn_name
        lines = [f"# pydynamo: graph {name} of {output.code.co_qualname} "
                 f"({output.code.co_filename}:{output.code.co_firstlineno}), as FX prints it;",
                 "# the backend compiled it. Its inputs, in order:"]
        for source, _, var in output.graph_inputs():
            node = getattr(var, "node", None)
            lines.append(f"#     {getattr(node, 'target', '?')} = {source.name()}")
        return self._write(name, lines + [gm.code.strip("\n").rstrip()])

    def _resume_file(self, rcode, label):
        with self._lock:
            if rcode in self._resumes:
                return self._resumes[rcode]
        stem = label if label.startswith("__resume_") else f"{rcode.co_name}_{id(rcode):x}"
        try:
            lines = _resume_lines(rcode, label)
        except Exception as e:  # the frame's dump goes on; this file says what failed
            lines = [f"# pydynamo: resume function {label} ({type(e).__name__}: {e}); its bytecode:"]
            lines += ["#   " + line for line in _dis(rcode)]
        path = self._write(stem, lines)
        with self._lock:
            self._resumes[rcode] = path
        return path


def _frame_header(orig, code, guards, graph, resumes):
    from . import resume
    what = f"{orig.co_qualname} ({orig.co_filename}:{orig.co_firstlineno})"
    if resume.is_resume_code(orig):
        base = resume._origins[orig][0]
        what = (f"{orig.co_name}, the rest of {base.co_qualname} ({base.co_filename}:{base.co_firstlineno}) "
                "after a graph break,")
    user_lines = sorted({line for _, line in dis.findlinestarts(code) if line is not None} - {code.co_firstlineno})
    out = [f"# pydynamo: the code that runs instead of {what}",
           f"# while the guards in {os.path.basename(guards)} hold; made for line(s) "
           f"{', '.join(map(str, user_lines)) or '-'} of the user's code.",
           "# __compiled_fn_* and __resume_* are globals of the user's module (pydynamo.debug.dump_src)."]
    if graph:
        out.append(f"# The graph it calls: {os.path.basename(graph)}")
    for label, rpath in resumes:
        out.append(f"# Resume function {label}: {os.path.basename(rpath)}")
    return out


def _dis(code):
    text = io.StringIO()
    dis.dis(code, file=text)
    return text.getvalue().rstrip("\n").splitlines()


def _resumes_of(code, f_globals):
    """(how the code names it, code) of the resume functions ``code`` calls."""
    from . import resume
    found = []
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_GLOBAL":
            fn = f_globals.get(ins.argval)
            if isinstance(fn, types.FunctionType) and resume.is_resume_code(fn.__code__):
                found.append((ins.argval, fn.__code__))
        elif ins.opname == "LOAD_CONST" and isinstance(ins.argval, types.CodeType) \
                and resume.is_resume_code(ins.argval):
            found.append((ins.argval.co_name, ins.argval))
    return found


# ---- resume functions -------------------------------------------------------------------------

def _resume_lines(rcode, label):
    from . import resume
    orig = resume._origins[rcode][0]
    index = next(k[0] for k, (c, _) in resume._memo.get(orig, {}).items() if c is rcode)
    line = bu.decode(orig)[index].lineno
    jump = next(i.index for i in bu.decode(rcode) if i.opname == "JUMP_FORWARD")
    try:
        stmts, stack, consts = dc.prologue(rcode, jump)
    except dc.Undecompilable as e:
        stmts, stack, consts = [f"(not decompiled: {e})"], ["?"], []
    name = dc.safe_name(rcode.co_name)
    where = f"{orig.co_qualname} ({orig.co_filename}:{orig.co_firstlineno})"
    out = [f"# pydynamo: resume function {label}: the rest of {where}",
           f"# after a graph break, from line {line}. Its arguments are the values on the stack at the",
           "# break (___stack<i>) and the locals live there. It runs the user's own bytecode from that",
           "# line, with the user's file and lines; the hook compiles it like any function (its",
           f"# compiles are dumped as frame_*_{name}.py)."]
    remainder = _remainder(orig, index, line) if not stack else None
    if remainder is not None:
        body, decls = remainder
        pad = body[0][:len(body[0]) - len(body[0].lstrip())]
        src = [pad + d for d in decls] + [pad + s for s in stmts] + body
        lines, _, _ = dc.function_lines(rcode, name, src, pad_body=False)
        text = out + ["# Below: the user's source from that line, which does what the bytecode does.", "", ""] + lines
        try:
            compile("\n".join(text) + "\n", "<resume>", "exec")
            return text
        except SyntaxError:
            pass
    out.append("# Its prologue" + (":" if stmts else " binds nothing,"))
    out += [f"#     {s}" for s in stmts]
    out.append(f"# leaves the stack as [{', '.join(stack)}] and jumps into the bytecode at line {line}:")
    if consts:
        out.append("# where the prologue's constants are:")
        out += [f"#     {n} = {what}" for n, _, what in consts]
    out += _marked_source(orig, line)
    message = f"{label} runs the bytecode of {orig.co_qualname} from line {line}: see above"
    lines, _, _ = dc.function_lines(rcode, name, [f"    raise NotImplementedError({message!r})"])
    return out + ["", ""] + lines


def _marked_source(orig, line):
    try:
        raw, start = inspect.getsourcelines(orig)
    except (OSError, TypeError):
        return [f"# (the source of {orig.co_qualname} is not available)"]
    return ["#"] + [f"# {'>>' if start + k == line else '  '} {start + k:4d}  {text.rstrip()}"
                    for k, text in enumerate(raw)]


def _remainder(orig, index, line):
    """(source lines, global/nonlocal declarations) of ``orig``'s body from ``line`` on, when
    resuming at instruction ``index`` with an empty stack is starting that statement of the
    body's top level (no loop or block around it): running that source then does what the
    resume function's bytecode does. Else None."""
    insts = bu.decode(orig)
    if line is None or insts[index].exn is not None or any(
            i.lineno is not None and i.lineno >= line for i in insts[:index]):
        return None  # inside a try or with, or not at the start of the statement
    if "__class__" in orig.co_freevars:  # zero-argument super() needs the class's cell
        return None
    try:
        raw, start = inspect.getsourcelines(orig)
        tree = ast.parse(textwrap.dedent("".join(raw)))
    except (OSError, TypeError, SyntaxError):
        return None
    fdef = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(fdef, ast.FunctionDef):
        return None
    stmts, off = fdef.body, start - 1
    k = next((k for k, s in enumerate(stmts) if s.lineno + off == line), None)
    if k is None or (k and stmts[k - 1].end_lineno + off >= line):
        return None
    decls = []
    for node in _own_nodes(fdef):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            decls.append(f"{'global' if isinstance(node, ast.Global) else 'nonlocal'} {', '.join(node.names)}")
    return [text.rstrip("\n") for text in raw[stmts[k].lineno - 1:stmts[-1].end_lineno]], decls


def _own_nodes(fdef):
    """The nodes of a function's body, not those of functions or classes defined in it."""
    todo = list(fdef.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


start_from_env()
