"""ViT: logits, loss and every parameter gradient against a torch reference, key by key, float64."""
import copy

import numpy as np
import pytest
from vision_checks import RTOL, check_loss_and_grads, rel_err

from npformer.models.blocks import sequence_loss
from npformer.models.vit import ViT, ViTConfig
from oracles import require
from random_params import randomize

torch = require("torch")


class TorchViT(torch.nn.Module):
    """The reference, from torch's own Conv2d, TransformerEncoderLayer, LayerNorm and Linear."""

    def __init__(self, c: ViTConfig):
        super().__init__()
        self.c = c
        n_tok = c.n_patches + (c.pool == "cls")
        self.conv = torch.nn.Conv2d(c.in_channels, c.d_model, c.patch_size, stride=c.patch_size)
        self.cls_token = torch.nn.Parameter(torch.randn(1, 1, c.d_model)) if c.pool == "cls" else None
        self.pos_embed = torch.nn.Parameter(torch.randn(1, n_tok, c.d_model))
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.d_ff, dropout=0.0, activation=c.activation,
                                             batch_first=True, norm_first=c.norm_first, layer_norm_eps=c.eps)
            for _ in range(c.n_layers))
        self.norm = torch.nn.LayerNorm(c.d_model, eps=c.eps) if c.norm_first else None
        self.head = torch.nn.Linear(c.d_model, c.n_classes)

    def forward(self, x):
        z = self.conv(x.permute(0, 3, 1, 2)).flatten(2).transpose(1, 2)   # (B, N, E)
        if self.cls_token is not None:
            z = torch.cat([self.cls_token.expand(len(z), 1, -1), z], dim=1)
        z = z + self.pos_embed
        for layer in self.layers:
            z = layer(z)
        if self.norm is not None:
            z = self.norm(z)
        return self.head(z[:, 0] if self.c.pool == "cls" else z.mean(1))

    def named_as_npformer(self):
        """npformer key -> torch parameter."""
        out = {"patch_embed.weight": self.conv.weight, "patch_embed.bias": self.conv.bias,
               "patch_embed.pos_embed": self.pos_embed, "head.weight": self.head.weight, "head.bias": self.head.bias}
        if self.cls_token is not None:
            out["patch_embed.cls_token"] = self.cls_token
        if self.norm is not None:
            out["encoder.norm.weight"], out["encoder.norm.bias"] = self.norm.weight, self.norm.bias
        for i, layer in enumerate(self.layers):
            for k, p in layer.named_parameters():
                k = k.replace("linear1", "ffn.linear1").replace("linear2", "ffn.linear2")
                out[f"encoder.layers.{i}.{k}"] = p
        return out


@pytest.mark.parametrize("norm_first,pool", [(True, "cls"), (False, "mean")])
def test_vit_logits_loss_and_every_gradient(norm_first, pool):
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=4, patch_size=2, in_channels=2, n_classes=5, d_model=8, n_heads=2, d_ff=12,
                    n_layers=2, dropout=0.0, norm_first=norm_first, pool=pool)
    ref = TorchViT(cfg).double()
    with torch.no_grad():   # non-zero biases and LayerNorm affines, so every path is exercised
        for p in ref.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    model = ViT(cfg, rng=0).astype(np.float64).eval()
    tparams = ref.named_as_npformer()
    assert set(tparams) == set(model.state_dict())
    model.load_state_dict({k: p.detach().numpy() for k, p in tparams.items()})

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 4, 2))
    y = np.array([0, 3, 4])
    logits, cache = model.forward(x)
    xt = torch.tensor(x, requires_grad=True)
    logits_t = ref(xt)
    assert rel_err(logits, logits_t.detach()) < RTOL

    grads = check_loss_and_grads(torch, model, (x, y), y, logits_t, tparams)
    # backward(dlogits, cache) -> ({"images"}, grads): the same grads, and the images' gradient
    dinputs, grads2 = model.backward(sequence_loss(logits, y, -100, 0.1)[1], cache)
    assert list(dinputs) == ["images"] and rel_err(dinputs["images"], xt.grad) < RTOL
    assert all(np.array_equal(grads[k], grads2[k]) for k in grads)


def test_vit_attention_weights_and_config_checks(tmp_path):
    cfg = ViTConfig(image_size=8, patch_size=4, d_model=8, n_heads=2, d_ff=8, n_layers=2)
    rng = np.random.default_rng(1)
    model = randomize(ViT(cfg).eval(), rng)
    model64 = copy.deepcopy(model).astype(np.float64)                   # the same (float32) weights
    images = rng.random((2, 8, 8, 1)).astype(np.float32)
    logits, cache = model.forward(images)
    assert logits.dtype == np.float32 and logits.shape == (2, 10)
    att = model.attention_weights(cache)
    assert len(att) == 2 and att[0]["self"].shape == (2, 2, 5, 5)
    logits64, cache64 = model64.forward(images.astype(np.float64))      # float32 to its rounding
    assert rel_err(logits, logits64) < 1e-5
    for layer, layer64 in zip(att, model64.attention_weights(cache64), strict=True):
        np.testing.assert_allclose(layer["self"], layer64["self"], atol=1e-6)
        np.testing.assert_allclose(layer["self"].sum(-1), 1.0, atol=1e-6)
    cfg.save_json(tmp_path / "c.json")
    assert ViTConfig.load_json(tmp_path / "c.json") == cfg
    with pytest.raises(ValueError, match="must be a multiple of patch_size"):
        ViTConfig(image_size=8, patch_size=3)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        ViTConfig(d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="eps"):             # the shared BlockConfig checks
        ViTConfig(eps=0.0)
    with pytest.raises(ValueError, match="positional"):
        ViTConfig(positional="rotary")
    assert ViTConfig(norm_first=False).use_final_norm is False and cfg.use_final_norm is True
    with pytest.raises(TypeError, match="dtype"):
        model.forward(np.zeros((1, 8, 8, 1)))
