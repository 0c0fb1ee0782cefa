"""Shared builders for the interop tests: random torch modules and torch-convention masks."""
import numpy as np
import torch
import torch.nn.functional as F

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
ACTIVATIONS = ["relu", "gelu", F.relu, F.gelu]


def random_config(seed: int) -> dict:
    """A small random configuration; even seeds float32, odd seeds float64."""
    r = np.random.default_rng(seed)
    h = int(r.choice([1, 2, 4]))
    return dict(d_model=h * int(r.choice([2, 4, 6])), nhead=h, dim_feedforward=int(r.choice([8, 20, 32])),
                n_layers=int(r.integers(1, 3)), norm_first=bool(r.integers(2)),
                activation=ACTIVATIONS[int(r.integers(4))], final_norm=bool(r.integers(2)),
                eps=float(r.choice([1e-5, 1e-6])), dtype=(torch.float32, torch.float64)[seed % 2])


def perturb(module, seed: int):
    """torch initialises LayerNorm to (1, 0) and attention biases to 0: move every parameter
    off those values so that a wrongly mapped key cannot go unnoticed. Eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module.eval()


def layer_kwargs(cfg: dict) -> dict:
    return dict(d_model=cfg["d_model"], nhead=cfg["nhead"], dim_feedforward=cfg["dim_feedforward"],
                activation=cfg["activation"], layer_norm_eps=cfg["eps"], batch_first=True,
                norm_first=cfg["norm_first"], dtype=cfg["dtype"])


def make_torch(kind: str, cfg: dict, seed: int):
    """A perturbed torch module of the given kind, built from ``cfg``."""
    torch.manual_seed(seed)
    nn = torch.nn
    e, dt = cfg["d_model"], cfg["dtype"]
    norm = (lambda: nn.LayerNorm(e, eps=cfg["eps"], dtype=dt)) if cfg["final_norm"] else (lambda: None)
    if kind == "mha":
        m = nn.MultiheadAttention(e, cfg["nhead"], batch_first=True, dtype=dt)
    elif kind == "encoder_layer":
        m = nn.TransformerEncoderLayer(**layer_kwargs(cfg))
    elif kind == "decoder_layer":
        m = nn.TransformerDecoderLayer(**layer_kwargs(cfg))
    elif kind == "encoder":
        m = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer_kwargs(cfg)), cfg["n_layers"], norm(),
                                  enable_nested_tensor=False)
    elif kind == "decoder":
        m = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer_kwargs(cfg)), cfg["n_layers"], norm())
    elif kind == "transformer":
        kw = layer_kwargs(cfg)
        m = nn.Transformer(kw.pop("d_model"), kw.pop("nhead"), cfg["n_layers"], 3 - cfg["n_layers"], **kw)
        if not cfg["final_norm"]:                   # torch's default has both final norms; drop them
            m.encoder.norm, m.decoder.norm = None, None
    else:
        raise ValueError(kind)
    return perturb(m, seed)


def masks(kind: str, b: int, h: int, t_q: int, t_k: int, dtype, rng: np.random.Generator, *,
          three_d: bool = False, batched: bool = True):
    """torch-convention (attn_mask, key_padding_mask) as torch tensors.

    kind: none | bool | float | mixed (bool attn, float padding) | mixed2 (float attn, bool padding).
    Key 0 is never masked, so no query loses every key (torch gives NaN there, npformer zeros).
    """
    if kind == "none":
        return None, None
    lengths = rng.integers(1, t_k + 1, size=b)
    pad = np.arange(t_k)[None, :] >= lengths[:, None]                   # (B, Tk) True = padding
    lead = (b * h if batched else h,) if three_d else ()
    forbid = rng.random(lead + (t_q, t_k)) < 0.3                        # True = not allowed
    forbid[..., 0] = False

    def as_float(forbidden):
        f = rng.standard_normal(forbidden.shape)
        return torch.tensor(np.where(forbidden, -np.inf, f), dtype=dtype)

    attn_bool = kind in ("bool", "mixed")
    kpm_bool = kind in ("bool", "mixed2")
    attn = torch.tensor(forbid) if attn_bool else as_float(forbid)
    kpm = torch.tensor(pad) if kpm_bool else as_float(pad)
    if not batched:
        kpm = kpm[0]
    return attn, kpm


def causal(t: int, dtype, s: int | None = None):
    """torch's float causal mask (0 / -inf), (T, S)."""
    s = t if s is None else s
    return torch.triu(torch.full((t, s), float("-inf"), dtype=dtype), diagonal=1)


def np_or_none(x):
    return None if x is None else x.numpy()


def max_diff(a, b) -> float:
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a - b).max())
