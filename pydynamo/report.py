"""``python -m pydynamo.report DIR [-o page.html]``: a trace (pydynamo.debug) as one HTML page.

The page stands alone (inline CSS and a few lines of script, no network, no server) so it can
be mailed or attached to an issue. At the top, the summary and what people come for: the graph
breaks with their lines and the recompiles with the guard that failed; then an index of frames
and compiles, a timeline of compile time, and each function's source with the lines captured
into graphs highlighted and the break lines marked, followed by its compiles (graphs, guards,
phases).
"""
import argparse
import glob
import html
import json
import os
import re
import sys


def load(path):
    """The runs of a trace directory (one per file; a file's path also works), in file order.
    A run is ``{"name", "start", "frames": {id: frame event}, "compiles": [...], "counters"}``."""
    files = sorted(glob.glob(os.path.join(path, "*.jsonl"))) if os.path.isdir(path) else [path]
    runs = []
    for f in files:
        run = {"name": os.path.basename(f), "start": {}, "frames": {}, "compiles": [], "counters": None}
        with open(f, encoding="utf-8") as lines:
            for line in lines:
                try:
                    ev = json.loads(line)
                except ValueError:  # a line cut short by a crash
                    continue
                kind = ev.get("event")
                if kind == "start":
                    run["start"] = ev
                elif kind == "frame":
                    run["frames"][ev["frame_id"]] = ev
                elif kind == "compile":
                    run["compiles"].append(ev)
                elif kind == "counters":
                    run["counters"] = ev
        if run["frames"]:
            runs.append(run)
    return runs


# ---- the model: what the page says, before it is HTML ---------------------------------------------

def _model(runs):
    """Functions (a function's own code and its resume functions share the source), compiles,
    breaks by site and recompiles, each with the anchors the page links them by."""
    functions, compiles = {}, []
    for r, run in enumerate(runs):
        prefix = f"r{r}-" if len(runs) > 1 else ""
        counters = {c["frame_id"]: c for c in run["compiles"]}  # the last snapshot, if the run died
        counters.update({f["frame_id"]: f for f in (run["counters"] or {}).get("frames", [])})
        for fid, fr in run["frames"].items():
            key = (r, fr["file"], fr["source_line"])
            fn = functions.get(key)
            if fn is None:
                fn = functions[key] = {"anchor": f"fn-{prefix}{len(functions)}", "file": fr["file"],
                                       "function": fr["function"], "source": fr["source"],
                                       "first": fr["source_line"], "codes": [], "compiles": [],
                                       "captured": set(), "breaks": {}, "hits": 0, "misses": 0}
            if not fr.get("resume"):
                fn["function"] = fr["function"]
            fn["codes"].append(fr["function"])
            fn["hits"] += counters.get(fid, {}).get("hits", 0)
            fn["misses"] += counters.get(fid, {}).get("misses", 0)
            fr["_fn"] = fn
        for c in run["compiles"]:
            fn = run["frames"][c["frame_id"]]["_fn"]
            c = dict(c, anchor=f"c-{prefix}{c['compile_id'].replace('/', '-')}", fn=fn,
                     label=f"{prefix}{c['compile_id']}")
            fn["compiles"].append(c)
            compiles.append(c)
            for g in c["graphs"]:
                fn["captured"].update(g["lines"])
            for b in c["breaks"]:
                if b.get("line") is not None:
                    fn["breaks"].setdefault(b["line"], b)
    sites = {}
    for c in compiles:
        for b in c["breaks"]:
            inner = b["user_stack"][0] if b["user_stack"] else [c["file"], b.get("line"), c["function"]]
            key = (id(c["fn"]), b.get("line"), b["reason"])
            site = sites.setdefault(key, {"break": b, "fn": c["fn"], "line": b.get("line"), "inner": inner,
                                          "count": 0, "compiles": [], "eager": False})
            site["count"] += 1
            site["compiles"].append(c)
            site["eager"] |= c["result"] == "skipped"
    return {"runs": runs, "functions": list(functions.values()), "compiles": compiles,
            "sites": sorted(sites.values(), key=lambda s: -s["count"]),
            "recompiles": [c for c in compiles if c.get("recompile")]}


def _source_line(fn, line):
    i = (line or 0) - fn["first"]
    return fn["source"][i].strip() if 0 <= i < len(fn["source"]) else ""


# ---- HTML --------------------------------------------------------------------------------------------

def _e(text):
    return html.escape(str(text), quote=True)


def _secs(s):
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _where(fn, line):
    """A link to ``line`` in the function's source on the page."""
    name = os.path.basename(fn["file"])
    if line is None:
        return f'<a href="#{fn["anchor"]}">{_e(name)}</a>'
    return f'<a class="loc" href="#{fn["anchor"]}-L{line}">{_e(name)}:{line}</a>'


def _summary(m):
    compiled = [c for c in m["compiles"] if c["result"] == "compiled"]
    graphs = sum(len(c["graphs"]) for c in compiled)
    breaks = sum(s["count"] for s in m["sites"])
    recompiles = sum(c["result"] != "cache_limit" for c in m["recompiles"])
    seconds = sum(c.get("seconds", 0.0) for c in m["compiles"])
    parts = [f"{graphs} graph{'s' * (graphs != 1)}", f"{breaks} break{'s' * (breaks != 1)}",
             f"{recompiles} recompile{'s' * (recompiles != 1)}", f"{seconds:.1f} s compiling"]
    limited = sum(c["result"] == "cache_limit" for c in m["compiles"])
    failed = sum(c["result"] in ("error", "skipped") for c in m["compiles"])
    if limited:
        parts.append(f"{limited} frame{'s' * (limited != 1)} at the cache-size limit")
    if failed:
        parts.append(f"{failed} frame{'s' * (failed != 1)} run eagerly")
    out = [f'<p class="headline">{_e(", ".join(parts))}</p>']
    if m["sites"]:
        s = m["sites"][0]
        src = _source_line(s["fn"], s["line"])
        out.append(f'<p class="worst">The worst break: <b>{_e(s["break"]["reason"])}</b> at '
                   f'{_where(s["fn"], s["line"])}' + (f' <code>{_e(src)}</code>' if src else "") +
                   f' ({s["count"]} time{"s" * (s["count"] != 1)})</p>')
    if m["recompiles"]:
        c = m["recompiles"][0]
        r = c["recompile"][0]
        out.append(f'<p class="worst">The first recompile: <a href="#{c["anchor"]}">{_e(c["function"])}</a>, '
                   f'guard <code>{_e(r["guard"])}</code> failed' + _change(r) + "</p>")
    cards = [("graphs", graphs), ("breaks", breaks), ("recompiles", recompiles),
             ("compile time", f"{seconds:.2f} s"), ("frames", len(m["functions"])),
             ("hits", sum(f["hits"] for f in m["functions"])), ("misses", sum(f["misses"] for f in m["functions"]))]
    out.append('<div class="cards">' + "".join(f'<div class="card"><span>{_e(v)}</span>{_e(k)}</div>'
                                               for k, v in cards) + "</div>")
    return "".join(out)


def _change(r):
    if r.get("old") is None and r.get("new") is None:
        return ""
    return f': was <code>{_e(r.get("old"))}</code>, now <code class="new">{_e(r.get("new"))}</code>'


def _breaks_section(m):
    if not m["sites"]:
        return '<p class="none">No graph breaks.</p>'
    rows = []
    for s in m["sites"]:
        b, fn = s["break"], s["fn"]
        stack = "".join(f"<li>{_e(f)}:{n} in {_e(name)}</li>" for f, n, name in b["user_stack"])
        links = " ".join(f'<a href="#{c["anchor"]}">{_e(c["label"])}</a>' for c in s["compiles"])
        src = _source_line(fn, s["line"])
        rows.append(
            f'<div class="break-site"><div class="reason">{_e(b["reason"])}'
            f' <span class="kind">{_e(b.get("id") or "")} {_e(b["kind"])}</span></div>'
            f'<div>at {_where(fn, s["line"])} in <b>{_e(fn["function"])}</b>'
            + (f' <code>{_e(src)}</code>' if src else "")
            + (" &mdash; the whole frame ran eagerly" if s["eager"] else "")
            + f'</div><div class="small">{s["count"]}&times;, in compiles {links}</div>'
            + (f'<div class="hint">hint: {_e(b["hint"])}</div>' if b.get("hint") else "")
            + (f'<details><summary>user stack</summary><ol>{stack}</ol></details>' if stack else "")
            + "</div>")
    return "".join(rows)


def _recompiles_section(m):
    if not m["recompiles"]:
        return '<p class="none">No recompiles.</p>'
    rows = []
    for c in m["recompiles"]:
        what = "hit the cache-size limit" if c["result"] == "cache_limit" else "recompiled"
        reasons = "".join(f'<li>guard <code class="guard">{_e(r["guard"])}</code> failed'
                          + (f' ({_e(r["failure"][len(r["guard"]):].strip(" ()"))})'
                             if r["failure"] != r["guard"] else "") + _change(r) + "</li>"
                          for r in c["recompile"])
        rows.append(f'<div class="recompile"><a href="#{c["anchor"]}">{_e(c["label"])}</a> '
                    f'<b>{_e(c["function"])}</b> {what}:<ul>{reasons}</ul></div>')
    return "".join(rows)


def _index(m):
    rows = []
    for fn in m["functions"]:
        cs = fn["compiles"]
        rows.append(
            f'<tr><td><a href="#{fn["anchor"]}">{_e(fn["function"])}</a></td>'
            f'<td>{_e(os.path.basename(fn["file"]))}:{fn["first"]}</td><td>{len(cs)}</td>'
            f'<td>{sum(len(c["graphs"]) for c in cs if c["result"] == "compiled")}</td>'
            f'<td>{sum(len(c["breaks"]) for c in cs)}</td><td>{sum(bool(c.get("recompile")) for c in cs)}</td>'
            f'<td>{fn["hits"]}</td><td>{fn["misses"]}</td>'
            f'<td>{_secs(sum(c.get("seconds", 0.0) for c in cs))}</td></tr>')
    frames = ('<table class="index"><tr><th>function</th><th>defined at</th><th>compiles</th><th>graphs</th>'
              '<th>breaks</th><th>recompiles</th><th>hits</th><th>misses</th><th>compile time</th></tr>'
              + "".join(rows) + "</table>")
    links = " ".join(f'<a class="result-{_e(c["result"])}" href="#{c["anchor"]}" title="{_e(c["function"])}: '
                     f'{_e(c["result"])}">{_e(c["label"])}</a>' for c in m["compiles"])
    return frames + f'<p class="compile-links">Compiles: {links}</p>'


_PHASE_COLOURS = {"tracing": "#4e79a7", "guards": "#f28e2b", "backend": "#59a14f"}


def _timeline(m):
    """One bar per compile at its start time; its phases in colour."""
    cs = [c for c in m["compiles"] if "seconds" in c]
    if not cs:
        return '<p class="none">Nothing compiled.</p>'
    end = max(c["start"] + c["seconds"] for c in cs) or 1.0
    width, row, left = 900, 18, 170
    bars = []
    for i, c in enumerate(cs):
        y, x = i * row, left + c["start"] / end * width
        bars.append(f'<a href="#{c["anchor"]}"><text x="0" y="{y + 13}">{_e(c["label"])} '
                    f'{_e(c["function"][:18])}</text></a>')
        phases = c["phases"]
        total = sum(phases.values()) or 1.0
        for name in ("tracing", "guards", "backend"):
            w = max(phases.get(name, 0.0) / end * width, 0.0)
            if name == "tracing":
                w = max(w, 2.0)  # every compile shows, however short
            bars.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" '
                        f'fill="{_PHASE_COLOURS[name]}"><title>{_e(c["label"])} {name}: '
                        f'{_secs(phases.get(name, 0.0))} of {_secs(total)}</title></rect>')
            x += w
        bars.append(f'<text x="{x + 4:.1f}" y="{y + 13}" class="secs">{_secs(c["seconds"])}</text>')
    legend = " ".join(f'<span class="swatch" style="background:{colour}"></span>{name}'
                      for name, colour in _PHASE_COLOURS.items())
    height = len(cs) * row
    return (f'<p class="legend">{legend} &mdash; {_secs(end)} from the trace\'s start</p>'
            f'<svg class="timeline" width="{left + width + 80}" height="{height}" '
            f'viewBox="0 0 {left + width + 80} {height}">{"".join(bars)}</svg>')


_NAME = re.compile(r"^\s+(\w+) = ")


def _graph_code(g):
    """The graph's code, each op's line annotated with the user line it came from."""
    out = []
    for line in g["code"].splitlines():
        m = _NAME.match(line)
        node = g.get("nodes", {}).get(m.group(1)) if m else None
        at = node and node["at"]
        out.append(_e(line) + (f'<span class="at" title="{_e(at)}">  # {_e(os.path.basename(at))}</span>'
                               if at else ""))
    return "\n".join(out)


def _source(fn):
    rows = []
    for i, text in enumerate(fn["source"]):
        n = fn["first"] + i
        classes, note = [], ""
        if n in fn["captured"]:
            classes.append("captured")
        b = fn["breaks"].get(n)
        if b is not None:
            classes.append("break")
            note = f'<span class="break-note">&#9664; graph break: {_e(b["reason"])}</span>'
        rows.append(f'<tr id="{fn["anchor"]}-L{n}" class="{" ".join(classes)}"><td class="ln">{n}</td>'
                    f'<td class="code">{_e(text) or " "}{note}</td></tr>')
    if not rows:
        return '<p class="none">(source not available)</p>'
    return f'<table class="source">{"".join(rows)}</table>'


def _compile(c):
    phases = ", ".join(f"{k} {_secs(v)}" for k, v in c["phases"].items())
    head = (f'<h4>compile {_e(c["label"])} &middot; <code>{_e(c["function"])}</code> &middot; '
            f'<span class="result result-{_e(c["result"])}">{_e(c["result"])}</span> &middot; '
            f'{len(c["graphs"])} graph{"s" * (len(c["graphs"]) != 1)} &middot; {_secs(c.get("seconds", 0.0))}</h4>')
    parts = [head, f'<div class="small">phases: {phases}; cache entries: {c.get("cache_entries", "?")}, '
                   f'hits so far: {c.get("hits", "?")}, misses so far: {c.get("misses", "?")}</div>']
    if c.get("recompile"):
        parts.append('<div class="recompile">Recompiled because: <ul>' + "".join(
            f'<li>guard <code class="guard">{_e(r["guard"])}</code> failed{_change(r)}</li>'
            for r in c["recompile"]) + "</ul></div>")
    if c.get("error"):
        parts.append(f'<pre class="error">{_e(c["error"])}</pre>')
    for b in c["breaks"]:
        parts.append(f'<div class="break-site">graph break at {_where(c["fn"], b.get("line"))}: '
                     f'{_e(b["reason"])}</div>')
    for i, g in enumerate(c["graphs"]):
        parts.append(f'<details open><summary>graph {i + 1}: {g["ops"]} ops, backend {_secs(g.get("seconds", 0.0))}'
                     f'</summary><pre class="graph">{_graph_code(g)}</pre></details>')
    if c["guards"]:
        parts.append(f'<details><summary>{len(c["guards"])} guards</summary><ul class="guards">'
                     + "".join(f"<li><code>{_e(t)}</code></li>" for t in c["guards"]) + "</ul></details>")
    return f'<article class="compile" id="{c["anchor"]}">{"".join(parts)}</article>'


def _functions(m):
    out = []
    for fn in m["functions"]:
        codes = ", ".join(sorted(set(fn["codes"])))
        out.append(f'<section class="function" id="{fn["anchor"]}"><h3>{_e(fn["function"])} '
                   f'<span class="small">{_e(fn["file"])}:{fn["first"]} &middot; codes: {_e(codes)} &middot; '
                   f'{fn["hits"]} hits, {fn["misses"]} misses</span></h3>{_source(fn)}'
                   + "".join(_compile(c) for c in fn["compiles"]) + "</section>")
    return "".join(out)


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1f3b5c;color:#fff;padding:16px 28px}
header h1{margin:0 0 6px;font-size:20px} header a{color:#ffd479}
header code{background:#2d5080;color:#fff;padding:1px 4px;border-radius:3px}
header code.new{background:#ffd0d0;color:#8e1b1b}
header .headline{font-size:18px;font-weight:600;margin:4px 0}
.cards{display:flex;gap:10px;margin-top:10px;flex-wrap:wrap}
.card{background:#2d5080;padding:6px 12px;border-radius:6px;font-size:12px}
.card span{display:block;font-size:18px;font-weight:700}
nav.toc{padding:8px 28px;background:#e8ecf2} nav.toc a{margin-right:14px}
main{padding:0 28px 40px} h2{border-bottom:2px solid #cfd6e0;padding-bottom:4px;margin-top:28px}
code,pre{font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace}
.break-site{border-left:5px solid #c62828;background:#fdecea;padding:6px 10px;margin:6px 0}
.break-site .reason{font-weight:600;color:#8e1b1b}
.kind{font-size:11px;background:#c62828;color:#fff;border-radius:3px;padding:0 5px}
.hint{color:#555;font-style:italic}
.recompile{border-left:5px solid #e08a00;background:#fff4e0;padding:6px 10px;margin:6px 0}
code.guard{background:#ffe2b0;padding:1px 3px} code.new{background:#ffd0d0;padding:1px 3px}
.small{font-size:12px;color:#5b6474} .none{color:#5b6474;font-style:italic}
table.index{border-collapse:collapse;background:#fff}
table.index td,table.index th{border:1px solid #d5dbe3;padding:3px 8px;text-align:left}
.compile-links a{margin-right:6px}
.result-compiled{color:#2e7d32} .result-skipped,.result-error{color:#c62828} .result-cache_limit{color:#e08a00}
svg.timeline{background:#fff;border:1px solid #d5dbe3} svg text{font-size:11px;fill:#1d2330} svg .secs{fill:#5b6474}
.swatch{display:inline-block;width:12px;height:12px;margin:0 4px 0 10px;vertical-align:middle}
section.function{background:#fff;border:1px solid #d5dbe3;border-radius:6px;padding:4px 16px 12px;margin:18px 0}
table.source{border-collapse:collapse;width:100%;font:12.5px/1.5 ui-monospace,Menlo,Consolas,monospace}
table.source td{padding:0 8px;white-space:pre} td.ln{color:#8a93a3;text-align:right;width:40px;user-select:none}
tr.captured td.code{background:#d9f2d9} tr.captured td.ln{background:#b8e3b8}
tr.break td.code{background:#f8d0d0} tr.break td.ln{background:#c62828;color:#fff}
.break-note{color:#c62828;font-weight:600;margin-left:16px;font-family:system-ui,sans-serif}
article.compile{border-top:1px dashed #cfd6e0;margin-top:10px} article.compile h4{margin:8px 0 2px}
pre.graph{background:#f3f5f8;padding:8px;overflow-x:auto} .at{color:#7a8394}
pre.error{background:#fdecea;padding:8px;white-space:pre-wrap}
.focused{outline:3px solid #ffb300;outline-offset:2px}
"""

# Following a link opens the <details> around its target and outlines it.
_JS = """
function pydFocus(){var id=decodeURIComponent(location.hash.slice(1));if(!id)return;
var t=document.getElementById(id);if(!t)return;
for(var e=t;e;e=e.parentElement){if(e.tagName==='DETAILS')e.open=true;}
var old=document.querySelectorAll('.focused');for(var i=0;i<old.length;i++)old[i].classList.remove('focused');
t.classList.add('focused');t.scrollIntoView({block:'center'});}
window.addEventListener('hashchange',pydFocus);window.addEventListener('load',pydFocus);
"""


def render(runs):
    """The page for ``runs`` (from ``load``), as a string."""
    m = _model(runs)
    starts = ", ".join(f'{_e(r["name"])} ({_e(" ".join(r["start"].get("argv", [])))})' for r in runs)
    versions = runs[0]["start"] if runs else {}
    body = (f'<header id="summary"><h1>pydynamo trace report</h1>'
            f'<div class="small" style="color:#cdd8e6">{starts} &middot; Python {_e(versions.get("python", "?"))}, '
            f'torch {_e(versions.get("torch", "?"))}</div>{_summary(m)}</header>'
            '<nav class="toc"><a href="#breaks">Graph breaks</a><a href="#recompiles">Recompiles</a>'
            '<a href="#index">Frames and compiles</a><a href="#timeline">Timeline</a>'
            '<a href="#functions">Source</a></nav><main>'
            f'<h2 id="breaks">Graph breaks</h2>{_breaks_section(m)}'
            f'<h2 id="recompiles">Recompiles</h2>{_recompiles_section(m)}'
            f'<h2 id="index">Frames and compiles</h2>{_index(m)}'
            f'<h2 id="timeline">Timeline of compile time</h2>{_timeline(m)}'
            f'<h2 id="functions">Source, graphs and guards</h2>'
            '<p class="small"><span class="swatch" style="background:#d9f2d9"></span>captured into a graph '
            '<span class="swatch" style="background:#f8d0d0"></span>graph break</p>'
            f'{_functions(m)}</main>')
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>pydynamo trace report</title>'
            f'<style>{_CSS}</style></head><body>{body}<script>{_JS}</script></body></html>')


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pydynamo.report",
                                     description="Render a pydynamo trace (PYDYNAMO_TRACE_DIR) as an HTML page.")
    parser.add_argument("trace", help="the trace directory (or one of its .jsonl files)")
    parser.add_argument("-o", "--output", help="where to write the page (default: TRACE/report.html)")
    args = parser.parse_args(argv)
    runs = load(args.trace)
    if not runs:
        print(f"no pydynamo trace in {args.trace}", file=sys.stderr)
        return 1
    out = args.output or os.path.join(args.trace if os.path.isdir(args.trace) else os.path.dirname(args.trace),
                                      "report.html")
    with open(out, "w", encoding="utf-8") as f:
        f.write(render(runs))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
