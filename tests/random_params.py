"""Parameters moved off their initial values, for tests that compare a module with another path.

Fresh modules start with LayerNorm weights 1 and biases 0 and attention biases 0 (as torch's do):
a test on them cannot see a swapped norm, an ignored bias or a bias added twice. Torch-free, so the
decoding and inference tests can use it too.
"""
import numpy as np


def randomize(module, rng: np.random.Generator, scale: float = 0.3):
    """Add scale * N(0, 1) * (mean |p| + 0.1) to every parameter p, in place; returns the module."""
    for v in module.state_dict().values():
        v += scale * rng.standard_normal(v.shape) * (np.abs(v).mean() + 0.1)
    return module
