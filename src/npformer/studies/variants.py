"""The dates task with a model its config cannot describe: no positions, or no feed-forward networks.

``TransformerConfig`` offers only sinusoidal and learned positions (``to_torch`` and the checkpoints
know those two), and every block has its FFN. The studies need two more arms, made here on the
built model so that the ``Trainer`` trains them unchanged:

    positions=False      the embeddings add no position vector (``nn.Embeddings``' "none"): the
                         encoder's self-attention is then permutation-equivariant, and the
                         cross-attention sums over the source, so the output depends only on the
                         multiset of source characters. The decoder's causal mask still lets it
                         count its own position.
    feed_forward=False   every FFN's weights start at 0 and their gradients are set to 0, so each
                         FFN outputs 0 for good (Adam moves nothing whose gradient is always 0,
                         and decay shrinks a zero weight to zero): post-LN's FFN sub-layer becomes
                         LayerNorm(x + 0), and the block is attention, residuals and norms only.

The run's config.json still says "sinusoidal" and holds the FFN's zeros: such a run is a study's
scratch, not a model to load with ``load_run``.
"""
from __future__ import annotations

import numpy as np

from ..data.dates import DatesTask


def is_ffn(key: str) -> bool:
    """A state_dict key of a feed-forward network (``encoder.layers.0.ffn.linear1.weight``)."""
    return ".ffn." in key


class VariantDates(DatesTask):
    """``DatesTask`` whose models may have no positions or no feed-forward networks."""

    def __init__(self, settings=None, positions: bool = True, feed_forward: bool = True) -> None:
        super().__init__(settings)
        self.use_positions, self.use_feed_forward = positions, feed_forward

    def build_model(self, config, rng: np.random.Generator):
        model = super().build_model(config, rng)
        if not self.use_positions:
            for emb in (model.src_embedding, model.tgt_embedding):     # one module when shared
                emb.positional = "none"
        if not self.use_feed_forward:
            for key, p in model.state_dict().items():
                if is_ffn(key):
                    p[...] = 0
        return model

    def loss(self, model, batch, rng, label_smoothing: float = 0.0):
        loss, grads = super().loss(model, batch, rng, label_smoothing)
        if not self.use_feed_forward:
            grads = {k: np.zeros_like(g) if is_ffn(k) else g for k, g in grads.items()}
        return loss, grads


def trained_parameters(model, task) -> int:
    """The parameters training can change: all but the FFN's held at 0 in a ``feed_forward=False`` run."""
    frozen = not getattr(task, "use_feed_forward", True)
    return int(sum(p.size for k, p in model.state_dict().items() if not (frozen and is_ffn(k))))
