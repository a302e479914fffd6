"""pydynamo.install(): torch.compile and torch.compiler.* served by pydynamo, for libraries that
call torch.compile themselves (issue 42)."""
import os
import subprocess
import sys
import tempfile

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter, CompiledCodes


def f(x):
    return x.sin() + 1


def test_install_routes_torch_compile_and_the_block_restores_it():
    orig, orig_reset = torch.compile, torch.compiler.reset
    cnt = CompileCounter()
    with pydynamo.install():
        assert pydynamo.installed() and torch.compile is not orig
        g = torch.compile(f, backend=cnt)
        x = torch.randn(3)
        assert torch.equal(g(x), f(x)) and cnt.frame_count == 1
        assert g._pydynamo_orig_fn is f  # pydynamo's wrapper, not torch._dynamo's

        m = torch.nn.Linear(3, 2)
        cm = torch.compile(m, backend=cnt)
        assert isinstance(cm, pydynamo.OptimizedModule) and cm._orig_mod is m
        assert torch.equal(cm(x), m(x)) and cnt.frame_count == 2

        @torch.compile(backend=cnt, fullgraph=True)
        def h(x):
            return x.cos() * 2
        assert torch.equal(h(x), x.cos() * 2) and cnt.frame_count == 3
        assert torch.compile(f, disable=True) is f  # torch.compile's disable=True: the model itself
        assert torch.compiler.reset is not orig_reset
    assert torch.compile is orig and torch.compiler.reset is orig_reset and not pydynamo.installed()


def test_module_compile_and_torch_compiler_functions_go_to_pydynamo():
    cnt = CompileCounter()
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.randn(2, 4)
    with pydynamo.install():
        m.compile(backend=cnt)  # nn.Module.compile calls torch.compile
        assert torch.equal(m(x), m._call_impl(x)) and cnt.frame_count == 1
        torch.compiler.reset()  # pydynamo.reset: the next call compiles again
        m(x)
        assert cnt.frame_count == 2
        g = torch.compile(lambda x: torch.compiler.disable(f)(x) * 2, backend=cnt)
        assert torch.equal(g(x), f(x) * 2)
        with torch.compiler.set_stance("force_eager"):  # pydynamo's stance
            before = cnt.frame_count
            torch.compile(lambda x: x - 1, backend=cnt)(x)
            assert cnt.frame_count == before
        with pytest.raises(pydynamo.exc.Unsupported):
            torch.compile(lambda x: print("", end="") or x + 1, backend=cnt, fullgraph=True)(x)
    m._compiled_call_impl = None


def test_a_fullgraph_break_raises_pydynamos_error_naming_the_line():
    with pydynamo.install():
        @torch.compile(backend="eager", fullgraph=True)
        def g(x):
            print("", end="")
            return x + 1
        with pytest.raises(pydynamo.exc.Unsupported, match="test_dropin.py"):
            g(torch.randn(2))


def test_mode_and_options_reach_the_backend_as_torch_compile_passes_them():
    seen = []

    def backend(gm, example_inputs, **kwargs):
        seen.append(kwargs)
        return gm.forward
    x = torch.randn(3)
    with pydynamo.install():
        torch.compile(f, backend=backend, mode="max-autotune", options={"a": 1})(x)
        with pytest.warns(UserWarning, match="eager backend ignores"):
            assert torch.equal(torch.compile(lambda x: x * 3, backend="eager", mode="reduce-overhead")(x), x * 3)
    assert seen == [{"mode": "max-autotune", "options": {"a": 1}}]


def test_install_is_idempotent_and_a_nested_block_keeps_the_global_install():
    orig = torch.compile
    pydynamo.install()
    try:
        inner = torch.compile
        with pydynamo.install():
            assert torch.compile is inner
        assert torch.compile is inner and pydynamo.installed()
    finally:
        pydynamo.uninstall()
    assert torch.compile is orig


def test_the_environment_variable_installs_at_import():
    code = ("import torch, pydynamo; from pydynamo.testing import CompileCounter; c = CompileCounter(); "
            "g = torch.compile(lambda x: x + 1, backend=c); g(torch.ones(2)); print(pydynamo.installed(), c.frame_count)")
    env = dict(os.environ, PYDYNAMO_TORCH_COMPILE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["True", "1"]


def test_the_environment_variable_alone_installs_it_in_a_new_process():
    """With the variable set, a process that never imports pydynamo itself (a library's script)
    gets torch.compile from pydynamo: the installed .pth imports it at interpreter start."""
    import site
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    if not any(os.path.exists(os.path.join(d, "pydynamo-torch-compile.pth")) for d in dirs):
        pytest.skip("pydynamo was not installed by pip here (no .pth in site-packages)")
    code = "import torch; print(torch.compile.__module__)"
    env = dict(os.environ, PYDYNAMO_TORCH_COMPILE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split()[-1] == "pydynamo.dropin", out.stderr[-2000:]
    env.pop("PYDYNAMO_TORCH_COMPILE")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split()[-1] == "torch"


def test_transformers_trainer_with_torch_compile():
    """Trainer(torch_compile=True) (accelerate calls torch.compile): compiled by pydynamo, the
    losses equal eager training's."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 100, (8,), generator=g), "labels": torch.tensor(i % 2)}

    def train(compiled):
        torch.manual_seed(0)
        model = BertForSequenceClassification(cfg)
        with tempfile.TemporaryDirectory() as out:
            args = TrainingArguments(output_dir=out, per_device_train_batch_size=4, max_steps=3, torch_compile=compiled,
                                     torch_compile_backend="aot_eager" if compiled else None, report_to=[],
                                     logging_steps=1, use_cpu=True, save_strategy="no", disable_tqdm=True)
            trainer = Trainer(model=model, args=args, train_dataset=Data())
            trainer.train()
        return [h["loss"] for h in trainer.state.log_history if "loss" in h], trainer

    ref, _ = train(False)
    pydynamo.reset()
    with pydynamo.install(), CompiledCodes() as codes:
        got, trainer = train(True)
    assert isinstance(trainer.model_wrapped, pydynamo.OptimizedModule) and codes.codes
    assert got == pytest.approx(ref, rel=1e-5)
    pydynamo.reset()


def test_generate_with_a_static_cache_compiles_its_forward():
    """model.generate with cache_implementation="static": transformers compiles the decoding
    forward itself (torch.compile(self.__call__, fullgraph=True, ...)); the tokens equal eager's."""
    pytest.importorskip("transformers")
    from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 5))
    kwargs = dict(max_new_tokens=6, do_sample=False, cache_implementation="static")
    ref = model.generate(ids, **kwargs)
    model.generation_config.compile_config = CompileConfig(backend="eager", fullgraph=True)
    model.generation_config.compile_config._compile_all_devices = True  # CPU too
    pydynamo.reset()
    with pydynamo.install(), CompiledCodes() as codes:
        got = model.generate(ids, **kwargs)
    assert torch.equal(got, ref)
    assert isinstance(getattr(model, "_compiled_call", None), type(f)) and model._compiled_call._pydynamo_orig_fn
    assert codes.codes
    pydynamo.reset()


def test_timm_create_model_and_torch_compile():
    timm = pytest.importorskip("timm")  # (not on the CPU machine: torchvision has no build for its torch)
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    cnt = CompileCounter()
    with pydynamo.install(), torch.no_grad():
        compiled = torch.compile(model, backend=cnt)
        torch.testing.assert_close(compiled(x), model(x))
    assert cnt.frame_count == 1
    pydynamo.reset()
