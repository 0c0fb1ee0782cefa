"""The same models built from torch parts (float64, dropout off), loaded with npformer's
weights key by key, and the helpers the model tests share."""
import math

import numpy as np
import torch
from torch import nn

RTOL = 1e-8


def rel_err(a, b) -> float:
    """max |a - b| / max |b| over one tensor."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def torch_key(k: str) -> str:
    """npformer keeps the FFN under ``ffn.``; torch's layers hold linear1/linear2 directly."""
    return k.replace(".ffn.linear", ".linear")


def sinusoid_table(max_len: int, d: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), written out anew for the reference."""
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    for i in range(0, d, 2):
        pe[:, i] = torch.sin(pos[:, 0] / 10000 ** (i / d))
        if i + 1 < d:
            pe[:, i + 1] = torch.cos(pos[:, 0] / 10000 ** (i / d))
    return pe


class TorchEmbeddings(nn.Module):
    def __init__(self, vocab, d, max_len, positional):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.positional, self.scale = positional, math.sqrt(d)
        if positional == "learned":
            self.pos = nn.Embedding(max_len, d)
        else:
            self.register_buffer("pe", sinusoid_table(max_len, d), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        p = self.pos.weight[:t] if self.positional == "learned" else self.pe[:t]
        out = self.tok(ids) * self.scale + p
        out.retain_grad()
        return out


def _norm(final, d, eps):
    return nn.LayerNorm(d, eps=eps) if final else None


def _enc(n, d, h, ff, act, norm_first, final, eps):
    layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, activation=act, batch_first=True,
                                       norm_first=norm_first, layer_norm_eps=eps)
    return nn.TransformerEncoder(layer, n, norm=_norm(final, d, eps), enable_nested_tensor=False)


class TorchSeq2Seq(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        final = c.use_final_norm
        if c.share_embeddings:
            self.embed = TorchEmbeddings(c.src_vocab_size, c.d_model, c.max_len, c.positional)
            self.names = ("embed", "embed")
        else:
            self.src_embed = TorchEmbeddings(c.src_vocab_size, c.d_model, c.max_len, c.positional)
            self.tgt_embed = TorchEmbeddings(c.tgt_vocab_size, c.d_model, c.max_len, c.positional)
            self.names = ("src_embed", "tgt_embed")
        self.encoder = _enc(c.n_encoder_layers, c.d_model, c.n_heads, c.d_ff, c.activation, c.norm_first,
                            final, c.eps)
        dec_layer = nn.TransformerDecoderLayer(c.d_model, c.n_heads, c.d_ff, dropout=0.0, activation=c.activation,
                                               batch_first=True, norm_first=c.norm_first, layer_norm_eps=c.eps)
        self.decoder = nn.TransformerDecoder(dec_layer, c.n_decoder_layers, norm=_norm(final, c.d_model, c.eps))
        if not c.tie_output:
            self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)

    @property
    def src(self):
        return getattr(self, self.names[0])

    @property
    def tgt(self):
        return getattr(self, self.names[1])

    def forward(self, src, tgt):
        pad = self.c.pad_id
        x = self.src(src)
        memory = self.encoder(x, src_key_padding_mask=src == pad)
        memory.retain_grad()
        y = self.tgt(tgt)
        t = tgt.shape[1]
        future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)   # True = may NOT attend
        h = self.decoder(y, memory, tgt_mask=future, tgt_key_padding_mask=tgt == pad,
                         memory_key_padding_mask=src == pad)
        logits = h @ self.tgt.tok.weight.T if self.c.tie_output else self.generator(h)
        return logits, {"src_embeddings": x, "tgt_embeddings": y, "memory": memory}


class TorchLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = TorchEmbeddings(c.vocab_size, c.d_model, c.max_len, c.positional)
        self.blocks = _enc(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.activation, c.norm_first,
                           c.use_final_norm, c.eps)
        if not c.tie_output:
            self.generator = nn.Linear(c.d_model, c.vocab_size)

    def forward(self, ids):
        x = self.embed(ids)
        t = ids.shape[1]
        future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        pad = None if self.c.pad_id < 0 else ids == self.c.pad_id
        h = self.blocks(x, mask=future, src_key_padding_mask=pad)
        logits = h @ self.embed.tok.weight.T if self.c.tie_output else self.generator(h)
        return logits, {"embeddings": x}


class TorchClassifier(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = TorchEmbeddings(c.vocab_size, c.d_model, c.max_len, c.positional)
        self.encoder = _enc(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.activation, c.norm_first,
                            c.use_final_norm, c.eps)
        self.head = nn.Linear(c.d_model, c.n_classes)

    def forward(self, ids):
        x = self.embed(ids)
        pad = ids == self.c.pad_id
        h = self.encoder(x, src_key_padding_mask=pad)
        if self.c.head == "tagging":
            pooled = h
        elif self.c.pool == "cls":
            pooled = h[:, 0]
        else:
            real = (~pad).to(h.dtype)[:, :, None]
            pooled = (h * real).sum(1) / real.sum(1)
        return self.head(pooled), {"embeddings": x}


def load_into_torch(np_model, t_model):
    state = {torch_key(k): torch.tensor(v) for k, v in np_model.state_dict().items()}
    t_model.load_state_dict(state, strict=True)


def compare_grads(grads, np_model, t_model, dinputs=None, t_inputs=None):
    """Every parameter gradient key by key (and the input gradients) at RTOL; returns the worst."""
    params = np_model.state_dict()
    assert set(grads) == set(params), "one gradient per parameter, nothing else"
    t_params = dict(t_model.named_parameters())
    assert set(t_params) == {torch_key(k) for k in params}
    worst = 0.0
    for k, g in grads.items():
        tg = t_params[torch_key(k)].grad.numpy()
        assert g.shape == params[k].shape == tg.shape, k
        assert g.dtype == params[k].dtype, k
        e = rel_err(g, tg)
        assert e <= RTOL, f"{k}: relative error {e:.2e}"
        worst = max(worst, e)
    for name, d in (dinputs or {}).items():
        e = rel_err(d, t_inputs[name].grad.numpy())
        assert e <= RTOL, f"d{name}: relative error {e:.2e}"
    return worst


def finite_difference_check(loss_fn, model, grads, picks, h=1e-5):
    """Central differences of loss_fn() for a few (key, index) entries against grads."""
    params = model.state_dict()
    for key, idx in picks:
        p = params[key]
        old = p[idx]
        p[idx] = old + h
        up = loss_fn()
        p[idx] = old - h
        down = loss_fn()
        p[idx] = old
        fd = (up - down) / (2 * h)
        g = grads[key][idx]
        assert abs(fd - g) <= 1e-6 * abs(g) + 1e-9, f"{key}{idx}: finite difference {fd:.10e} vs backward {g:.10e}"


def padded_ids(rng, b, t, vocab, pad, min_len=1, anywhere=False):
    """(B, T) ids in [0, vocab) minus pad. Right padding at random lengths; with ``anywhere``,
    padding also lands inside the sequence (position 0 stays real)."""
    ids = rng.integers(0, vocab - 1, (b, t))
    if pad >= 0:
        ids = np.where(ids >= pad, ids + 1, ids)          # skip the pad id
        lengths = rng.integers(min_len, t + 1, b)
        ids[np.arange(t)[None, :] >= lengths[:, None]] = pad
        if anywhere:
            holes = rng.random((b, t)) < 0.25
            holes[:, 0] = False
            ids[holes] = pad
    return ids
