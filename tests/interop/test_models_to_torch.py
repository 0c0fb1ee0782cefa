"""to_torch of the full models (Transformer, DecoderLM, EncoderClassifier): the torch twin gives
the same logits, trains with the same gradients, and comes back with from_torch."""
import warnings

import numpy as np
import pytest

import npformer
from npformer import models
from npformer.interop.torch import _key_to_torch
from oracles import require

torch = require("torch")

from models_reference import RTOL, TorchSeq2Seq, compare_grads, load_into_torch, rel_err, torch_key  # noqa: E402

TOL = {np.float32: 1e-5, np.float64: 1e-10}
SMALL = dict(d_model=16, n_heads=2, d_ff=24, max_len=12)

TRANSFORMERS = [
    dict(),                                                                 # paper: shared + tied, sinusoidal, post-LN
    dict(share_embeddings=False, tgt_vocab_size=23, tie_output=False, positional="learned"),
    dict(share_embeddings=False, tgt_vocab_size=23, tie_output=True, norm_first=True, activation="gelu"),
    dict(n_encoder_layers=0, final_norm=True, pad_id=3),
]
LMS = [dict(), dict(pad_id=0, tie_output=False, positional="sinusoidal", norm_first=False, activation="relu"),
       dict(norm_first=True, activation="gelu_tanh", scale_embeddings=False)]      # GPT-2's choices
CLASSIFIERS = [dict(), dict(pool="mean", norm_first=True), dict(head="tagging", pad_id=-1, positional="sinusoidal")]


def perturbed(model, seed):
    rng = np.random.default_rng(seed)
    for v in model.state_dict().values():
        v += (0.1 * rng.standard_normal(v.shape)).astype(v.dtype)
    return model.eval()


def ids(rng, b, t, vocab, pad_id):
    """Random ids in [pad_id+1 or 0, vocab) with padding at the end of some rows (never at 0)."""
    x = rng.integers(max(pad_id, 0) + 1 if pad_id >= 0 else 0, vocab, size=(b, t))
    if pad_id >= 0:
        for row, n in zip(x, rng.integers(1, t + 1, size=b), strict=True):
            row[n:] = pad_id
    return x


def check_same_state(np_model, t_model):
    sd = t_model.state_dict()
    assert set(sd) == {_key_to_torch(k) for k in np_model.state_dict()}
    for k, v in np_model.state_dict().items():
        assert np.array_equal(sd[_key_to_torch(k)].numpy(), v), k


def logits_match(np_logits, t_logits, dtype):
    t_logits = t_logits.detach().numpy()
    assert t_logits.dtype == np_logits.dtype
    assert np.abs(t_logits - np_logits).max() < TOL[dtype], np.abs(t_logits - np_logits).max()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("i", range(len(TRANSFORMERS)))
def test_transformer_to_torch(i, dtype):
    cfg = models.TransformerConfig(**{**SMALL, "src_vocab_size": 23, "tgt_vocab_size": 23, "n_encoder_layers": 2,
                                      "n_decoder_layers": 2, **TRANSFORMERS[i]})
    model = perturbed(models.Transformer(cfg, rng=i, dtype=dtype), i)
    twin = npformer.to_torch(model)
    assert not twin.training
    check_same_state(model, twin)
    rng = np.random.default_rng(i)
    src, tgt = ids(rng, 3, 7, cfg.src_vocab_size, cfg.pad_id), ids(rng, 3, 5, cfg.tgt_vocab_size, cfg.pad_id)
    logits, _ = model.forward(src, tgt)
    logits_match(logits, twin(torch.tensor(src), torch.tensor(tgt)), dtype)
    with torch.no_grad(), warnings.catch_warnings():                       # torch's inference fast paths too
        warnings.simplefilter("ignore")
        logits_match(logits, twin(torch.tensor(src), torch.tensor(tgt)), dtype)
    back = npformer.from_torch(twin)
    assert type(back) is models.Transformer and back.config == cfg
    check_same_state(back, twin)


@pytest.mark.parametrize("i", range(len(LMS)))
def test_decoder_lm_to_torch(i):
    cfg = models.DecoderLMConfig(vocab_size=19, n_layers=2, **{**SMALL, **LMS[i]})
    model = perturbed(models.DecoderLM(cfg, rng=i, dtype=np.float64), i)
    twin = npformer.to_torch(model)
    check_same_state(model, twin)
    x = ids(np.random.default_rng(i), 3, 9, cfg.vocab_size, cfg.pad_id)
    logits_match(model.forward(x)[0], twin(torch.tensor(x)), np.float64)
    with pytest.raises(ValueError, match="longer than max_len 12"):
        twin(torch.zeros(1, 13, dtype=torch.long))


@pytest.mark.parametrize("i", range(len(CLASSIFIERS)))
def test_encoder_classifier_to_torch(i):
    cfg = models.EncoderClassifierConfig(vocab_size=19, n_classes=4, n_layers=2, **{**SMALL, **CLASSIFIERS[i]})
    model = perturbed(models.EncoderClassifier(cfg, rng=i, dtype=np.float32), i)
    twin = npformer.to_torch(model)
    check_same_state(model, twin)
    x = ids(np.random.default_rng(i), 3, 9, cfg.vocab_size, cfg.pad_id)
    logits_match(model.forward(x)[0], twin(torch.tensor(x)), np.float32)


def test_training_step_in_torch_matches_npformer_gradients():
    """The twin trains like the model: the same loss and every parameter gradient by key (tied and
    shared embeddings accumulate in one tensor), as the model built independently from torch parts
    in tests/models/models_reference.py computes them. That reference, not the twin, is what
    npformer's gradients are checked against: a mistake shared by the model and its twin shows."""
    cfg = models.TransformerConfig(src_vocab_size=23, tgt_vocab_size=23, n_encoder_layers=2, n_decoder_layers=2,
                                   **SMALL)
    model = perturbed(models.Transformer(cfg, rng=7, dtype=np.float64), 7)
    twin = npformer.to_torch(model)
    ref = TorchSeq2Seq(cfg).double()
    load_into_torch(model, ref)
    rng = np.random.default_rng(7)
    src, tgt = ids(rng, 3, 7, 23, cfg.pad_id), ids(rng, 3, 6, 23, cfg.pad_id)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    tgt_out[:, 0] = np.where(tgt_out[:, 0] == cfg.pad_id, 5, tgt_out[:, 0])   # at least one scored token per row
    loss, grads = model.loss(src, tgt_in, tgt_out)

    def torch_loss(logits):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 23), torch.tensor(tgt_out).reshape(-1),
                                                 ignore_index=cfg.pad_id)
    t_loss = torch_loss(twin(torch.tensor(src), torch.tensor(tgt_in)))
    ref_loss = torch_loss(ref(torch.tensor(src), torch.tensor(tgt_in))[0])
    t_loss.backward()
    ref_loss.backward()
    assert abs(loss - ref_loss.item()) < 1e-12 and abs(t_loss.item() - ref_loss.item()) < 1e-12
    compare_grads(grads, model, ref)                                        # npformer vs the reference
    params, ref_params = dict(twin.named_parameters()), dict(ref.named_parameters())
    assert {_key_to_torch(k) for k in grads} == set(params)
    for k in grads:                                                         # the twin vs the reference
        tg, rg = params[_key_to_torch(k)].grad.numpy(), ref_params[torch_key(k)].grad.numpy()
        assert rel_err(tg, rg) <= RTOL, (k, rel_err(tg, rg))

    # one optimizer step in torch, then back to npformer with the new weights
    with torch.no_grad():
        for p in twin.parameters():
            p -= 0.1 * p.grad
    back = npformer.from_torch(twin)
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(back.state_dict()[k], v - 0.1 * grads[k], rtol=0, atol=1e-12)


def test_to_torch_rejects_other_objects():
    with pytest.raises(TypeError, match="to_torch accepts .* got builtins.str"):
        npformer.to_torch("model")
