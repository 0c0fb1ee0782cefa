"""from_torch / to_torch round trips with random configs, called with torch's arguments and masks:
outputs match torch to 1e-5 (float32) and 1e-10 (float64) max abs difference."""
import warnings

import numpy as np
import pytest

from oracles import require

torch = require("torch")

from torch_cases import TOL, causal, make_torch, masks, max_diff, np_or_none, random_config  # noqa: E402

import npformer  # noqa: E402
from npformer.interop import TorchCall, torch_style  # noqa: E402
from npformer.nn import Decoder, DecoderLayer, Encoder, EncoderLayer, MultiHeadAttention  # noqa: E402
from npformer.nn.transformer import TransformerStack  # noqa: E402

KINDS = ["mha", "encoder_layer", "decoder_layer", "encoder", "decoder", "transformer"]
MASK_KINDS = ["none", "bool", "float", "mixed", "mixed2"]
SEEDS = range(6)

pytestmark = [pytest.mark.filterwarnings("ignore:Support for mismatched"),
              pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")]


def _as_np(kw: dict) -> dict:
    return {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


class Args:
    """The torch-style arguments one seed chooses: inputs, masks of a kind, causal flags."""

    def __init__(self, seed: int, cfg: dict) -> None:
        self.seed, self.e, self.h, self.dt = seed, cfg["d_model"], cfg["nhead"], cfg["dtype"]
        self.rng = np.random.default_rng(100 + seed)
        self.mask_kind = MASK_KINDS[seed % 5]
        self.three_d, self.batched, self.is_causal = seed in (1, 3), seed != 4, seed in (2, 5)
        self.b, self.t, self.s = 3, 5, 6

    def x(self, *shape):
        return torch.tensor(self.rng.standard_normal(shape if self.batched else shape[1:]), dtype=self.dt)

    def m(self, t_q, t_k):
        return masks(self.mask_kind, self.b, self.h, t_q, t_k, self.dt, self.rng, three_d=self.three_d,
                     batched=self.batched)

    def cmask(self, t_q, t_k):
        c = causal(t_q, self.dt, t_k)
        return c if self.mask_kind in ("float", "mixed2") else torch.isinf(c)   # float or bool causal mask


def mha_call(a: Args, t_mod, np_mod):
    b, t, s, e = a.b, a.t, a.s, a.e
    mode = ("self", "cross", "distinct")[a.seed % 3]
    q = a.x(b, t, e)
    k = q if mode == "self" else a.x(b, s, e)
    v = k if mode != "distinct" else a.x(b, k.shape[-2], e)
    attn, kpm = a.m(t, k.shape[-2])
    if a.is_causal and mode == "self":
        attn = a.cmask(t, t)
    kw = dict(need_weights=a.seed % 4 != 1, average_attn_weights=a.seed % 2 == 0,
              is_causal=bool(a.is_causal and mode == "self"))
    ref = t_mod(q, k, v, key_padding_mask=kpm, attn_mask=attn, **kw)
    qn = q.numpy()
    kn = qn if mode == "self" else k.numpy()
    vn = kn if mode != "distinct" else v.numpy()        # same objects as torch got: self-/cross-attention
    got = np_mod(qn, kn, vn, key_padding_mask=np_or_none(kpm), attn_mask=np_or_none(attn), **kw)
    out = [("out", ref[0], got[0])]
    if kw["need_weights"]:
        out.append(("weights", ref[1], got[1]))
    else:
        assert ref[1] is None and got[1] is None
    return out


def encoder_args(a: Args, kind: str):
    src = a.x(a.b, a.s, a.e)
    attn, kpm = a.m(a.s, a.s)
    if a.is_causal:
        attn = a.cmask(a.s, a.s)
    mask_name = "src_mask" if kind == "encoder_layer" else "mask"
    return (src,), {mask_name: attn, "src_key_padding_mask": kpm, "is_causal": bool(a.is_causal)}


def decoder_args(a: Args, kind: str):
    b, t, s, e = a.b, a.t, a.s, a.e
    tgt, mem = a.x(b, t, e), a.x(b, s, e)
    tm, tkpm = a.m(t, t)
    mm, mkpm = a.m(t, s)
    mem_causal = a.seed == 5
    if a.is_causal:
        tm = a.cmask(t, t)
    if mem_causal:
        mm = a.cmask(t, s)
    return (tgt, mem), dict(tgt_mask=tm, memory_mask=mm, tgt_key_padding_mask=tkpm, memory_key_padding_mask=mkpm,
                            tgt_is_causal=bool(a.is_causal), memory_is_causal=mem_causal)


def transformer_args(a: Args, kind: str):
    b, t, s, e = a.b, a.t, a.s, a.e
    src, tgt = a.x(b, s, e), a.x(b, t, e)
    sm, skpm = a.m(s, s)
    tm, tkpm = a.m(t, t)
    mm, _ = a.m(t, s)
    if a.is_causal:
        tm = a.cmask(t, t)
    return (src, tgt), dict(src_mask=sm, tgt_mask=tm, memory_mask=mm, src_key_padding_mask=skpm,
                            tgt_key_padding_mask=tkpm, memory_key_padding_mask=skpm,
                            tgt_is_causal=True if a.is_causal else None)


ARGS = {"encoder_layer": encoder_args, "encoder": encoder_args, "decoder_layer": decoder_args,
        "decoder": decoder_args, "transformer": transformer_args}


def torch_and_np_call(kind: str, t_mod, np_mod, seed: int, cfg: dict):
    """Run the torch module and the npformer module on the same torch-style arguments
    (chosen by ``seed``). Returns a list of (name, torch output, npformer output)."""
    a = Args(seed, cfg)
    if kind == "mha":
        return mha_call(a, t_mod, np_mod)
    inputs, kw = ARGS[kind](a, kind)
    ref = t_mod(*inputs, **kw)
    got = np_mod(*(i.numpy() for i in inputs), **_as_np(kw))
    return [("out", ref, got)]


EXPECTED_TYPE = {"mha": MultiHeadAttention, "encoder_layer": EncoderLayer, "decoder_layer": DecoderLayer,
                 "encoder": Encoder, "decoder": Decoder, "transformer": TransformerStack}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_from_torch_matches_torch_and_round_trips(kind, seed):
    cfg = random_config(seed)
    t_mod = make_torch(kind, cfg, seed)
    np_mod = npformer.from_torch(t_mod)
    assert isinstance(np_mod, TorchCall) and isinstance(np_mod.module, EXPECTED_TYPE[kind]) and not np_mod.training
    assert np_mod.dtype == {torch.float32: np.float32, torch.float64: np.float64}[cfg["dtype"]]
    tol = TOL[cfg["dtype"]]
    for name, ref, got in torch_and_np_call(kind, t_mod, np_mod, seed, cfg):
        assert got.dtype == np_mod.dtype, name
        assert max_diff(ref, got) < tol, (name, max_diff(ref, got), cfg)

    # back to torch: the very same state dict, and the same outputs
    t_back = npformer.to_torch(np_mod)
    assert type(t_back) is type(t_mod) and not t_back.training
    sd, sd_back = t_mod.state_dict(), t_back.state_dict()
    assert list(sd) == list(sd_back)
    for k in sd:
        assert sd[k].dtype == sd_back[k].dtype and torch.equal(sd[k], sd_back[k]), k
    for (name, ref, _), (_, ref_back, _) in zip(torch_and_np_call(kind, t_mod, np_mod, seed, cfg),
                                                torch_and_np_call(kind, t_back, np_mod, seed, cfg), strict=True):
        assert max_diff(ref, ref_back) < tol, name


def native_module(kind: str, seed: int):
    """An npformer-made module (npformer's own init), perturbed like the torch ones, in its torch-style call."""
    cfg = random_config(seed + 50)
    dtype = {torch.float32: np.float32, torch.float64: np.float64}[cfg["dtype"]]
    act = cfg["activation"] if isinstance(cfg["activation"], str) else cfg["activation"].__name__
    rng = np.random.default_rng(seed)
    e, h, f, n = cfg["d_model"], cfg["nhead"], cfg["dim_feedforward"], cfg["n_layers"]
    common = dict(dropout=0.1, activation=act, norm_first=cfg["norm_first"], eps=cfg["eps"], rng=rng, dtype=dtype)
    if kind == "mha":
        mod = MultiHeadAttention(e, h, dropout=0.1, rng=rng, dtype=dtype)
    elif kind == "encoder_layer":
        mod = EncoderLayer(e, h, f, **common)
    elif kind == "decoder_layer":
        mod = DecoderLayer(e, h, f, **common)
    elif kind == "encoder":
        mod = Encoder(n, e, h, f, final_norm=cfg["final_norm"], **common)
    elif kind == "decoder":
        mod = Decoder(n, e, h, f, final_norm=cfg["final_norm"], **common)
    else:
        mod = TransformerStack(e, h, n, 3 - n, f, final_norm=cfg["final_norm"], **common)
    for v in mod.state_dict().values():
        v += (0.2 * rng.standard_normal(v.shape)).astype(dtype)
    return torch_style(mod.eval()), cfg


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
def test_to_torch_of_npformer_made_module(kind, seed):
    np_mod, cfg = native_module(kind, seed)
    t_mod = npformer.to_torch(np_mod)
    tol = TOL[cfg["dtype"]]
    for name, ref, got in torch_and_np_call(kind, t_mod, np_mod, seed + 2, cfg):
        assert max_diff(ref, got) < tol, (name, max_diff(ref, got))
    again = npformer.from_torch(t_mod)
    for k, v in np_mod.state_dict().items():
        assert np.array_equal(again.state_dict()[k], v), k
    # dropout rates and eps travel too (they matter once the torch copy trains)
    assert t_mod.training is False
    if kind != "mha":
        first = t_mod if "layer" in kind else (t_mod.layers[0] if kind != "transformer" else t_mod.encoder.layers[0])
        assert first.dropout1.p == 0.1 and first.norm1.eps == cfg["eps"]


def test_to_torch_encoder_keeps_padded_positions_under_no_grad():
    """torch's nested-tensor fast path zeroes padded positions in eval/no_grad; to_torch turns it off,
    so the torch copy gives npformer's numbers everywhere."""
    np_mod, cfg = native_module("encoder", 3)
    np_mod = np_mod.astype(np.float32)
    t_mod = npformer.to_torch(np_mod)
    rng = np.random.default_rng(0)
    src = rng.standard_normal((2, 5, cfg["d_model"])).astype(np.float32)
    kpm = np.zeros((2, 5), dtype=bool)
    kpm[0, 3:] = True
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = t_mod(torch.tensor(src), src_key_padding_mask=torch.tensor(kpm))
    assert max_diff(ref, np_mod(src, src_key_padding_mask=kpm)) < 1e-5
