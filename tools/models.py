"""Model definitions shared by the model benchmarks and tests: a ResNet-style CNN, a GPT-style
decoder and a BERT-style encoder, written the plain way users write them."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + skip)


class ResNet(nn.Module):
    def __init__(self, widths=(64, 128, 256, 512), blocks=2, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            for b in range(blocks):
                layers.append(BasicBlock(cin, w, 2 if (b == 0 and i > 0) else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


class Attention(nn.Module):
    def __init__(self, dim, heads, causal, dropout=0.0):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(self, x, mask=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.causal:
            att = att.masked_fill(mask[:, :, :t, :t] == 0, float("-inf"))
        elif mask is not None:
            att = att + mask
        att = F.softmax(att, dim=-1)
        att = F.dropout(att, self.dropout, self.training)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class TransformerLayer(nn.Module):
    def __init__(self, dim, heads, causal, pre_norm):
        super().__init__()
        self.pre_norm = pre_norm
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask=None):
        if self.pre_norm:  # GPT
            x = x + self.attn(self.ln1(x), mask)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x, mask))  # BERT
        return self.ln2(x + self.mlp(x))


class GPT(nn.Module):
    def __init__(self, vocab=8192, dim=768, heads=12, layers=12, max_len=1024, checkpoint=False):
        super().__init__()
        self.checkpoint = checkpoint  # activation checkpointing of each block while training
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(TransformerLayer(dim, heads, True, True) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            if self.checkpoint and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, self.mask, use_reentrant=False)
            else:
                x = block(x, self.mask)
        return self.head(self.ln_f(x))


def _softcap(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)


class FlexAttention(Attention):
    """Attention by flex_attention: a causal BlockMask made once for the model's sequence length
    (``FlexGPT.set_length``) and a soft-capping score_mod."""

    block_mask = None

    def forward(self, x, mask=None):
        from torch.nn.attention.flex_attention import flex_attention
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = flex_attention(q, k, v, score_mod=_softcap, block_mask=self.block_mask)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


class FlexGPT(GPT):
    """The GPT decoder with flex_attention in every block."""

    def __init__(self, **kw):
        super().__init__(**kw)
        for block in self.blocks:
            block.attn = FlexAttention(self.tok.embedding_dim, block.attn.heads, True)

    def set_length(self, t, device):
        from torch.nn.attention.flex_attention import create_block_mask
        mask = create_block_mask(_causal, None, None, t, t, device=device)
        for block in self.blocks:
            block.attn.block_mask = mask


class BERT(nn.Module):
    def __init__(self, vocab=8192, dim=768, heads=12, layers=12, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.ln = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(TransformerLayer(dim, heads, False, False) for _ in range(layers))
        self.pool = nn.Linear(dim, dim)

    def forward(self, idx, attention_mask):
        t = idx.shape[1]
        x = self.ln(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return torch.tanh(self.pool(x[:, 0]))


def make(name, size="small", device="cpu"):
    """(model, example inputs) for `name` in resnet, gpt, gpt-ckpt, gpt-flex, bert, hf-gpt2, hf-bert, hf-llama, hf-mistral, tv-resnet50,
    tv-vit, timm-effnet, tv-convnext, tv-swin, tv-mobilenetv3, hf-t5, hf-whisper; size "small"
    for CPU tests, "bench" for GPU benchmarks."""
    small = size == "small"
    g = torch.Generator().manual_seed(0)
    if name == "resnet":
        model = ResNet(widths=(8, 16), blocks=1, classes=10) if small else ResNet()
        inputs = (torch.randn(2 if small else 64, 3, 32 if small else 224, 32 if small else 224, generator=g),)
    elif name in ("gpt", "gpt-ckpt"):  # gpt-ckpt: each block checkpointed while training
        ckpt = name == "gpt-ckpt"
        model = GPT(vocab=64, dim=32, heads=4, layers=2, max_len=16, checkpoint=ckpt) if small else GPT(checkpoint=ckpt)
        b, t = (2, 8) if small else (16, 512)
        inputs = (torch.randint(0, 64 if small else 8192, (b, t), generator=g),)
    elif name == "gpt-flex":  # flex_attention (causal block mask, soft-capping score_mod)
        model = FlexGPT(vocab=64, dim=32, heads=4, layers=2, max_len=16) if small else FlexGPT()
        b, t = (2, 8) if small else (16, 512)
        inputs = (torch.randint(0, 64 if small else 8192, (b, t), generator=g),)
        model = model.to(device)
        model.set_length(t, device)
    elif name == "bert":
        model = BERT(vocab=64, dim=32, heads=4, layers=2, max_len=16) if small else BERT()
        b, t = (2, 8) if small else (32, 256)
        mask = torch.ones(b, t, dtype=torch.long)
        mask[:, t - 2:] = 0
        inputs = (torch.randint(0, 64 if small else 8192, (b, t), generator=g), mask)
    elif name.startswith("hf-"):
        model, inputs = _transformers_model(name[3:], small, g)
    elif name in ("tv-resnet50", "tv-vit", "timm-effnet", "tv-convnext", "tv-swin", "tv-mobilenetv3"):
        model, inputs = _vision_model(name, small, g)
    else:
        raise ValueError(f"unknown model {name!r}")
    return model.to(device), tuple(i.to(device) for i in inputs)


def _vision_model(name, small, g):
    """torchvision ResNet-50 and ViT-B/16, timm EfficientNet-B0 (random weights; batch 64 of
    224 x 224 images for the benchmark, 2 for small). Small keeps the architectures (their ops are
    what matters on the CPU) at a smaller image size where the model allows it."""
    b = 2 if small else 64
    if name == "tv-resnet50":
        import torchvision
        model, hw = torchvision.models.resnet50(), 64 if small else 224
    elif name == "tv-vit":
        import torchvision
        model, hw = torchvision.models.vit_b_16(), 224  # the patch embedding fixes the image size
        # torchvision starts the classifier at zero: every output, and so every gradient of the
        # benchmark's loss, would be 0, and comparing results with eager would check nothing
        torch.nn.init.normal_(model.heads.head.weight, std=0.02, generator=g)
        b = 1 if small else b
    elif name in ("tv-convnext", "tv-swin", "tv-mobilenetv3"):  # ConvNeXt-T, Swin-T, MobileNetV3-L
        import torchvision
        build = {"tv-convnext": torchvision.models.convnext_tiny, "tv-swin": torchvision.models.swin_t,
                 "tv-mobilenetv3": torchvision.models.mobilenet_v3_large}[name]
        model, hw = build(), 64 if small else 224
    else:
        import timm
        model, hw = timm.create_model("efficientnet_b0", pretrained=False), 64 if small else 224
    return model, (torch.randn(b, 3, hw, hw, generator=g),)


class _EncoderDecoder(nn.Module):
    """T5 / Whisper called with positional tensors (the benchmark's ``model(*inputs)``): the
    decoder's last hidden state."""

    def __init__(self, model, source):
        super().__init__()
        self.model, self.source = model, source

    def forward(self, src, decoder_input_ids):
        return self.model(**{self.source: src}, decoder_input_ids=decoder_input_ids).last_hidden_state


def _encoder_decoder(tr, name, small, g):
    """hf-t5 (T5-small's shape; 2 layers each side when small) and hf-whisper (Whisper-base's
    shape; tiny when small) from configs: encoder, then decoder over 64 (small: 8) tokens."""
    b, t = (2, 8) if small else (8, 64)
    if name == "t5":
        cfg = tr.T5Config(vocab_size=8192, d_model=64 if small else 512, d_ff=128 if small else 2048, d_kv=16 if small else 64,
                          num_layers=2 if small else 6, num_heads=4 if small else 8, decoder_start_token_id=0,
                          dropout_rate=0.0)  # (its attention dropout is a float, not a module: results comparable)
        src = torch.randint(0, 8192, (b, 16 if small else 256), generator=g)
        model = _EncoderDecoder(tr.T5Model(cfg), "input_ids")
    else:
        cfg = tr.WhisperConfig(vocab_size=8192, d_model=64 if small else 512, encoder_layers=2 if small else 6,
                               decoder_layers=2 if small else 6, encoder_attention_heads=4 if small else 8,
                               decoder_attention_heads=4 if small else 8, encoder_ffn_dim=128 if small else 2048,
                               decoder_ffn_dim=128 if small else 2048, num_mel_bins=80,
                               max_source_positions=50 if small else 1500, max_target_positions=64 if small else 448,
                               pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
        src = torch.randn(b, 80, 100 if small else 3000, generator=g)
        model = _EncoderDecoder(tr.WhisperModel(cfg), "input_features")
    return model, (src, torch.randint(0, 8192, (b, t), generator=g))


def _transformers_model(name, small, g):
    """hf-gpt2, hf-bert, hf-llama: transformers models from configs (random weights). Small: the
    CPU test sizes of tools/hf_models.py; bench: GPT-2 small's width with 6 layers, BERT-base's
    with 6, a 4-layer LLaMA of width 1024 with grouped KV heads."""
    import transformers as tr
    if name in ("t5", "whisper"):
        return _encoder_decoder(tr, name, small, g)
    if small:
        import hf_models
        make, inputs, _ = hf_models.models()[name]
        model = make()
        return model, inputs(model, "cpu")[0]
    if name == "gpt2":
        model = tr.GPT2Model(tr.GPT2Config(n_layer=6, n_embd=768, n_head=12, vocab_size=8192, n_positions=1024,
                                           bos_token_id=0, eos_token_id=0))
        b, t, vocab = 8, 512, 8192
    elif name == "bert":
        model = tr.BertModel(tr.BertConfig(num_hidden_layers=6, vocab_size=8192), add_pooling_layer=False)
        b, t, vocab = 16, 256, 8192
    elif name == "llama":
        model = tr.LlamaModel(tr.LlamaConfig(num_hidden_layers=4, hidden_size=1024, intermediate_size=2816,
                                             num_attention_heads=16, num_key_value_heads=4, vocab_size=8192,
                                             max_position_embeddings=1024))
        b, t, vocab = 4, 512, 8192
    elif name == "mistral":  # a 4-layer Mistral causal LM (sliding window, grouped KV heads)
        model = tr.MistralForCausalLM(tr.MistralConfig(num_hidden_layers=4, hidden_size=1024, intermediate_size=2816,
                                                       num_attention_heads=16, num_key_value_heads=4, vocab_size=8192,
                                                       max_position_embeddings=1024, sliding_window=256))
        b, t, vocab = 4, 512, 8192
    else:
        raise ValueError(f"unknown model hf-{name!r}")
    return model, (torch.randint(0, vocab, (b, t), generator=g),)
