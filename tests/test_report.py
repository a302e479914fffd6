"""The structured trace (pydynamo.debug) and its HTML report (pydynamo.report).

A small model with one graph break and one recompile runs as a user would run it, with
PYDYNAMO_TRACE_DIR set; `python -m pydynamo.report` renders the trace. The JSON lines and the
page are checked, and the page is loaded in headless Chromium (skipped where none is installed).

``python tests/test_report.py`` regenerates docs/report-screenshot.png.
"""
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

import pytest
import torch

import pydynamo
from pydynamo import _C, config, convert_frame, debug

MODEL = '''\
import torch
import pydynamo


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, scale):
        h = torch.relu(self.lin(x)) * scale
        if h.sum() > 0:  # a branch on a tensor's value: graph break
            h = h + 1
        return h.softmax(-1)


torch.manual_seed(0)
model = pydynamo.compile(Net(), backend="eager")
x = torch.randn(4, 8)
for scale in (1, 1, 1, 2, 2):  # the new scale fails a guard: one recompile
    model(x, scale)
'''
BREAK_LINE = 12  # `if h.sum() > 0:`
FIRST_LINE = 10  # `def forward`


def _run_traced_model(directory):
    """The model run with PYDYNAMO_TRACE_DIR, then `python -m pydynamo.report`: the user's way."""
    (directory / "model.py").write_text(MODEL)
    env = dict(os.environ, PYDYNAMO_TRACE_DIR=str(directory / "trace"))
    env.pop("PYDYNAMO_LOGS", None)
    subprocess.run([sys.executable, "model.py"], cwd=directory, env=env, check=True, timeout=300)
    out = subprocess.run([sys.executable, "-m", "pydynamo.report", "trace"], cwd=directory, env=env,
                         check=True, timeout=300, capture_output=True, text=True)
    return directory / out.stdout.strip()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    directory = tmp_path_factory.mktemp("report")
    page = _run_traced_model(directory)
    files = glob.glob(str(directory / "trace" / "*.jsonl"))
    assert len(files) == 1, files  # the report's own process compiled nothing and left no file
    events = [json.loads(line) for line in open(files[0])]
    return directory, events, page


def _compiles(events, function="Net.forward"):
    return [e for e in events if e["event"] == "compile" and e["function"] == function]


# ---- the trace ---------------------------------------------------------------------------------

def test_trace_frames_and_breaks(traced):
    directory, events, _ = traced
    assert events[0]["event"] == "start" and events[-1]["event"] == "counters"
    frame = next(e for e in events if e["event"] == "frame" and e["function"] == "Net.forward")
    assert frame["file"] == str(directory / "model.py") and frame["line"] == FIRST_LINE
    assert frame["source_line"] == FIRST_LINE and frame["source"][0].strip() == "def forward(self, x, scale):"
    first, again = _compiles(events)
    assert first["compile_id"] == "0/0" and again["compile_id"] == "0/1"
    assert first["result"] == again["result"] == "compiled"
    (brk,) = first["breaks"]
    assert brk["line"] == BREAK_LINE and brk["kind"] == "DataDependentError" and brk["id"] == "PD101"
    assert "branching on the value of a tensor" in brk["reason"]
    assert brk["user_stack"] == [[str(directory / "model.py"), BREAK_LINE, "forward"]]
    (graph,) = first["graphs"]
    assert graph["lines"] == [11, 12] and "relu" in graph["code"] and graph["ops"] == 5
    assert graph["nodes"]["mul"]["at"].endswith("model.py:11")
    assert "L['scale'] == 1" in first["guards"]
    resume = next(e for e in events if e["event"] == "compile" and e["function"].startswith("resume_in_forward"))
    assert resume["graphs"][0]["lines"] == [13, 14] and resume["breaks"] == []


def test_trace_recompile_reason_and_counters(traced):
    _, events, _ = traced
    first, again = _compiles(events)
    assert first["recompile"] is None
    assert again["recompile"] == [{"guard": "L['scale'] == 1", "failure": "L['scale'] == 1", "old": "1", "new": "2"}]
    for ev in (first, again):
        phases = ev["phases"]
        assert set(phases) == {"tracing", "guards", "backend"}
        assert phases["tracing"] > 0 and phases["guards"] > 0 and phases["backend"] > 0
        assert sum(phases.values()) <= ev["seconds"] + 1e-6
    assert (first["cache_entries"], again["cache_entries"]) == (1, 2)
    assert (first["misses"], again["misses"]) == (1, 2)
    assert again["hits"] == 2  # the 2nd and 3rd call (scale 1) hit the first entry
    counters = {f["function"]: f for f in events[-1]["frames"]}
    forward = counters["Net.forward"]
    assert (forward["hits"], forward["misses"], forward["cache_entries"]) == (3, 2, 2)
    assert events[-1]["hits"] >= 7


def test_trace_context_manager_and_hit_path(tmp_path):
    def f(x, n):
        return x * n

    cf = pydynamo.optimize("eager")(f)
    x = torch.ones(3)
    try:
        with debug.trace(tmp_path / "a") as outer:
            assert debug.tracer is outer and outer in convert_frame.observers
            cf(x, 1)
            with debug.trace(tmp_path / "b") as inner:  # the inner trace gets the events meanwhile
                cf(x, 2)
            assert debug.tracer is outer
            before = _C.debug_counters()["callbacks"]
            for _ in range(50):
                cf(x, 1)
            # hits never call back into Python, traced or not; the C entry counts them
            assert _C.debug_counters()["callbacks"] == before
            assert sorted(e.hits for e in _C.get_cache_entries(f)) == [0, 50]
    finally:
        pydynamo.reset()
    assert debug.tracer is None and outer not in convert_frame.observers
    outer_events = [json.loads(line) for line in open(outer.path)]
    inner_events = [json.loads(line) for line in open(inner.path)]
    assert [e["compile_id"] for e in outer_events if e["event"] == "compile"] == ["0/0"]
    ((recompile,),) = [e["recompile"] for e in inner_events if e["event"] == "compile"]
    assert recompile["guard"] == "L['n'] == 1" and (recompile["old"], recompile["new"]) == ("1", "2")
    assert outer_events[-1]["frames"][0]["hits"] == 50


def test_trace_cache_limit_listed_once(tmp_path, monkeypatch):
    def g(x, n):
        return x + n

    monkeypatch.setattr(config, "cache_size_limit", 1)
    cg = pydynamo.optimize("eager")(g)
    try:
        with debug.trace(tmp_path) as t:
            for n in range(4):
                cg(torch.ones(2), n)
    finally:
        pydynamo.reset()
    events = [json.loads(line) for line in open(t.path)]
    compiles = [e for e in events if e["event"] == "compile"]
    assert [c["result"] for c in compiles] == ["compiled", "cache_limit"]
    assert compiles[1]["recompile"][0]["guard"] == "L['n'] == 0"
    assert events[-1]["frames"][0]["misses"] == 4


# ---- the page ----------------------------------------------------------------------------------

def test_report_html(traced):
    _, _, page = traced
    text = page.read_text()
    assert not re.search(r'(src|href)="(?!#)|url\(|@import', text)  # nothing outside the page
    assert "3 graphs, 2 breaks, 1 recompile," in text and "s compiling" in text
    assert "The worst break: <b>data-dependent control flow: branching on the value of a tensor</b>" in text
    assert f'href="#fn-0-L{BREAK_LINE}">model.py:{BREAK_LINE}</a>' in text
    # the break line is marked in the source, the captured lines highlighted
    assert re.search(rf'<tr id="fn-0-L{BREAK_LINE}" class="captured break">.*?if h.sum\(\) &gt; 0:.*?'
                     r'graph break: data-dependent', text)
    assert '<tr id="fn-0-L13" class="captured">' in text and '<tr id="fn-0-L10" class="">' in text
    # the failing guard with the value it was compiled for and the value now
    assert "guard <code class=\"guard\">L[&#x27;scale&#x27;] == 1</code> failed: was <code>1</code>, " \
           "now <code class=\"new\">2</code>" in text
    assert text.count('<article class="compile"') == 3 and "<svg class=\"timeline\"" in text


def test_report_of_a_run_cut_short(traced, tmp_path):
    """A process that died mid-run: no counters event, its last line cut off."""
    from pydynamo import report
    directory, _, _ = traced
    (src,) = glob.glob(str(directory / "trace" / "*.jsonl"))
    lines = open(src).read().splitlines()
    (tmp_path / "cut.jsonl").write_text("\n".join(lines[:-2] + [lines[-2][:40]]))
    assert report.main([str(tmp_path / "cut.jsonl")]) == 0
    text = (tmp_path / "report.html").read_text()
    assert "2 graphs, 1 break, 0 recompiles," in text and "model.py:12" in text


def _chromium():
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def _browse(page, tmp_path, *args, fragment=""):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium binary")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri() + fragment]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout


def test_report_in_browser_links(traced, tmp_path):
    _, _, page = traced
    dom = _browse(page, tmp_path, "--dump-dom")
    ids = set(re.findall(r'id="([^"]+)"', dom))
    targets = set(re.findall(r'href="#([^"]+)"', dom))
    assert {"summary", "breaks", "recompiles", "index", "timeline", "functions", "c-0-1"} <= ids
    assert targets and targets <= ids  # every link on the page leads somewhere
    assert f"fn-0-L{BREAK_LINE}" in targets
    # following a link: the page's script outlines the target (and opens <details> around it)
    dom = _browse(page, tmp_path, "--dump-dom", fragment="#c-0-1")
    assert re.search(r'<article class="compile focused" id="c-0-1">', dom)
    dom = _browse(page, tmp_path, "--dump-dom", fragment=f"#fn-0-L{BREAK_LINE}")
    assert 'class="captured break focused"' in dom


def _png_pixels(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB/RGBA non-interlaced PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and colour in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    bpp = 4 if colour == 6 else 3
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def screenshot(page, out, tmp_path):
    _browse(page, tmp_path, "--window-size=1280,1800", f"--screenshot={out}")
    return out


def test_report_screenshot(traced, tmp_path):
    _, _, page = traced
    width, height, rows = _png_pixels(screenshot(page, tmp_path / "report.png", tmp_path))
    assert (width, height) == (1280, 1800)
    colours = {}
    for y, row in enumerate(rows):
        for px in set(row):
            colours.setdefault(px, y)  # the first row showing each colour
    # the main sections are drawn, in order: the summary header, the break (red marker), the
    # recompile (orange border), the timeline's bars, the source's captured and break lines
    assert rows[5][5] == (0x1f, 0x3b, 0x5c)
    header = colours[(0x1f, 0x3b, 0x5c)]
    break_box, recompile_box = colours[(0xc6, 0x28, 0x28)], colours[(0xe0, 0x8a, 0x00)]
    timeline, captured = colours[(0x4e, 0x79, 0xa7)], colours[(0xd9, 0xf2, 0xd9)]
    break_line = colours[(0xf8, 0xd0, 0xd0)]
    assert header < break_box < recompile_box < timeline < captured <= break_line < height


if __name__ == "__main__":  # regenerate docs/report-screenshot.png
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        page = _run_traced_model(Path(d))
        out = Path(__file__).resolve().parents[1] / "docs" / "report-screenshot.png"
        _browse(page, Path(d), "--window-size=1280,1800", f"--screenshot={out}")
        print(out)
