"""The sweep of bench_real.py: every model type of transformers' auto mappings (and timm's
architecture families where timm is installed), tiny configs, random weights, beside torch.compile.

    python tools/bench_real.py --sweep [--limit N] [--start K] [--only-kind causal|base|timm]
                               [--shard I/N] [--jsonl FILE] [--model-timeout S] [--names FILE]
    python tools/bench_real.py --sweep --summarize FILE [FILE...]

--shard I/N runs every N-th model from the I-th (one process per core on a large machine); --jsonl
appends each model's row to FILE, and --summarize prints the totals of rows gathered that way (a
model's row in a later file replaces an earlier one); --names FILE runs only the models it lists
(a line ``timm.*``: every name with that prefix).

For each model: pydynamo's and torch.compile's graph and break counts (explain, eager backend),
whether fullgraph=True succeeds for each, and the largest difference from eager. Models that do
not build from a shrunk config, or whose eager call fails, are counted apart (not a result for
either system). The totals at the end are the issue's targets: pydynamo's one-graph count at or
above torch.compile's, and no model run wholly eagerly by pydynamo (0 graphs) where
torch.compile captures something.
"""
import contextlib
import io
import json
import math
import time
import signal
import traceback
import warnings

import torch

import pydynamo

_SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
          "intermediate_size": 64, "vocab_size": 128, "max_position_embeddings": 64, "d_model": 32,
          "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
          "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "n_embd": 32, "n_layer": 2, "n_head": 2, "num_layers": 2,
          "num_heads": 2, "d_ff": 64, "d_kv": 16, "head_dim": 16, "ffn_dim": 64, "embed_dim": 32,
          "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_intermediate_size": 32}


def _shrink(config):
    for key, value in _SMALL.items():
        if hasattr(config, key) and isinstance(getattr(config, key), int):
            setattr(config, key, value)
    for sub in ("text_config", "decoder", "encoder"):
        inner = getattr(config, sub, None)
        if inner is not None and hasattr(inner, "to_dict"):
            _shrink(inner)
    return config


def transformers_models(kind):
    """(name, make, inputs) for every model type of the mapping ``kind`` (causal: causal LMs;
    base: the bare models)."""
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto as ma
    mapping = ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if kind == "causal" else ma.MODEL_MAPPING_NAMES
    auto = __import__("transformers").AutoModelForCausalLM if kind == "causal" else __import__("transformers").AutoModel
    for model_type in sorted(mapping):
        def make(model_type=model_type):
            config = _shrink(AutoConfig.for_model(model_type))
            if hasattr(config, "_attn_implementation"):
                config._attn_implementation = "eager"
            return auto.from_config(config).eval()

        def inputs(model):
            vocab = getattr(model.config, "vocab_size", None) or 128
            ids = torch.randint(0, min(vocab, 128), (1, 8), generator=torch.Generator().manual_seed(0))
            return (ids,), {}
        yield f"{kind}.{model_type}", make, inputs


def timm_models():
    import timm
    families = sorted({name.split("_")[0].rstrip("0123456789") for name in timm.list_models()})
    for family in families:
        names = timm.list_models(f"{family}*")
        if not names:
            continue

        def make(name=names[0]):
            return timm.create_model(name, pretrained=False, num_classes=10).eval()

        def inputs(model):
            size = getattr(model, "default_cfg", {}).get("input_size", (3, 224, 224))
            return (torch.randn(1, *size, generator=torch.Generator().manual_seed(0)),), {}
        yield f"timm.{family}", make, inputs


def _explain(explain, model, args, kwargs):
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = explain(model)(*args, **kwargs)
    return out.graph_count, out.graph_break_count


def _fullgraph(compile_fn, model, args, kwargs):
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return compile_fn(model)(*args, **kwargs), True
    except Exception:  # noqa: BLE001 - any failure: fullgraph did not succeed
        return None, False


def _max_diff(a, b):
    import hf_models
    return hf_models.max_diff(a, b)


def sweep_one(name, make, inputs):
    import torch._dynamo as td  # tools may use it, to compare
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = make()
            args, kwargs = inputs(model)
            with torch.no_grad():
                expected = model(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - not a result for either system
            return {"name": name, "skip": f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"}
    row = {"name": name}
    pydynamo.reset()
    try:
        row["ours"] = _explain(pydynamo.explain, model, args, kwargs)
    except Exception as e:  # noqa: BLE001
        row["ours"] = (0, -1)
        row["ours_error"] = f"{type(e).__name__}: {str(e)[:80]}"
    pydynamo.reset()
    start = time.perf_counter()  # the first call: trace, compile (eager backend) and run
    got, row["ours_full"] = _fullgraph(lambda m: pydynamo.compile(m, backend="eager", fullgraph=True), model,
                                       args, kwargs)
    row["ours_s"] = time.perf_counter() - start
    if got is None:
        pydynamo.reset()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = pydynamo.compile(model, backend="eager")(*args, **kwargs)
    row["err"] = _max_diff(got, expected)
    pydynamo.reset()
    td.reset()
    try:
        row["torch"] = _explain(td.explain, model, args, kwargs)
    except Exception:  # noqa: BLE001
        row["torch"] = (0, -1)
    td.reset()
    start = time.perf_counter()
    _, row["torch_full"] = _fullgraph(lambda m: torch.compile(m, backend="eager", fullgraph=True), model, args, kwargs)
    row["torch_s"] = time.perf_counter() - start
    td.reset()
    return row


class _ModelTimeout(BaseException):  # not caught by the per-system handlers
    pass


def _alarm(signum, frame):
    raise _ModelTimeout()


def _print_row(r):
    name = r["name"]
    if "skip" in r:
        print(f"{name:<34} skipped ({r['skip']})", flush=True)
        return
    if "failed" in r:
        print(f"{name:<34} FAILED: {r['failed']}", flush=True)
        return
    full = ("y" if r["ours_full"] else "n") + "/" + ("y" if r["torch_full"] else "n")
    print(f"{name:<34}{'%d/%d' % tuple(r['ours']):>9}{'%d/%d' % tuple(r['torch']):>10}{full:>6}{r['err']:>10.2e}"
          f"  {r.get('ours_error', '')}", flush=True)


def summarize(rows):
    done = [r for r in rows if "skip" not in r and "failed" not in r]
    failed = [r["name"] for r in rows if "failed" in r]
    ours_one = sum(r["ours"][0] == 1 for r in done)
    torch_one = sum(r["torch"][0] == 1 for r in done)
    eager_only = [r["name"] for r in done if r["ours"][0] == 0 and r["torch"][0] > 0]
    fewer = sum(r["ours"][0] <= r["torch"][0] for r in done if r["torch"][0] > 0)
    more = [r["name"] for r in done if r["torch"][0] > 0 and r["ours"][0] > r["torch"][0]]
    print(f"\n{len(done)} models run ({sum('skip' in r for r in rows)} skipped: no tiny config or eager fails; "
          f"{len(failed)} failed or timed out in the sweep itself: {failed})")
    print(f"one graph: pydynamo {ours_one}, torch.compile {torch_one}")
    print(f"fullgraph ok: pydynamo {sum(r['ours_full'] for r in done)}, torch.compile {sum(r['torch_full'] for r in done)}")
    print(f"graphs at most torch.compile's: {fewer} of {sum(r['torch'][0] > 0 for r in done)}; more: {more}")
    print(f"wholly eager under pydynamo where torch.compile captures: {len(eager_only)} {eager_only}")
    bad = [r["name"] for r in done if r["err"] == r["err"] and r["err"] > 1e-3]
    print(f"differ from eager (max err > 1e-3): {len(bad)} {bad}")
    both = [r for r in done if r["ours_full"] and r["torch_full"] and r.get("torch_s")]
    if both:
        ratios = sorted((r["ours_s"] / r["torch_s"], r["name"]) for r in both)
        geo = math.exp(sum(math.log(q) for q, _ in ratios) / len(ratios))
        over = [f"{n} {q:.2f}" for q, n in ratios if q > 0.5]
        print(f"first call (fullgraph, eager backend) ours/torch.compile on the {len(both)} models both "
              f"capture in one graph: "
              f"geomean {geo:.2f}, median {ratios[len(ratios) // 2][0]:.2f}, max {ratios[-1][0]:.2f} "
              f"({ratios[-1][1]}); above 0.5: {len(over)} {over[:20]}")


def main(a):
    if a.summarize:
        by_name = {}  # a later file's row of a model replaces an earlier one (a rerun)
        for path in a.summarize:
            for line in open(path):
                if line.strip():
                    r = json.loads(line)
                    by_name.pop(r["name"], None)
                    by_name[r["name"]] = r
        rows = list(by_name.values())
        for r in rows:
            _print_row(r)
        return summarize(rows)
    sources = []
    if a.only_kind in ("", "causal"):
        sources.append(transformers_models("causal"))
    if a.only_kind in ("", "base"):
        sources.append(transformers_models("base"))
    if a.only_kind in ("", "timm"):
        try:
            sources.append(timm_models())
        except ImportError as e:
            print(f"skipping timm: {e}")
    models = [m for s in sources for m in s][a.start:]
    if a.limit:
        models = models[:a.limit]
    if a.names:  # only the models named in this file (one per line)
        wanted = {line.strip() for line in open(a.names) if line.strip()}
        prefixes = tuple(w[:-1] for w in wanted if w.endswith("*"))  # "timm.*": every timm family
        models = [m for m in models if m[0] in wanted or m[0].startswith(prefixes or ("\0",))]
    if a.shard:
        index, count = (int(v) for v in a.shard.split("/"))
        models = models[index::count]
    print(f"{'model':<34}{'ours g/b':>9}{'torch g/b':>10}{'full':>6}{'max err':>10}")
    rows = []
    signal.signal(signal.SIGALRM, _alarm)
    for name, make, inputs in models:
        signal.alarm(a.model_timeout)
        try:
            r = sweep_one(name, make, inputs)
        except _ModelTimeout:
            r = {"name": name, "failed": f"timed out after {a.model_timeout} s"}
        except Exception as e:  # noqa: BLE001
            r = {"name": name, "failed": f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"}
            traceback.print_exc(limit=2)
        finally:
            signal.alarm(0)
        rows.append(r)
        _print_row(r)
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(r) + "\n")
    summarize(rows)
