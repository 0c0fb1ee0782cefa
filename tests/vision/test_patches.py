"""PatchEmbedding against torch's Conv2d(stride=P) + flatten, float64, plus finite differences."""
import numpy as np
import pytest

from npformer.nn.patches import PatchEmbedding, image_to_patches, patches_to_image
from oracles import require

torch = require("torch")

RTOL = 1e-9


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def torch_patch_embed(x, weight, bias, cls, pos):
    """The reference: NCHW conv with stride P, flatten to tokens, [CLS] in front, positions added."""
    y = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), weight, bias, stride=weight.shape[-1])  # (B, E, H/P, W/P)
    y = y.flatten(2).transpose(1, 2)                                                    # (B, N, E)
    if cls is not None:
        y = torch.cat([cls.expand(y.shape[0], 1, -1), y], dim=1)
    return y + pos


@pytest.mark.parametrize("cls_token,positional", [(True, "learned"), (False, "learned"),
                                                  (True, "sinusoidal"), (False, "none")])
def test_patch_embedding_matches_conv2d(cls_token, positional):
    rng = np.random.default_rng(0)
    B, H, W, C, P, E = 3, 8, 12, 3, 4, 8
    pe = PatchEmbedding((H, W), P, C, E, cls_token=cls_token, positional=positional, rng=rng).astype(np.float64)
    pe.eval()
    assert pe.params["weight"].shape == (E, C, P, P) and pe.params["bias"].shape == (E,)
    if positional == "learned":   # non-trivial positions so their gradient is tested
        pe.params["pos_embed"][...] = rng.standard_normal(pe.params["pos_embed"].shape)
    x = rng.standard_normal((B, H, W, C))
    z, cache = pe.forward(x)
    assert z.shape == (B, (H // P) * (W // P) + int(cls_token), E)

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in pe.state_dict().items()}
    xt = torch.tensor(x, requires_grad=True)
    pos = tp["pos_embed"] if positional == "learned" else torch.tensor(pe.positions(np.float64))
    zt = torch_patch_embed(xt, tp["weight"], tp["bias"], tp.get("cls_token"), pos)
    assert rel_err(z, zt.detach()) < RTOL

    dz = rng.standard_normal(z.shape)
    (zt * torch.tensor(dz)).sum().backward()
    dx, grads = pe.backward(dz, cache)
    assert rel_err(dx, xt.grad) < RTOL
    assert set(grads) == set(tp)
    for k, g in grads.items():
        assert g.shape == tp[k].shape, k
        assert rel_err(g, tp[k].grad) < RTOL, (k, rel_err(g, tp[k].grad))


def test_patch_embedding_finite_differences():
    rng = np.random.default_rng(1)
    pe = PatchEmbedding(4, 2, 2, 4, cls_token=True, positional="learned", rng=rng).astype(np.float64)
    x = rng.standard_normal((2, 4, 4, 2))
    dz = rng.standard_normal((2, 5, 4))

    def f():
        return float((pe.forward(x)[0] * dz).sum())

    _, cache = pe.forward(x)
    dx, grads = pe.backward(dz, cache)
    h = 1e-6
    for k, p in pe.state_dict().items():
        for idx in [tuple(rng.integers(0, n) for n in p.shape) for _ in range(4)]:
            old = p[idx]
            p[idx] = old + h
            up = f()
            p[idx] = old - h
            down = f()
            p[idx] = old
            assert abs((up - down) / (2 * h) - grads[k][idx]) < 1e-7, k
    for idx in [tuple(rng.integers(0, n) for n in x.shape) for _ in range(6)]:
        old = x[idx]
        x[idx] = old + h
        up = f()
        x[idx] = old - h
        down = f()
        x[idx] = old
        assert abs((up - down) / (2 * h) - dx[idx]) < 1e-7


def test_patches_round_trip_and_bad_shapes():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 6, 9, 3))
    assert np.array_equal(patches_to_image(image_to_patches(x, 3), 6, 9, 3, 3), x)
    # patch n is the P x P block at grid (n // cols, n % cols), flattened channel-first
    p = image_to_patches(x, 3)
    assert np.array_equal(p[1, 4], x[1, 3:6, 3:6, :].transpose(2, 0, 1).ravel())
    with pytest.raises(ValueError, match="divisible by patch_size"):
        PatchEmbedding(7, 2, 1, 8)
    with pytest.raises(ValueError, match="images must have shape"):
        PatchEmbedding(8, 2, 1, 8).forward(np.zeros((1, 8, 8), np.float32))
