"""Core ops: each a forward/backward pair with an explicit cache (see docs/STYLE.md), and in
``inference.py`` the forward-only fast twins of attention, LayerNorm and softmax; ``flash_attention.py``
is attention's O(T)-memory tiled twin for training on long sequences. ``kernels.py`` chooses between
the NumPy references and their compiled twins in ``fused/`` (numba, optional: ``npformer[fast]``)."""
from .activations import (
    erf,
    gelu_backward,
    gelu_forward,
    gelu_tanh_backward,
    gelu_tanh_forward,
    relu_backward,
    relu_forward,
)
from .attention import attention_backward, attention_forward, attention_weights_grad, causal_mask
from .dropout import dropout_add_forward, dropout_backward, dropout_forward
from .embedding import embedding_backward, embedding_forward
from .flash_attention import flash_attention_backward, flash_attention_forward
from .inference import attention_inference, gelu_inference_, layernorm_inference, softmax_numerator_
from .kernels import clear_used, kernels_used, use_kernels
from .layernorm import layernorm_backward, layernorm_forward
from .linear import linear_backward, linear_forward
from .losses import cross_entropy_backward, cross_entropy_forward
from .positional import sinusoidal_positions, sinusoidal_positions_2d
from .softmax import log_softmax, softmax_backward, softmax_forward

__all__ = [
    "attention_backward", "attention_forward", "attention_inference", "attention_weights_grad", "causal_mask",
    "cross_entropy_backward", "cross_entropy_forward",
    "dropout_add_forward", "dropout_backward", "dropout_forward",
    "embedding_backward", "embedding_forward",
    "flash_attention_backward", "flash_attention_forward",
    "erf", "gelu_backward", "gelu_forward", "gelu_inference_", "gelu_tanh_backward", "gelu_tanh_forward",
    "relu_backward", "relu_forward",
    "layernorm_backward", "layernorm_forward", "layernorm_inference",
    "linear_backward", "linear_forward",
    "log_softmax", "softmax_backward", "softmax_forward", "softmax_numerator_",
    "sinusoidal_positions", "sinusoidal_positions_2d",
    "clear_used", "kernels_used", "use_kernels",
]
