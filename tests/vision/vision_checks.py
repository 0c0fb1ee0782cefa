"""Checks the vision models' tests share: relative error, and a model's loss and every parameter gradient
against torch's (float64)."""
import numpy as np

RTOL = 1e-8


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def check_loss_and_grads(torch, model, loss_inputs: tuple, targets, logits_t, tp: dict) -> dict:
    """``model.loss(*loss_inputs, label_smoothing=0.1)`` and every parameter's gradient against torch's
    cross-entropy of logits_t (..., C), computed from the tensors tp, over ``targets``; returns the grads."""
    loss, grads = model.loss(*loss_inputs, label_smoothing=0.1)
    loss_t = torch.nn.functional.cross_entropy(logits_t.reshape(-1, logits_t.shape[-1]),
                                               torch.tensor(targets).reshape(-1), label_smoothing=0.1)
    loss_t.backward()
    assert abs(loss - loss_t.item()) < 1e-12
    assert set(grads) == set(tp)
    for k, g in grads.items():
        assert g.shape == tp[k].shape, k
        assert rel_err(g, tp[k].grad) < RTOL, (k, rel_err(g, tp[k].grad))
    return grads
