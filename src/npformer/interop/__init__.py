"""Interop with PyTorch: ``from_torch`` and ``to_torch``, and ``torch_style``, npformer's modules
called with torch's arguments and mask conventions. torch is imported only when ``from_torch`` or
``to_torch`` is called, so ``import npformer`` never needs it."""
from .calls import TorchCall, torch_style
from .torch import from_torch, to_torch

__all__ = ["TorchCall", "from_torch", "to_torch", "torch_style"]
