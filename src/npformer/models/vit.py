"""A Vision Transformer classifier (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

    tokens = [CLS] + linear(patches) + positions       (npformer.nn.patches)
    h      = Encoder(tokens)                           (the paper's encoder stack, pre-LN by default)
    logits = head(norm(h[:, 0]))                       ([CLS] output; or the mean over patches)

Pre-LN (``norm_first=True``) is the default, as in ViT: each sub-layer reads norm(x) and the
residual stream is normalised once at the end (``encoder.norm``). Post-LN (the 2017 paper's
order) is available and then the layers' own norms end the stack.

Keys: ``patch_embed.{weight,bias,cls_token,pos_embed}``, ``encoder.layers.N...``,
``encoder.norm.*`` (pre-LN), ``head.{weight,bias}``.
Dimension legend: B batch, H/W/C image, T tokens, E model width, K classes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..nn import Encoder, Linear, Module, add_grads
from ..nn.patches import PatchEmbedding
from ..ops import cross_entropy_backward, cross_entropy_forward
from .blocks import encoder_stack, init_model
from .config import BlockConfig, check_choice, check_images, check_int, check_patch_grid, check_rng


@dataclass
class ViTConfig(BlockConfig):
    image_size: int = 8            # square images, pixels per side
    patch_size: int = 2            # P: a P x P patch becomes one token
    in_channels: int = 1           # C: 1 grey, 3 RGB
    n_classes: int = 10            # K: classifier outputs
    d_model: int = 64              # E: token width
    n_heads: int = 4               # attention heads per layer
    d_ff: int = 128                # feed-forward inner width
    n_layers: int = 3              # encoder layers
    dropout: float = 0.1           # dropout on tokens, attention weights and sub-layer outputs
    positional: str = "learned"    # "learned" table or fixed "sinusoidal" 2-D positions
    activation: str = "gelu"       # feed-forward non-linearity, "gelu" or "relu"
    norm_first: bool = True        # pre-LN (ViT) or post-LN (the original Transformer)
    pool: str = "cls"              # classify from the [CLS] token or the "mean" of the patch tokens
    eps: float = 1e-5              # LayerNorm epsilon

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "in_channels", "n_classes", "d_model", "n_heads", "d_ff",
                     "n_layers"):
            check_int(name, getattr(self, name))
        check_patch_grid(self.image_size, self.patch_size)
        self.check_block_fields()            # no final_norm field: a final norm exactly when pre-LN
        if self.positional == "sinusoidal" and self.d_model % 4:
            raise ValueError(f"2-D sinusoidal positions need d_model divisible by 4, got {self.d_model}")
        check_choice("pool", self.pool, ("cls", "mean"))

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class ViT(Module):
    # the config (init_model) and the children (add_module) made in __init__, declared for the type checker
    config: ViTConfig
    patch_embed: PatchEmbedding
    encoder: Encoder
    head: Linear

    def __init__(self, config: ViTConfig, rng: np.random.Generator | int = 0, dtype: DTypeLike = np.float32) -> None:
        c, rng = init_model(self, config, ViTConfig, rng)
        self.add_module("patch_embed", PatchEmbedding(c.image_size, c.patch_size, c.in_channels, c.d_model,
                                                      cls_token=c.pool == "cls", positional=c.positional,
                                                      dropout=c.dropout, rng=rng, dtype=dtype))
        self.add_module("encoder", encoder_stack(c, c.n_layers, rng, dtype))
        self.add_module("head", Linear(c.d_model, c.n_classes, rng=rng, dtype=dtype))

    def check_inputs(self, images: ArrayLike, rng: np.random.Generator | None = None) -> np.ndarray:
        """Validate images ((B, H, W, C) in the model's dtype, finite) and the rng."""
        check_rng(self, rng, self.config.dropout)
        return check_images(images, self.config.image_size, self.config.in_channels, self.dtype)

    def forward(self, images: np.ndarray, rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """images (B, H, W, C) in the model's dtype -> (logits (B, K), cache)."""
        images = self.check_inputs(images, rng)
        x, c_embed = self.patch_embed.forward(images, rng)        # (B, T, E)
        h, c_enc = self.encoder.forward(x, rng=rng)               # (B, T, E)
        pooled = h[:, 0] if self.config.pool == "cls" else h.mean(axis=1)  # (B, E)
        logits, c_head = self.head.forward(pooled)                # (B, K)
        return logits, (c_embed, c_enc, c_head, h.shape)

    def backward(self, dlogits: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """dlogits (B, K) -> ({"images": d loss / d images (B, H, W, C)}, grads), grads one per state_dict key."""
        c_embed, c_enc, c_head, h_shape = cache
        grads: dict = {}
        dpooled, g = self.head.backward(dlogits, c_head)          # (B, E)
        add_grads(grads, g, "head")
        dh = np.zeros(h_shape, dtype=dlogits.dtype)                # (B, T, E)
        if self.config.pool == "cls":
            dh[:, 0] = dpooled
        else:
            dh += dpooled[:, None, :] / dlogits.dtype.type(h_shape[1])
        dx, g = self.encoder.backward(dh, c_enc)
        add_grads(grads, g, "encoder")
        dimages, g = self.patch_embed.backward(dx, c_embed)      # (B, H, W, C)
        add_grads(grads, g, "patch_embed")
        return {"images": dimages}, grads

    def loss(self, images: np.ndarray, labels: np.ndarray, label_smoothing: float = 0.0,
             rng: np.random.Generator | None = None) -> tuple[float, dict[str, np.ndarray]]:
        """Mean cross-entropy of the class logits; returns (loss float, grads)."""
        labels = np.asarray(labels)
        if labels.dtype.kind not in "iu" or labels.shape != images.shape[:1]:
            raise ValueError(f"labels must be integer class ids of shape {images.shape[:1]}, "
                             f"got {labels.dtype} {labels.shape}")
        if labels.size and (labels.min() < 0 or labels.max() >= self.config.n_classes):
            raise ValueError(f"labels hold class ids outside [0, {self.config.n_classes}): "
                             f"min {labels.min()}, max {labels.max()}")
        logits, cache = self.forward(images, rng)
        loss, lc = cross_entropy_forward(logits, labels, label_smoothing=label_smoothing)
        _, grads = self.backward(cross_entropy_backward(1.0, lc), cache)
        return float(loss), grads

    def predict(self, images: np.ndarray, batch_size: int = 512) -> np.ndarray:
        """Class ids (B,) in eval mode, in batches."""
        was_training = self.training
        self.eval()
        out = [self.forward(images[i:i + batch_size])[0].argmax(-1) for i in range(0, len(images), batch_size)]
        self.train(was_training)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    @staticmethod
    def attention_weights(cache: Any) -> list[dict]:
        """One {"self": (B, H, T, T)} per layer (as EncoderClassifier); token 0 is [CLS] when pool == "cls"."""
        return Encoder.attention_weights(cache[1])
