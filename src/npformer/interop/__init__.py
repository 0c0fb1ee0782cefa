"""Interop with PyTorch: ``from_torch`` and ``to_torch``. torch is imported only when one
of them is called, so ``import npformer`` never needs it."""
from .torch import from_torch, to_torch

__all__ = ["from_torch", "to_torch"]
