"""The parent process: spawn() runs a worker (tools/fuzz.py --worker ...) and reads its messages,
killing it when it makes no progress; run_programs() runs program workers until the deadline,
counting a worker that dies as a crash and restarting after the program it died in, and prints
each new kind of finding as it comes; run_all() is the whole run (programs, then soak and
threads) and returns the totals. It never imports torch.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from .generate import gen_program, program_seed

FUZZ_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz.py")  # workers run it


def spawn(part, a, start, deadline, on_msg=lambda m: None):
    """Run a worker to its end, passing each message it sends to on_msg as it comes; returns
    (exit status, its messages, its stderr's tail, why it was killed)."""
    with tempfile.TemporaryDirectory(prefix="pydynamo-fuzz-") as tmp, tempfile.TemporaryFile() as err:
        cmd = [sys.executable, FUZZ_PY, "--worker", part, "--seed", str(a.seed), "--backend",
               a.backend, "--start", str(start), "--deadline", repr(deadline), "--minimize-s", str(a.minimize_s),
               "--tmp", tmp] + ["--self-check"] * a.self_check + (["--only", str(a.only)] if a.only is not None else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        msgs, last = [], [time.time()]

        def read():
            for line in proc.stdout:
                msgs.append(json.loads(line))
                last[0] = time.time()
                on_msg(msgs[-1])
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        grace, killed = 60 + a.minimize_s, None
        while proc.poll() is None:  # a program that makes no progress for `grace` s is a hang
            time.sleep(0.1)
            if time.time() > (last[0] if part == "programs" else deadline) + grace:
                killed = f"killed: no progress for {grace:.0f} s"
                proc.kill()
                proc.wait()
        reader.join()
        err.seek(0)
        return proc.returncode, msgs, err.read().decode(errors="replace")[-3000:], killed


def run_programs(a, deadline, totals):
    """Programs in workers until the deadline; a worker that dies is counted and the next one starts
    after the program it died in. Each new kind of finding is printed as it comes."""
    seen, shown = {}, [time.time()]

    def on_msg(m):
        if "done" not in m:
            return
        for key in ("programs", "calls", "internal"):
            totals[key] += 1 if key == "programs" else m[key]
        if m.get("internal_msg"):
            seen.setdefault("internal:" + m["internal_msg"].split(":")[0],
                            [0, f"{m['internal_msg']} (program {m['done']})"])[0] += 1
        if m.get("cat"):
            totals[m["cat"]] += 1
            entry = seen.setdefault(m["sig"], [0, None])
            entry[0] += 1
            if entry[0] == 1:
                print(m["report"] + "\n", flush=True)
                if a.save:
                    os.makedirs(a.save, exist_ok=True)
                    with open(os.path.join(a.save, f"{m['cat']}_{m['done']}.py"), "w") as f:
                        f.write(f"# {m['sig']}\n" + m["source"])
        if time.time() - shown[0] > 10:
            shown[0] = time.time()
            print(f"[programs] {totals['programs']} programs, {totals['calls']} calls, wrong={totals['wrong']} "
                  f"raised={totals['raised']} crashed={totals['crashed']}", flush=True)

    start = a.only or 0
    while time.time() < deadline:
        rc, msgs, tail, killed = spawn("programs", a, start, deadline, on_msg)
        started = [m["start"] for m in msgs if "start" in m]
        if rc == 0 and not (started and not msgs[-1].get("done") == started[-1]):
            break  # the worker reached the deadline
        if not started:
            raise SystemExit(f"fuzz: worker failed before running a program (exit status {rc}):\n{tail}")
        totals["crashed"] += 1
        print(f"=== CRASHED: program {started[-1]} (seed {a.seed}), worker exit status {rc} {killed or ''} ===\n"
              f"{gen_program(program_seed(a.seed, started[-1])).source()}\n--- worker stderr (tail):\n{tail}\n",
              flush=True)
        if a.only is not None:
            break
        start = started[-1] + 1
    print(f"[programs] {totals['programs']} programs, {totals['calls']} calls, "
          f"{totals['internal']} internal compile errors (those frames ran eagerly)")
    for sig, (count, msg) in sorted(seen.items(), key=lambda kv: -kv[1][0]):
        print(f"  {count:4d} x {sig}" + (f"  e.g. {msg}" if msg else ""))


def run_all(a):
    """The whole run; returns the totals (also printed)."""
    t0 = time.time()
    parts = [p for p, on in (("soak", not a.no_soak), ("threads", not a.no_threads)) if on]
    share = {"soak": 0.15, "threads": 0.15}
    prog_end = t0 + a.budget * (1 - sum(share[p] for p in parts))
    totals = dict(programs=0, calls=0, internal=0, wrong=0, raised=0, crashed=0, threads_wrong=0, soak_findings=0)
    run_programs(a, prog_end, totals)
    if "soak" in parts:
        rc, msgs, tail, killed = spawn("soak", a, 0, time.time() + a.budget * share["soak"])
        if rc or not msgs:
            totals["crashed"] += 1
            print(f"soak: worker died (exit status {rc} {killed or ''})\n{tail}")
        else:
            s = msgs[-1]
            growth, per = (s["rss1"] - s["rss0"]) / s["rss0"] * 100, s["objs"] / max(1, s["measured_cycles"])
            print(f"soak: rss growth {growth:.1f}% ({s['rss0']:.0f} MB -> {s['rss1']:.0f} MB), live objects "
                  f"{s['objs']:+d} ({per:.0f} per cycle over {s['measured_cycles']} compile/reset cycles after "
                  f"{s['cycles'] - s['measured_cycles']} warm-up ones; most grown: "
                  f"{', '.join(f'{k} {v:+d}' for k, v in s['top']) or 'none'})")
            print(f"soak: a compiled model deleted: {s['model']}")
            totals.update(soak=s, soak_growth=growth)
            totals["soak_findings"] = int(s["model"] != "freed") + int(growth > 10) + int(per > 100)
    if "threads" in parts:
        rc, msgs, tail, killed = spawn("threads", a, 0, time.time() + a.budget * share["threads"])
        if rc or not msgs:
            totals["crashed"] += 1
            print(f"threads: worker died (exit status {rc} {killed or ''})\n{tail}")
        else:
            s = msgs[-1]
            totals["threads_wrong"], totals["threads_calls"] = s["wrong"], s["calls"]
            print(f"threads: wrong={s['wrong']} ({s['calls']} calls in 5 threads)" +
                  (f"; first: {s['first']}" if s["first"] else ""))
    print(f"wrong={totals['wrong']} raised={totals['raised']} crashed={totals['crashed']}", flush=True)
    return totals
