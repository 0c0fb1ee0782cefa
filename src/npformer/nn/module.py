"""The Module base: a container of named parameter arrays and child modules.

A module owns its *own* parameters in ``self.params`` (local names such as
``weight``) and its children by name. ``state_dict()`` walks the tree and gives one
flat dict of dotted keys (``encoder.layers.0.self_attn.in_proj_weight``) whose
values are the very arrays the modules use, so an optimizer that updates them in
place updates the model.

Every module and model has one op pair, ``forward``/``backward``; the calling convention
is written once, in ``Module.forward`` and ``Module.backward`` below. Parents add their
children's grads under the child's name with ``add_grads``.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar, cast

import numpy as np
from numpy.typing import DTypeLike

M = TypeVar("M", bound="Module")


def add_grads(into: dict, grads: dict, prefix: str) -> dict:
    """Add ``grads`` into ``into`` under ``prefix.``; keys that meet are summed
    (tied weights, a module used twice) into a new array."""
    for k, g in grads.items():
        key = f"{prefix}.{k}" if prefix else k
        if key not in into:
            into[key] = g
        else:
            into[key] = into[key] + g
    return into


class Module:
    def __init__(self) -> None:
        self.params: dict[str, np.ndarray] = {}
        self._children: dict[str, Module] = {}
        self.training: bool = True

    # -- the op pair: one calling convention for every module and model ----------------------
    def forward(self, *inputs: Any, **options: Any) -> tuple[Any, Any]:
        """``forward(*inputs, ...) -> (out, cache)``.

        The cache holds what ``backward`` needs and is returned, never stored on ``self``, so one
        module can run twice (tied embeddings, one layer for self- and cross-attention).
        Options such as masks, ``rng`` (dropout) or ``causal`` are keyword arguments.
        """
        raise NotImplementedError(f"{type(self).__name__} has no forward")

    def backward(self, dout: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """``backward(dout, cache) -> (dinputs, grads)``.

        grads: a flat dict of the parameters' gradients, keyed as ``state_dict()`` relative to
        this module (``self_attn.in_proj_weight``), each the shape of its parameter.
        dinputs: the gradient of forward's array input, or

          - a tuple in argument order when forward takes two arrays: MultiHeadAttention
            (dx_q, dx_kv), dx_kv None for self-attention; DecoderLayer and Decoder (dx, dmemory);
          - None for integer ids, which have no gradient (Embedding, Embeddings);
          - a dict by name for compositions whose useful gradients sit at named points:
            TransformerStack {"src", "tgt", "memory"}; the models {"embeddings"},
            {"src_embeddings", "tgt_embeddings", "memory"} or {"images"}.

        Values leave through the return value, never through closures or lists.
        """
        raise NotImplementedError(f"{type(self).__name__} has no backward")

    # -- tree -----------------------------------------------------------------
    def add_module(self, name: str, module: M) -> M:
        self._children[name] = module
        object.__setattr__(self, name, module) if name.isidentifier() else None
        return module

    def children(self) -> Iterator[tuple[str, "Module"]]:
        return iter(self._children.items())

    def modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        yield prefix, self
        for name, child in self._children.items():
            yield from child.modules(f"{prefix}.{name}" if prefix else name)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Flat dict of every parameter under its dotted name; the arrays are shared, not copied."""
        out: dict[str, np.ndarray] = {}
        for prefix, mod in self.modules():
            for k, v in mod.params.items():
                out[f"{prefix}.{k}" if prefix else k] = v
        return out

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Copy arrays into the parameters, in place, checking names and shapes."""
        own = self.state_dict()
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if strict and (missing or unexpected):
            raise ValueError(f"state dict mismatch: missing keys {missing[:8]}, unexpected keys {unexpected[:8]}")
        for k, v in state.items():
            if k not in own:
                continue
            v = np.asarray(v)
            if v.shape != own[k].shape:
                raise ValueError(f"parameter {k}: expected shape {own[k].shape}, got {v.shape}")
            own[k][...] = v

    def num_parameters(self) -> int:
        return int(sum(v.size for v in self.state_dict().values()))

    @property
    def dtype(self) -> np.dtype:
        for v in self.state_dict().values():
            return v.dtype
        return np.dtype(np.float32)

    def astype(self, dtype: DTypeLike) -> "Module":
        """Convert every parameter to ``dtype`` (float32 to train, float64 to verify). Returns self."""
        for _, mod in self.modules():
            for k in list(mod.params):
                mod.params[k] = mod.params[k].astype(dtype)
        return self

    def train(self, mode: bool = True) -> "Module":
        for _, mod in self.modules():
            mod.training = mode
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.num_parameters():,} parameters)"


class ModuleList(Module, Generic[M]):
    """Children named "0", "1", ... as in torch's ``nn.ModuleList``; ``ModuleList[EncoderLayer]`` holds
    encoder layers only."""

    def __init__(self, modules: Iterable[M]) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def __len__(self) -> int:
        return len(self._children)

    def __getitem__(self, i: int) -> M:
        return cast(M, self._children[str(i if i >= 0 else len(self) + i)])

    def __iter__(self) -> Iterator[M]:
        return iter(cast("dict[str, M]", self._children).values())
