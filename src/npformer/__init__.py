"""npformer: the Transformer of "Attention Is All You Need", from scratch in NumPy,
every forward and backward pass written out and checked against PyTorch."""
from .functional import attention

__version__ = "0.1.0"

__all__ = ["attention", "__version__"]
