"""Adam/AdamW against torch.optim in float64; schedules against the paper's formula; clipping
against torch.nn.utils.clip_grad_norm_."""
import itertools
import math

import numpy as np
import pytest

from npformer.train import Adam, AdamW, clip_by_global_norm, cosine_lr, global_norm, make_schedule, noam_lr
from oracles import require

torch = require("torch")


def _params(rng):
    return {"layer.weight": rng.standard_normal((5, 4)), "layer.bias": rng.standard_normal(4),
            "norm.weight": rng.standard_normal(3)}


@pytest.mark.parametrize("kind,wd", [("adam", 0.0), ("adam", 0.1), ("adamw", 0.01), ("adamw", 0.3)])
def test_matches_torch_in_float64(kind, wd):
    # torch.optim.adam.adam / adamw.adamw are the functions torch.optim.Adam.step / AdamW.step run
    # (single-tensor path); calling them directly skips the step() wrapper, whose first call imports
    # torch._dynamo (many seconds on a loaded 2-core machine).
    from torch.optim.adam import adam
    from torch.optim.adamw import adamw
    rng = np.random.default_rng(0)
    params = _params(rng)
    keys = list(params)
    tp = [torch.tensor(params[k].copy()) for k in keys]
    tm = [torch.zeros_like(p) for p in tp]
    tv = [torch.zeros_like(p) for p in tp]
    tsteps = [torch.tensor(0.0) for _ in tp]
    lrs = [1e-3, 3e-3, 5e-2, 2e-2, 1e-2, 7e-3]                         # a varying rate, as a schedule gives
    opt = (Adam if kind == "adam" else AdamW)(params, lr=lrs[0], betas=(0.9, 0.98), eps=1e-9, weight_decay=wd)
    fn = adam if kind == "adam" else adamw
    arrays_before = {k: id(v) for k, v in params.items()}
    for lr in lrs:
        grads = {k: rng.standard_normal(v.shape) for k, v in params.items()}
        fn(tp, [torch.tensor(grads[k]) for k in keys], tm, tv, [], tsteps, foreach=False, amsgrad=False,
           beta1=0.9, beta2=0.98, lr=lr, weight_decay=wd, eps=1e-9, maximize=False)
        opt.step(grads, lr=lr)
        for k, p in zip(keys, tp, strict=True):
            np.testing.assert_allclose(params[k], p.numpy(), rtol=1e-13, atol=1e-14)
    assert {k: id(v) for k, v in params.items()} == arrays_before      # updated in place
    for i, k in enumerate(keys):                                        # the moments too
        np.testing.assert_allclose(opt.m[k], tm[i].numpy(), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(opt.v[k], tv[i].numpy(), rtol=1e-13, atol=1e-15)
        assert int(tsteps[i]) == opt.t == len(lrs)


def test_in_place_on_a_model_and_state_round_trip():
    from npformer.models import Transformer, TransformerConfig
    cfg = TransformerConfig(src_vocab_size=9, tgt_vocab_size=9, d_model=8, n_heads=2, d_ff=16,
                            n_encoder_layers=1, n_decoder_layers=1, dropout=0.0, max_len=8)
    model = Transformer(cfg, rng=0)
    opt = Adam(model.state_dict(), lr=1e-2)
    src = np.array([[4, 5, 6]])
    tgt_in, tgt_out = np.array([[1, 4, 5, 6]]), np.array([[4, 5, 6, 2]])
    loss0, grads = model.loss(src, tgt_in, tgt_out)
    opt.step(grads)
    loss1, _ = model.loss(src, tgt_in, tgt_out)
    assert loss1 < loss0                                                # the model's own arrays moved
    state = {k: v.copy() for k, v in opt.state_dict().items()}
    assert state["step"].dtype == np.int64 and int(state["step"]) == 1
    assert set(state) == {"step"} | {f"exp_avg.{k}" for k in grads} | {f"exp_avg_sq.{k}" for k in grads}
    opt2 = Adam(Transformer(cfg, rng=1).state_dict())
    opt2.load_state_dict(state)
    assert opt2.t == 1 and all(np.array_equal(opt2.m[k], opt.m[k]) for k in grads)
    with pytest.raises(ValueError, match="missing"):
        opt2.load_state_dict({"step": np.array(1)})
    with pytest.raises(ValueError, match="missing"):
        opt.step({})


def test_float32_stays_float32_and_matches_float64():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 3)).astype(np.float32)
    p32, p64 = {"w": w.copy()}, {"w": w.astype(np.float64)}
    opt32, opt64 = AdamW(p32, lr=1e-2, weight_decay=0.1), AdamW(p64, lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        g = rng.standard_normal((3, 3)).astype(np.float32)
        opt32.step({"w": g})
        opt64.step({"w": g.astype(np.float64)})
    assert p32["w"].dtype == np.float32 and opt32.m["w"].dtype == np.float32 and opt32.v["w"].dtype == np.float32
    # the same updates, to float32 rounding (the first steps move each weight by about lr)
    np.testing.assert_allclose(p32["w"], p64["w"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(opt32.v["w"], opt64.v["w"], rtol=1e-5)
    assert np.abs(p64["w"] - w).max() > 1e-2                            # the steps did move the weights


def test_noam_schedule_formula():
    d, w = 512, 4000
    for step in (1, 10, 3999, 4000, 4001, 100000):
        want = d ** -0.5 * min(step ** -0.5, step * w ** -1.5)
        assert noam_lr(step, d, w) == pytest.approx(want, rel=1e-15)
    assert noam_lr(w, d, w) == pytest.approx((d * w) ** -0.5)            # the peak, at warmup
    assert noam_lr(w, d, w) > noam_lr(w - 1, d, w) and noam_lr(w, d, w) > noam_lr(w + 1, d, w)
    assert noam_lr(100, 64, 10, scale=2.0) == pytest.approx(2 * noam_lr(100, 64, 10))
    with pytest.raises(ValueError, match="step counts from 1"):
        noam_lr(0, d, w)


def test_cosine_schedule():
    peak, w, total, floor = 1e-3, 10, 110, 1e-5
    assert cosine_lr(5, peak, w, total, floor) == pytest.approx(peak * 0.5)
    assert cosine_lr(w, peak, w, total, floor) == pytest.approx(peak)
    assert cosine_lr(60, peak, w, total, floor) == pytest.approx(floor + (peak - floor) * 0.5)   # halfway
    assert cosine_lr(total, peak, w, total, floor) == pytest.approx(floor)
    assert cosine_lr(total + 50, peak, w, total, floor) == floor
    lrs = [cosine_lr(s, peak, w, total, floor) for s in range(w, total + 1)]
    assert all(a >= b for a, b in itertools.pairwise(lrs))                   # monotone after warmup
    assert cosine_lr(3, peak, 10, 5) == pytest.approx(peak * 0.3)        # a run shorter than its warmup
    with pytest.raises(ValueError, match="number of steps"):
        make_schedule("cosine", d_model=8, warmup=1, lr=1e-3, lr_scale=1.0, total_steps=None, min_lr=0.0)


@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_matches_torch(max_norm):
    rng = np.random.default_rng(1)
    grads = {"a": rng.standard_normal((4, 5)), "b": rng.standard_normal(7)}
    tp = [torch.zeros(4, 5, dtype=torch.float64, requires_grad=True),
          torch.zeros(7, dtype=torch.float64, requires_grad=True)]
    tp[0].grad, tp[1].grad = torch.tensor(grads["a"]), torch.tensor(grads["b"])
    tnorm = torch.nn.utils.clip_grad_norm_(tp, max_norm)
    norm = clip_by_global_norm(grads, max_norm)
    assert norm == pytest.approx(float(tnorm), rel=1e-14)
    np.testing.assert_allclose(grads["a"], tp[0].grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(grads["b"], tp[1].grad.numpy(), rtol=1e-14)
    assert global_norm(grads) <= max_norm + 1e-9


def test_clip_leaves_non_finite_alone():
    grads = {"a": np.array([1.0, np.nan])}
    assert math.isnan(clip_by_global_norm(grads, 1.0))
    assert grads["a"][0] == 1.0
