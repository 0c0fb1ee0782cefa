"""The decoder-only LM and the encoder classifier/tagger against the same models built from
torch parts, float64: loss and every parameter gradient key by key, plus finite differences."""
import numpy as np
import pytest

from oracles import require

torch = require("torch")

from models_reference import (  # noqa: E402
    RTOL,
    TorchClassifier,
    TorchLM,
    compare_grads,
    finite_difference_check,
    load_into_torch,
    padded_ids,
    rel_err,
)

from npformer.models import DecoderLM, DecoderLMConfig, EncoderClassifier, EncoderClassifierConfig  # noqa: E402
from npformer.models.transformer import sequence_loss  # noqa: E402
from random_params import randomize  # noqa: E402

F = torch.nn.functional

LM_CASES = {
    "pre_ln_tied_learned_gelu": dict(),
    "post_ln_untied_sinusoidal_relu_padded": dict(norm_first=False, tie_output=False, positional="sinusoidal",
                                                  activation="relu", pad_id=0, label_smoothing=0.1),
}


@pytest.mark.parametrize("name", list(LM_CASES))
def test_lm_matches_torch(name):
    opts = dict(LM_CASES[name])
    ls = opts.pop("label_smoothing", 0.0)
    cfg = DecoderLMConfig(vocab_size=31, d_model=16, n_heads=2, d_ff=24, n_layers=2, max_len=10, **opts)
    rng = np.random.default_rng(3)
    model = DecoderLM(cfg, rng=rng).astype(np.float64).eval()
    randomize(model, rng)
    ids = padded_ids(rng, 3, 10, cfg.vocab_size, cfg.pad_id)
    ids_in, ids_out = ids[:, :-1], ids[:, 1:].copy()
    if cfg.pad_id < 0:
        ids_out[0, 2:] = -1                                   # -1 marks targets to skip when there is no pad id
    ids_out[:, 0] = rng.integers(1, cfg.vocab_size, 3)

    ref = TorchLM(cfg).double()
    load_into_torch(model, ref)
    logits, cache = model.forward(ids_in)
    loss, grads = model.loss(ids_in, ids_out, label_smoothing=ls)
    _, dlogits = sequence_loss(logits, ids_out, cfg.pad_id, ls)
    dinputs, _ = model.backward(dlogits, cache)

    t_logits, t_inputs = ref(torch.tensor(ids_in))
    t_loss = F.cross_entropy(t_logits.reshape(-1, cfg.vocab_size), torch.tensor(ids_out).reshape(-1),
                             ignore_index=cfg.pad_id, label_smoothing=ls)
    t_loss.backward()
    assert rel_err(logits, t_logits.detach()) <= 1e-10
    assert rel_err(loss, t_loss.item()) <= RTOL
    compare_grads(grads, model, ref, dinputs, t_inputs)
    att = model.attention_weights(cache)
    assert len(att) == 2 and np.all(np.triu(att[0]["self"][0, 0], 1) == 0)

    picks = [("embed.tok.weight", (int(ids_in[0, 1]), 2)), ("blocks.layers.1.self_attn.in_proj_weight", (9, 4)),
             ("blocks.layers.0.ffn.linear2.bias", (3,))]
    finite_difference_check(lambda: model.loss(ids_in, ids_out, label_smoothing=ls)[0], model, grads, picks)


CLS_CASES = {
    "classification_cls_post_ln": dict(head="classification", pool="cls"),
    "classification_mean_pre_ln": dict(head="classification", pool="mean", norm_first=True,
                                       positional="sinusoidal", activation="relu", label_smoothing=0.1),
    "tagging_post_ln_final_norm": dict(head="tagging", final_norm=True, pad_id=2),
}


@pytest.mark.parametrize("name", list(CLS_CASES))
def test_classifier_matches_torch(name):
    opts = dict(CLS_CASES[name])
    ls = opts.pop("label_smoothing", 0.0)
    cfg = EncoderClassifierConfig(vocab_size=25, n_classes=5, d_model=12, n_heads=3, d_ff=20, n_layers=2,
                                  max_len=16, **opts)
    rng = np.random.default_rng(4)
    model = EncoderClassifier(cfg, rng=rng).astype(np.float64).eval()
    randomize(model, rng)
    b, t = 4, 8
    ids = padded_ids(rng, b, t, cfg.vocab_size, cfg.pad_id, anywhere=True)
    tagging = cfg.head == "tagging"
    labels = rng.integers(0, cfg.n_classes, (b, t) if tagging else (b,))
    if tagging:
        labels[1, 0] = -100                                   # an explicitly skipped label

    ref = TorchClassifier(cfg).double()
    load_into_torch(model, ref)
    logits, cache = model.forward(ids)
    loss, grads = model.loss(ids, labels, label_smoothing=ls)
    t_logits, t_inputs = ref(torch.tensor(ids))
    t_labels = torch.tensor(np.where(ids == cfg.pad_id, -100, labels) if tagging else labels)
    t_loss = F.cross_entropy(t_logits.reshape(-1, cfg.n_classes), t_labels.reshape(-1), ignore_index=-100,
                             label_smoothing=ls)
    t_loss.backward()
    assert logits.shape == ((b, t, cfg.n_classes) if tagging else (b, cfg.n_classes))
    assert rel_err(logits, t_logits.detach()) <= 1e-10
    assert rel_err(loss, t_loss.item()) <= RTOL
    masked = np.where(ids == cfg.pad_id, -100, labels) if tagging else labels
    _, dlogits = sequence_loss(logits, masked, -100, ls)
    dinputs, _ = model.backward(dlogits, cache)
    compare_grads(grads, model, ref, dinputs, t_inputs)

    picks = [("embed.tok.weight", (int(ids[2, 0]), 1)), ("encoder.layers.0.self_attn.in_proj_bias", (7,)),
             ("head.weight", (1, 3))]
    finite_difference_check(lambda: model.loss(ids, labels, label_smoothing=ls)[0], model, grads, picks)
