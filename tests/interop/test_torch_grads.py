"""npformer's own backward on from_torch'd modules against torch autograd (float64): every
parameter gradient by key, and the input gradients, with the masks a torch user would pass."""
import numpy as np
import pytest

from oracles import require

torch = require("torch")

from torch_cases import causal, perturb  # noqa: E402

import npformer  # noqa: E402
from npformer.interop.conventions import attention_masks  # noqa: E402
from npformer.interop.torch import _key_to_torch  # noqa: E402

RTOL = 1e-8
pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched")


def rel_err(a, b) -> float:
    a = np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def check_param_grads(grads: dict, np_mod, t_mod):
    assert set(grads) == set(np_mod.state_dict())
    t_params = dict(t_mod.named_parameters())
    assert {_key_to_torch(k) for k in grads} == set(t_params)
    for k, g in grads.items():
        assert rel_err(g, t_params[_key_to_torch(k)].grad) < RTOL, k


@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
def test_encoder_layer_backward_matches_autograd(norm_first, activation):
    torch.manual_seed(0)
    t_mod = perturb(torch.nn.TransformerEncoderLayer(8, 2, 16, activation=activation, batch_first=True,
                                                     norm_first=norm_first, dtype=torch.float64), 0)
    np_mod = npformer.from_torch(t_mod)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 8))
    kpm = np.zeros((3, 5), dtype=bool)
    kpm[1, 3:] = True                                                   # torch: True = padding
    src_mask = causal(5, torch.float64).numpy()                         # float, -inf above the diagonal
    mask, bias = attention_masks(src_mask, kpm, batch=3, n_heads=2, t_q=5, t_k=5, dtype=np.float64,
                                 names=("src_mask", "src_key_padding_mask"))
    y, cache = np_mod.forward(x, mask=mask, bias=bias)
    np.testing.assert_allclose(y, np_mod(x, src_mask=src_mask, src_key_padding_mask=kpm), atol=1e-14)

    xt = torch.tensor(x, requires_grad=True)
    yt = t_mod(xt, src_mask=torch.tensor(src_mask), src_key_padding_mask=torch.tensor(kpm))
    assert rel_err(y, yt) < 1e-12
    dy = rng.standard_normal(y.shape)
    (yt * torch.tensor(dy)).sum().backward()
    dx, grads = np_mod.backward(dy, cache)
    assert rel_err(dx, xt.grad) < RTOL
    check_param_grads(grads, np_mod, t_mod)


def test_transformer_backward_matches_autograd():
    torch.manual_seed(1)
    t_mod = perturb(torch.nn.Transformer(8, 2, 2, 2, 16, activation="gelu", batch_first=True,
                                         norm_first=True, dtype=torch.float64), 1)
    stack = npformer.from_torch(t_mod)
    rng = np.random.default_rng(1)
    src, tgt = rng.standard_normal((2, 6, 8)), rng.standard_normal((2, 4, 8))
    skpm = np.zeros((2, 6), dtype=bool)
    skpm[0, 4:] = True
    tmask = np.triu(np.ones((4, 4), dtype=bool), 1)                     # bool causal, torch's convention
    src_m, _ = attention_masks(None, skpm, batch=2, n_heads=2, t_q=6, t_k=6, dtype=np.float64)
    mem_m, _ = attention_masks(None, skpm, batch=2, n_heads=2, t_q=4, t_k=6, dtype=np.float64)
    y, cache = stack.forward(src, tgt, src_mask=src_m, memory_mask=mem_m, causal=True)
    np.testing.assert_allclose(y, stack(src, tgt, tgt_mask=tmask, src_key_padding_mask=skpm,
                                        memory_key_padding_mask=skpm), atol=1e-14)

    st, tt = torch.tensor(src, requires_grad=True), torch.tensor(tgt, requires_grad=True)
    yt = t_mod(st, tt, tgt_mask=torch.tensor(tmask), src_key_padding_mask=torch.tensor(skpm),
               memory_key_padding_mask=torch.tensor(skpm))
    assert rel_err(y, yt) < 1e-12
    dy = rng.standard_normal(y.shape)
    (yt * torch.tensor(dy)).sum().backward()
    dinputs, grads = stack.backward(dy, cache)
    assert rel_err(dinputs["src"], st.grad) < RTOL and rel_err(dinputs["tgt"], tt.grad) < RTOL
    check_param_grads(grads, stack, t_mod)
