"""npformer: the Transformer of "Attention Is All You Need", from scratch in NumPy,
every forward and backward pass written out and checked against PyTorch."""
from .functional import attention

__all__ = ["attention", "from_torch", "load_policy", "to_torch", "torch_style", "__version__"]


def _version() -> str:
    """The installed distribution's version (pyproject.toml holds the one copy). In a source tree that
    is not installed, the version in that tree's pyproject.toml; "0+unknown" when there is none."""
    import re
    from importlib import metadata
    from pathlib import Path

    try:
        return metadata.version("npformer")
    except metadata.PackageNotFoundError:
        pass
    try:  # src/npformer/__init__.py -> pyproject.toml, two folders up
        text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return "0+unknown"
    found = re.search(r'^\[project\]\n(?:(?!\[).*\n)*?version = "([^"]+)"', text, re.MULTILINE)
    return found.group(1) if found else "0+unknown"


def __getattr__(name: str):
    # from_torch/to_torch/torch_style live in npformer.interop, loaded on first use (PEP 562);
    # torch itself is imported only when from_torch/to_torch are called.
    if name in ("from_torch", "to_torch", "torch_style"):
        from . import interop
        return getattr(interop, name)
    if name == "load_policy":  # a gripper run as a policy; loads numpy's training code, never torch or gymnasium
        from .train.policy import load_policy
        return load_policy
    if name == "__version__":  # read once, when first asked for: importlib.metadata costs ~20 ms
        globals()["__version__"] = version = _version()
        return version
    raise AttributeError(f"module 'npformer' has no attribute {name!r}")
