"""npformer: the Transformer of "Attention Is All You Need", from scratch in NumPy,
every forward and backward pass written out and checked against PyTorch."""
from .functional import attention

__version__ = "0.1.0"

__all__ = ["attention", "from_torch", "to_torch", "torch_style", "__version__"]


def __getattr__(name: str):
    # from_torch/to_torch/torch_style live in npformer.interop, loaded on first use (PEP 562);
    # torch itself is imported only when from_torch/to_torch are called.
    if name in ("from_torch", "to_torch", "torch_style"):
        from . import interop
        return getattr(interop, name)
    raise AttributeError(f"module 'npformer' has no attribute {name!r}")
