"""Hugging Face transformers models built from small configs with random weights (nothing downloaded).

Each entry is ``name -> (make, inputs, kind)``:
  make()              the model (eval mode unless the kind trains)
  inputs(model, dev)  ``(args, kwargs)`` for one call; built fresh per call (a KV cache is mutated)
  kind                "forward" (inference), "train" (forward with labels; the caller runs
                      ``loss.backward()``) or "decode" (one decode step after an eager prefill)

Shared by tools/bench_real.py, tools/bench_overhead.py --module, tools/bench_models.py and the tests.
"""
import inspect

import torch

SEQ = 16

def _ids(vocab=1000, batch=2, seq=SEQ):
    def inputs(model, d):
        g = torch.Generator().manual_seed(1)
        return (torch.randint(0, vocab, (batch, seq), generator=g).to(d),), {}
    return inputs

def _configs():
    import transformers as tr
    dec = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_attention_heads=4,
               num_key_value_heads=2, num_hidden_layers=2, max_position_embeddings=128)
    return {
        "bert": lambda: tr.BertConfig(num_hidden_layers=2, vocab_size=1000, hidden_size=64, num_attention_heads=4,
                                      intermediate_size=128),
        "roberta": lambda: tr.RobertaConfig(num_hidden_layers=2, vocab_size=1000, hidden_size=64,
                                            num_attention_heads=4, intermediate_size=128),
        "distilbert": lambda: tr.DistilBertConfig(n_layers=2, vocab_size=1000, dim=64, n_heads=4, hidden_dim=128),
        "gpt2": lambda: tr.GPT2Config(n_layer=2, vocab_size=1000, n_embd=64, n_head=4, n_positions=128,
                                      bos_token_id=0, eos_token_id=0),
        "t5": lambda: tr.T5Config(num_layers=2, num_decoder_layers=2, vocab_size=1000, d_model=64, d_kv=16,
                                  d_ff=128, num_heads=4),
        "bart": lambda: tr.BartConfig(encoder_layers=2, decoder_layers=2, vocab_size=1000, d_model=64,
                                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                      decoder_ffn_dim=128, max_position_embeddings=128),
        "llama": lambda: tr.LlamaConfig(**dec),
        "mistral": lambda: tr.MistralConfig(**dec),
        "qwen2": lambda: tr.Qwen2Config(**dec),
        "vit": lambda: tr.ViTConfig(image_size=32, patch_size=8, num_hidden_layers=2, hidden_size=64,
                                    num_attention_heads=4, intermediate_size=128),
        "clip": lambda: tr.CLIPConfig(
            text_config=dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=64,
                             bos_token_id=0, eos_token_id=2, pad_token_id=1),
            vision_config=dict(image_size=32, patch_size=8, hidden_size=64, intermediate_size=128,
                               num_hidden_layers=2, num_attention_heads=4),
            projection_dim=32),
        "whisper": lambda: tr.WhisperConfig(vocab_size=1000, num_mel_bins=16, encoder_layers=2, decoder_layers=2,
                                            encoder_attention_heads=4, decoder_attention_heads=4, d_model=64,
                                            encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=32,
                                            max_target_positions=64, pad_token_id=0, bos_token_id=1,
                                            eos_token_id=2, decoder_start_token_id=1),
        "wav2vec2": lambda: tr.Wav2Vec2Config(vocab_size=32, hidden_size=64, num_hidden_layers=2,
                                              num_attention_heads=4, intermediate_size=128,
                                              conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
                                              num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                              do_stable_layer_norm=True, feat_extract_norm="layer"),
    }

def _seq2seq(model, d):
    g = torch.Generator().manual_seed(1)
    return (torch.randint(3, 1000, (2, SEQ), generator=g).to(d),), \
        {"decoder_input_ids": torch.randint(3, 1000, (2, 8), generator=g).to(d)}

def _pixels(model, d):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(2, 3, 32, 32, generator=g).to(d),), {}

def _clip(model, d):
    g = torch.Generator().manual_seed(1)
    return (), {"input_ids": torch.randint(0, 1000, (2, SEQ), generator=g).to(d),
                "pixel_values": torch.randn(2, 3, 32, 32, generator=g).to(d)}

def _whisper(model, d):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(2, 16, 64, generator=g).to(d),), \
        {"decoder_input_ids": torch.randint(3, 1000, (2, 8), generator=g).to(d)}

def _audio(model, d):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(2, 1600, generator=g).to(d),), {}

def _train_inputs(model, d):
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, 1000, (2, SEQ), generator=g).to(d),), {"labels": torch.tensor([0, 1], device=d)}

def _decode_inputs(model, d):
    """A prefill run eagerly fills a fresh KV cache; the call is one decode step against it."""
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 1000, (2, SEQ), generator=g).to(d)
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
    nxt = out.logits[:, -1:].argmax(-1)
    cache = getattr(out, "cache", None) or out.past_key_values
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return (), {"input_ids": nxt, key: cache, "use_cache": True}

def models():
    """name -> (make, inputs, kind), in the order of issue 18's list."""
    import transformers as tr
    cfg = _configs()

    def plain(cls, key):
        return lambda: getattr(tr, cls)(cfg[key]()).eval()
    table = {
        "bert": (plain("BertModel", "bert"), _ids(), "forward"),
        "roberta": (plain("RobertaModel", "roberta"), _ids(), "forward"),
        "distilbert": (plain("DistilBertModel", "distilbert"), _ids(), "forward"),
        "gpt2": (plain("GPT2Model", "gpt2"), _ids(), "forward"),
        "t5": (plain("T5Model", "t5"), _seq2seq, "forward"),
        "bart": (plain("BartModel", "bart"), _seq2seq, "forward"),
        "llama": (plain("LlamaModel", "llama"), _ids(), "forward"),
        "mistral": (plain("MistralModel", "mistral"), _ids(), "forward"),
        "qwen2": (plain("Qwen2Model", "qwen2"), _ids(), "forward"),
        "vit": (plain("ViTModel", "vit"), _pixels, "forward"),
        "clip": (plain("CLIPModel", "clip"), _clip, "forward"),
        "whisper": (plain("WhisperModel", "whisper"), _whisper, "forward"),
        "wav2vec2": (plain("Wav2Vec2Model", "wav2vec2"), _audio, "forward"),
    }

    def bert_cls():
        c = cfg["bert"]()
        c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0  # deterministic, comparable to eager
        c.num_labels = 2
        return tr.BertForSequenceClassification(c).train()
    table["bert_train"] = (bert_cls, _train_inputs, "train")
    table["llama_decode"] = (lambda: tr.LlamaForCausalLM(cfg["llama"]()).eval(), _decode_inputs, "decode")
    return table

def tensors_of(out):
    """Every tensor in a model's output, in a fixed order (ModelOutput, tuples, dicts, caches)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in tensors_of(o)]
    layers = getattr(out, "layers", None)  # a transformers Cache
    if isinstance(layers, list):
        return [t for layer in layers for t in tensors_of([getattr(layer, "keys", None), getattr(layer, "values", None)])]
    return []

def max_diff(a, b):
    ta, tb = tensors_of(a), tensors_of(b)
    if len(ta) != len(tb) or not ta:
        return float("inf")
    return max(((x.float() - y.float()).abs().max().item() if x.shape == y.shape else float("inf"))
               for x, y in zip(ta, tb))
