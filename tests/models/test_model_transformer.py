"""The encoder-decoder Transformer against the same model built from torch parts, float64:
logits, loss and every parameter gradient key by key, plus finite differences."""
import copy

import numpy as np
import pytest

from oracles import require

torch = require("torch")

from models_reference import (  # noqa: E402
    RTOL,
    TorchSeq2Seq,
    compare_grads,
    finite_difference_check,
    load_into_torch,
    padded_ids,
    rel_err,
)

from npformer.models import Transformer, TransformerConfig  # noqa: E402
from npformer.models.transformer import sequence_loss  # noqa: E402
from npformer.nn import TransformerStack  # noqa: E402
from random_params import randomize  # noqa: E402

SMALL = dict(d_model=16, n_heads=4, d_ff=24, n_encoder_layers=2, n_decoder_layers=2, max_len=12)

CASES = {
    # the paper's layout: post-LN, shared embeddings, tied output, sinusoids, ReLU
    "post_ln_shared_tied_sinusoidal": dict(src_vocab_size=23, tgt_vocab_size=23, label_smoothing=0.1),
    # pre-LN (final norms by default), separate vocabularies, untied generator, learned positions, GELU
    "pre_ln_unshared_untied_learned": dict(src_vocab_size=19, tgt_vocab_size=29, share_embeddings=False,
                                           tie_output=False, norm_first=True, positional="learned",
                                           activation="gelu", pad_id=3),
    # shared embeddings but an untied generator, post-LN with final norms, learned positions
    "post_ln_shared_untied_final_norm": dict(src_vocab_size=23, tgt_vocab_size=23, tie_output=False,
                                             final_norm=True, positional="learned", label_smoothing=0.2),
    # unshared tables with the output tied to the target table, pre-LN without final norms
    "pre_ln_unshared_tied_no_final": dict(src_vocab_size=17, tgt_vocab_size=21, share_embeddings=False,
                                          norm_first=True, final_norm=False),
}


def make_case(name, seed=0):
    opts = dict(CASES[name])
    ls = opts.pop("label_smoothing", 0.0)
    cfg = TransformerConfig(**SMALL, dropout=0.1, **opts)
    rng = np.random.default_rng(seed)
    model = Transformer(cfg, rng=rng).astype(np.float64).eval()    # eval: dropout off
    randomize(model, rng)
    b, s, t = 3, 9, 7
    pad = cfg.pad_id
    src = padded_ids(rng, b, s, cfg.src_vocab_size, pad, anywhere=True)
    tgt_in = padded_ids(rng, b, t, cfg.tgt_vocab_size, pad)
    tgt_out = np.roll(tgt_in, -1, axis=1)
    tgt_out[:, -1] = pad
    tgt_out[tgt_in == pad] = pad
    tgt_out[:, 0] = rng.integers(pad + 1, cfg.tgt_vocab_size, b)   # at least one scored token per row
    return model, cfg, ls, src, tgt_in, tgt_out


@pytest.mark.parametrize("name", list(CASES))
def test_transformer_matches_torch(name):
    model, cfg, ls, src, tgt_in, tgt_out = make_case(name)
    ref = TorchSeq2Seq(cfg).double()
    load_into_torch(model, ref)

    logits, cache = model.forward(src, tgt_in)
    loss, grads = model.loss(src, tgt_in, tgt_out, label_smoothing=ls)
    _, dlogits = sequence_loss(logits, tgt_out, cfg.pad_id, ls)
    dinputs, grads2 = model.backward(dlogits, cache)

    t_logits, t_inputs = ref(torch.tensor(src), torch.tensor(tgt_in))
    t_loss = torch.nn.functional.cross_entropy(t_logits.reshape(-1, t_logits.shape[-1]),
                                               torch.tensor(tgt_out).reshape(-1),
                                               ignore_index=cfg.pad_id, label_smoothing=ls)
    t_loss.backward()
    assert rel_err(logits, t_logits.detach()) <= 1e-10
    assert rel_err(loss, t_loss.item()) <= RTOL
    assert set(dinputs) == {"src_embeddings", "tgt_embeddings", "memory"}
    compare_grads(grads, model, ref, dinputs, t_inputs)
    for k in grads:
        assert np.array_equal(grads[k], grads2[k]), k

    # the attention maps: one dict per layer, rows sum to one where a key is visible
    att = model.attention_weights(cache)
    assert len(att["encoder"]) == 2 and len(att["decoder"]) == 2
    b, s, t = src.shape[0], src.shape[1], tgt_in.shape[1]
    assert att["encoder"][0]["self"].shape == (b, cfg.n_heads, s, s)
    assert att["decoder"][1]["cross"].shape == (b, cfg.n_heads, t, s)
    causal = att["decoder"][0]["self"]
    assert np.all(causal[..., np.triu_indices(t, 1)[0], np.triu_indices(t, 1)[1]] == 0)
    cross = att["decoder"][0]["cross"]                                     # (B, H, T, S)
    assert np.all(cross * (src == cfg.pad_id)[:, None, None, :] == 0)     # padded sources get no weight
    assert np.allclose(cross.sum(-1), 1.0)


@pytest.mark.parametrize("name", ["post_ln_shared_tied_sinusoidal", "pre_ln_unshared_untied_learned"])
def test_transformer_finite_differences(name):
    model, cfg, ls, src, tgt_in, tgt_out = make_case(name, seed=1)
    loss, grads = model.loss(src, tgt_in, tgt_out, label_smoothing=ls)
    tok = f"{'embed' if cfg.share_embeddings else 'tgt_embed'}.tok.weight"
    picks = [(tok, (int(tgt_in[0, 0]), 3)),
             ("encoder.layers.0.self_attn.in_proj_weight", (5, 2)),
             ("decoder.layers.1.multihead_attn.in_proj_weight", (20, 7)),
             ("decoder.layers.0.ffn.linear1.bias", (4,)),
             ("decoder.layers.1.norm3.weight", (6,))]
    finite_difference_check(lambda: model.loss(src, tgt_in, tgt_out, label_smoothing=ls)[0], model, grads, picks)


def test_transformer_dropout_gradients_by_finite_differences():
    """Training mode: the same seed gives the same dropout masks, so the loss is a fixed
    function of the weights and its backward must match central differences."""
    model, cfg, ls, src, tgt_in, tgt_out = make_case("post_ln_shared_tied_sinusoidal", seed=2)
    model.train()

    def loss_fn():
        return model.loss(src, tgt_in, tgt_out, rng=np.random.default_rng(7))[0]

    _, grads = model.loss(src, tgt_in, tgt_out, rng=np.random.default_rng(7))
    eval_loss = model.eval().loss(src, tgt_in, tgt_out)[0]
    model.train()
    assert loss_fn() != eval_loss                      # dropout did something
    finite_difference_check(loss_fn, model, grads, [("embed.tok.weight", (int(src[1, 0]), 1)),
                                                    ("encoder.layers.1.ffn.linear2.weight", (3, 5)),
                                                    ("decoder.layers.0.self_attn.out_proj.bias", (2,))])


def test_float32_stays_float32_and_matches_float64():
    cfg = TransformerConfig(src_vocab_size=11, tgt_vocab_size=11, **SMALL)
    model = randomize(Transformer(cfg, rng=0).eval(), np.random.default_rng(5))
    model64 = copy.deepcopy(model).astype(np.float64)                  # the same (float32) weights
    ids = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    logits, _ = model.forward(ids, ids)
    loss, grads = model.loss(ids, ids, ids, label_smoothing=0.1)
    assert logits.dtype == np.float32
    assert all(g.dtype == np.float32 for g in grads.values())
    # float32 rounding through two layers each way: under 1e-6 relative, normwise (measured 8e-7 at most)
    assert rel_err(logits, model64.forward(ids, ids)[0]) < 1e-5
    loss64, grads64 = model64.loss(ids, ids, ids, label_smoothing=0.1)
    assert abs(loss - loss64) < 1e-5 * loss64
    for k in grads:
        assert rel_err(grads[k], grads64[k]) < 1e-5, (k, rel_err(grads[k], grads64[k]))


def test_encode_decode_equals_forward():
    model, cfg, _, src, tgt_in, _ = make_case("pre_ln_unshared_untied_learned")
    memory, src_mask, _ = model.encode(src)
    logits, _ = model.decode(tgt_in, memory, src_mask)
    full, _ = model.forward(src, tgt_in)
    assert np.array_equal(logits, full)
    assert src_mask.shape == (src.shape[0], 1, 1, src.shape[1]) and src_mask.dtype == bool


def test_the_composition_is_the_transformer_stack():
    """The model runs nn.TransformerStack over its own encoder and decoder: the stack is not a
    child (the state_dict keys stay encoder.*/decoder.*) and it shares the arrays."""
    model, *_ = make_case("pre_ln_unshared_untied_learned")
    stack = model.stack
    assert isinstance(stack, TransformerStack)
    assert stack.encoder is model.encoder and stack.decoder is model.decoder
    params = model.state_dict()
    assert not any(k.startswith("stack") for k in params)
    assert all(params[k] is v for k, v in stack.state_dict().items())
