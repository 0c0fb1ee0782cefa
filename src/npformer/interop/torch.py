"""Two-way conversion between npformer modules and PyTorch's.

    from_torch(torch module) -> npformer module in a torch-style call (``.module``), weights
                                copied, same dtype, eval mode; a ``to_torch`` model comes back bare
    to_torch(npformer module or model, or a torch-style call) -> torch module, weights copied,
                                same dtype, eval mode

Both are exact: the same numbers in, the same numbers out (to rounding). The state dicts
share torch's key names except the FFN, which npformer keeps under ``ffn.``
(torch ``layers.0.linear1.weight`` <-> npformer ``layers.0.ffn.linear1.weight``).

Supported torch modules: ``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer``, ``nn.TransformerEncoder``, ``nn.TransformerDecoder`` and
``nn.Transformer``, built with ``batch_first=True``, with biases, relu or exact gelu,
post- or pre-LN, with or without final norms.

torch is imported inside the functions: importing this file never needs it.
"""
from __future__ import annotations

import numpy as np

from ..nn import Decoder, DecoderLayer, Encoder, EncoderLayer, LayerNorm, Module, MultiHeadAttention
from ..nn.transformer import TransformerStack
from .calls import TorchCall, torch_style

_INSTALL = "pip install torch==2.13.0  (or: pip install 'npformer[torch]')"


def _import_torch(caller: str):
    try:
        import torch
    except ImportError as err:
        raise ImportError(f"npformer.{caller} needs PyTorch, which is not installed. "
                          f"Install it with: {_INSTALL}") from err
    return torch


# -- state-dict keys: torch's FFN children sit on the layer, npformer's under ``ffn.`` -------------
def _key_from_torch(key: str) -> str:
    parts = key.split(".")
    out = []
    for i, p in enumerate(parts):
        if p in ("linear1", "linear2") and (i == 0 or parts[i - 1] != "ffn"):
            out.append("ffn")
        out.append(p)
    return ".".join(out)


def _key_to_torch(key: str) -> str:
    parts = key.split(".")
    return ".".join(p for i, p in enumerate(parts)
                    if not (p == "ffn" and i + 1 < len(parts) and parts[i + 1] in ("linear1", "linear2")))


def _np_dtype(module, what: str):
    """The one float dtype (float32 or float64) of a torch module's parameters."""
    torch = _import_torch("from_torch")
    dtypes = {p.dtype for p in module.parameters()}
    if len(dtypes) != 1:
        raise TypeError(f"{what} has parameters of several dtypes {sorted(map(str, dtypes))}; "
                        f"convert it with .float() or .double() first")
    dt = dtypes.pop()
    table = {torch.float32: np.float32, torch.float64: np.float64}
    if dt not in table:
        raise TypeError(f"{what} has dtype {dt}; npformer supports torch.float32 and torch.float64 "
                        f"(convert it with .float() or .double())")
    return table[dt]


def _load_from_torch(np_module: Module, torch_module) -> None:
    state = {_key_from_torch(k): v.detach().cpu().numpy() for k, v in torch_module.state_dict().items()}
    np_module.load_state_dict(state)


# -- from_torch -----------------------------------------------------------------------------------
def _check_mha(m, where: str) -> None:
    problems = []
    if not m.batch_first:
        problems.append("batch_first=False (npformer is batch-first, (B, T, E); build the torch module "
                        "with batch_first=True)")
    if not m._qkv_same_embed_dim:
        problems.append(f"kdim/vdim ({m.kdim}, {m.vdim}) different from embed_dim ({m.embed_dim})")
    if m.in_proj_bias is None or m.out_proj.bias is None:
        problems.append("bias=False (npformer's attention projections have biases)")
    if m.bias_k is not None or m.bias_v is not None:
        problems.append("add_bias_kv=True")
    if m.add_zero_attn:
        problems.append("add_zero_attn=True")
    if problems:
        raise ValueError(f"from_torch: {where} uses unsupported options: " + "; ".join(problems))


def _activation_name(fn, where: str) -> str:
    torch = _import_torch("from_torch")
    F = torch.nn.functional
    if fn in ("relu", "gelu"):
        return fn
    if fn is F.relu or isinstance(fn, torch.nn.ReLU):
        return "relu"
    if fn is F.gelu or (isinstance(fn, torch.nn.GELU) and fn.approximate == "none"):
        return "gelu"
    if isinstance(fn, torch.nn.GELU) and fn.approximate == "tanh":
        return "gelu_tanh"
    raise ValueError(f"from_torch: {where} has activation {fn!r}; npformer supports relu, exact gelu and gelu's "
                     f"tanh approximation ('relu', 'gelu', F.relu, F.gelu, nn.ReLU(), nn.GELU(), "
                     f"nn.GELU(approximate='tanh'))")


def _torch_activation(name: str):
    """npformer's activation name as torch's encoder/decoder layers take it (a string or a module)."""
    torch = _import_torch("to_torch")
    return torch.nn.GELU(approximate="tanh") if name == "gelu_tanh" else name


def _check_norm(norm, where: str) -> None:
    if norm.weight is None or norm.bias is None:
        raise ValueError(f"from_torch: {where} is a LayerNorm without a learned weight and bias "
                         f"(elementwise_affine=False or bias=False), which npformer does not support")
    if tuple(norm.normalized_shape) != (norm.weight.shape[0],) or len(norm.normalized_shape) != 1:
        raise ValueError(f"from_torch: {where} normalises over {tuple(norm.normalized_shape)}; "
                         f"npformer's LayerNorm normalises the last dimension only")


def _mha_from_torch(m, where: str = "MultiheadAttention") -> MultiHeadAttention:
    _check_mha(m, where)
    out = MultiHeadAttention(m.embed_dim, m.num_heads, dropout=float(m.dropout), dtype=_np_dtype(m, where))
    _load_from_torch(out, m)
    return out


def _layer_from_torch(layer, where: str, decoder: bool):
    """An npformer EncoderLayer/DecoderLayer equal to a torch Transformer{Encoder,Decoder}Layer."""
    attns = ("self_attn", "multihead_attn") if decoder else ("self_attn",)
    for name in attns:
        _check_mha(getattr(layer, name), f"{where}.{name}")
    if layer.linear1.bias is None or layer.linear2.bias is None:
        raise ValueError(f"from_torch: {where} uses bias=False (npformer's FFN linears have biases)")
    n_norms = 3 if decoder else 2
    for i in range(1, n_norms + 1):
        _check_norm(getattr(layer, f"norm{i}"), f"{where}.norm{i}")
    sa = layer.self_attn
    cls = DecoderLayer if decoder else EncoderLayer
    out = cls(sa.embed_dim, sa.num_heads, layer.linear1.out_features, dropout=float(layer.dropout1.p),
              activation=_activation_name(layer.activation, where), norm_first=bool(layer.norm_first),
              eps=float(layer.norm1.eps), dtype=_np_dtype(layer, where))
    # torch lets every dropout and eps differ; copy each so training behaves the same too
    for name in attns:
        getattr(out, name).dropout = float(getattr(layer, name).dropout)
    out.ffn.dropout.p = float(layer.dropout.p)
    for i in range(1, n_norms + 1):
        getattr(out, f"dropout{i}").p = float(getattr(layer, f"dropout{i}").p)
        getattr(out, f"norm{i}").eps = float(getattr(layer, f"norm{i}").eps)
    _load_from_torch(out, layer)
    return out


def _stack_from_torch(stack, where: str, decoder: bool):
    """An npformer Encoder/Decoder holding the converted layers (each may differ) and norm."""
    torch = _import_torch("from_torch")
    layer_cls = torch.nn.TransformerDecoderLayer if decoder else torch.nn.TransformerEncoderLayer
    if len(stack.layers) == 0:
        raise ValueError(f"from_torch: {where} has no layers")
    layers = []
    for i, layer in enumerate(stack.layers):
        if not isinstance(layer, layer_cls):
            raise TypeError(f"from_torch: {where}.layers.{i} is a {type(layer).__name__}, "
                            f"expected {layer_cls.__name__}")
        layers.append(_layer_from_torch(layer, f"{where}.layers.{i}", decoder))
    first = layers[0].self_attn
    norm = stack.norm
    if norm is not None:
        if not isinstance(norm, torch.nn.LayerNorm):
            raise TypeError(f"from_torch: {where}.norm is a {type(norm).__name__}, expected LayerNorm or None")
        _check_norm(norm, f"{where}.norm")
    cls = Decoder if decoder else Encoder
    out = cls(0, first.d_model, first.n_heads, layers[0].ffn.linear1.params["weight"].shape[0],
              final_norm=norm is not None, eps=float(norm.eps) if norm is not None else 1e-5,
              dtype=layers[0].dtype)
    for i, layer in enumerate(layers):
        out.layers.add_module(str(i), layer)
    if norm is not None:
        assert out.norm is not None                                # built with final_norm
        out.norm.params["weight"][...] = norm.weight.detach().cpu().numpy()
        out.norm.params["bias"][...] = norm.bias.detach().cpu().numpy()
    return out


def from_torch(module):
    """The npformer module equal to a torch ``MultiheadAttention``, ``TransformerEncoderLayer``,
    ``TransformerDecoderLayer``, ``TransformerEncoder``, ``TransformerDecoder`` or ``Transformer``
    (``batch_first=True``), in its torch-style call (``calls.torch_style``). Weights are copied;
    dtype (float32/float64) kept; eval mode.

    Call the result like the torch module, on NumPy arrays: ``out = npmod(src, src_mask=...)``;
    ``npmod.module`` is the npformer module (its forward, backward and state_dict are also
    reached through the call). A model made by ``to_torch`` (say, after training it in torch)
    comes back as the npformer model it was made from, with the trained weights.
    """
    torch = _import_torch("from_torch")
    nn = torch.nn
    out: Module
    if isinstance(module, nn.MultiheadAttention):
        out = _mha_from_torch(module)
    elif isinstance(module, nn.TransformerEncoderLayer):
        out = _layer_from_torch(module, "TransformerEncoderLayer", decoder=False)
    elif isinstance(module, nn.TransformerDecoderLayer):
        out = _layer_from_torch(module, "TransformerDecoderLayer", decoder=True)
    elif isinstance(module, nn.TransformerEncoder):
        out = _stack_from_torch(module, "TransformerEncoder", decoder=False)
    elif isinstance(module, nn.TransformerDecoder):
        out = _stack_from_torch(module, "TransformerDecoder", decoder=True)
    elif isinstance(module, nn.Transformer):
        if not module.batch_first:
            raise ValueError("from_torch: Transformer uses unsupported options: batch_first=False "
                             "(npformer is batch-first, (B, T, E); build it with batch_first=True)")
        for name, cls in (("encoder", nn.TransformerEncoder), ("decoder", nn.TransformerDecoder)):
            if not isinstance(getattr(module, name), cls):
                raise TypeError(f"from_torch: Transformer.{name} is a {type(getattr(module, name)).__name__}, "
                                f"expected {cls.__name__}")
        out = TransformerStack.from_stacks(_stack_from_torch(module.encoder, "Transformer.encoder", False),
                                           _stack_from_torch(module.decoder, "Transformer.decoder", True))
    else:
        from .torch_models import (
            TorchActionLM,
            TorchDecoderLM,
            TorchEncoderClassifier,
            TorchTransformer,
            TorchViT,
            TorchVLA,
        )
        if not isinstance(module, (TorchTransformer, TorchDecoderLM, TorchEncoderClassifier, TorchViT, TorchVLA,
                                   TorchActionLM)):
            raise TypeError(f"from_torch accepts torch.nn.MultiheadAttention, TransformerEncoderLayer, "
                            f"TransformerDecoderLayer, TransformerEncoder, TransformerDecoder or Transformer "
                            f"(or a model made by to_torch), got {type(module).__module__}.{type(module).__name__}")
        return _model_from_torch(module).eval()
    return torch_style(out.eval())


def _model_from_torch(module):
    """Back from a ``to_torch`` twin (e.g. after training in torch): the npformer model of the
    twin's config, with the twin's current weights."""
    from .. import models
    from ..models.action_lm import ActionLM
    from ..models.vit import ViT
    from ..models.vla import VLA

    kind = {"TorchTransformer": models.Transformer, "TorchDecoderLM": models.DecoderLM,
            "TorchEncoderClassifier": models.EncoderClassifier, "TorchViT": ViT,
            "TorchVLA": VLA, "TorchActionLM": ActionLM}[type(module).__name__]
    out = kind(module.config, rng=0, dtype=_np_dtype(module, type(module).__name__))
    _load_from_torch(out, module)
    return out


# -- to_torch -------------------------------------------------------------------------------------
def _torch_dtype(np_module: Module, caller: str = "to_torch"):
    torch = _import_torch(caller)
    dt = np.dtype(np_module.dtype)
    table = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}
    if dt not in table:
        raise TypeError(f"to_torch: {type(np_module).__name__} has dtype {dt}; expected float32 or float64")
    return table[dt]


def _load_into_torch(torch_module, np_module: Module, prefix: str = "") -> None:
    """Copy ``np_module``'s parameters into ``torch_module`` (keys mapped), strictly."""
    torch = _import_torch("to_torch")
    state = {prefix + _key_to_torch(k): torch.from_numpy(np.array(v)) for k, v in np_module.state_dict().items()}
    torch_module.load_state_dict(state, strict=True)


def _mha_to_torch(m: MultiHeadAttention):
    torch = _import_torch("to_torch")
    out = torch.nn.MultiheadAttention(m.d_model, m.n_heads, dropout=m.dropout, batch_first=True,
                                      dtype=_torch_dtype(m))
    _load_into_torch(out, m)
    return out


def _layer_to_torch(layer, decoder: bool):
    torch = _import_torch("to_torch")
    sa = layer.self_attn
    cls = torch.nn.TransformerDecoderLayer if decoder else torch.nn.TransformerEncoderLayer
    out = cls(sa.d_model, sa.n_heads, layer.ffn.linear1.params["weight"].shape[0], dropout=layer.dropout1.p,
              activation=_torch_activation(layer.ffn.activation), layer_norm_eps=layer.norm1.eps, batch_first=True,
              norm_first=layer.norm_first, dtype=_torch_dtype(layer))
    attns = ("self_attn", "multihead_attn") if decoder else ("self_attn",)
    for name in attns:
        getattr(out, name).dropout = getattr(layer, name).dropout
    out.dropout.p = layer.ffn.dropout.p
    for i in range(1, (3 if decoder else 2) + 1):
        getattr(out, f"dropout{i}").p = getattr(layer, f"dropout{i}").p
        getattr(out, f"norm{i}").eps = getattr(layer, f"norm{i}").eps
    _load_into_torch(out, layer)
    return out


def _stack_to_torch(stack, decoder: bool):
    torch = _import_torch("to_torch")
    nn = torch.nn
    if len(stack.layers) == 0:
        raise ValueError(f"to_torch: the {type(stack).__name__} has no layers; torch's stacks need one")
    layers = [_layer_to_torch(layer, decoder) for layer in stack.layers]
    norm = None
    if stack.norm is not None:
        norm = nn.LayerNorm(stack.norm.params["weight"].shape[0], eps=stack.norm.eps, dtype=_torch_dtype(stack))
    if decoder:
        out = nn.TransformerDecoder(layers[0], len(layers), norm=norm)
    else:
        # the nested-tensor fast path returns zeros at padded positions; npformer computes them
        out = nn.TransformerEncoder(layers[0], len(layers), norm=norm, enable_nested_tensor=False)
    out.layers = nn.ModuleList(layers)
    _load_into_torch(out, stack)
    return out


def _transformer_stack_to_torch(stack: TransformerStack):
    torch = _import_torch("to_torch")
    enc, dec = _stack_to_torch(stack.encoder, False), _stack_to_torch(stack.decoder, True)
    first = stack.encoder.layers[0]
    out = torch.nn.Transformer(first.self_attn.d_model, first.self_attn.n_heads, custom_encoder=enc,
                               custom_decoder=dec, batch_first=True, norm_first=first.norm_first,
                               dtype=_torch_dtype(stack))
    _load_into_torch(out, stack)      # torch re-initialises custom stacks in __init__; copy again
    return out


def to_torch(model):
    """The torch module equal to an npformer module or model: MultiHeadAttention, EncoderLayer,
    DecoderLayer, Encoder, Decoder, TransformerStack, and the full models (Transformer,
    DecoderLM, EncoderClassifier, ViT, VLA, ActionLM), bare or in a torch-style call. Weights are copied; dtype kept;
    eval mode (call ``.train()`` to train it). Called with torch tensors, it returns what the
    npformer module returns.
    """
    torch = _import_torch("to_torch")
    if isinstance(model, TorchCall):
        model = model.module
    if isinstance(model, MultiHeadAttention):
        out = _mha_to_torch(model)
    elif isinstance(model, EncoderLayer):
        out = _layer_to_torch(model, decoder=False)
    elif isinstance(model, DecoderLayer):
        out = _layer_to_torch(model, decoder=True)
    elif isinstance(model, Encoder):
        out = _stack_to_torch(model, decoder=False)
    elif isinstance(model, Decoder):
        out = _stack_to_torch(model, decoder=True)
    elif isinstance(model, TransformerStack):
        out = _transformer_stack_to_torch(model)
    elif isinstance(model, LayerNorm):
        out = torch.nn.LayerNorm(model.params["weight"].shape[0], eps=model.eps, dtype=_torch_dtype(model))
        _load_into_torch(out, model)
    else:
        from .torch_models import model_to_torch  # the full models: embeddings + stacks + head
        out = model_to_torch(model, _stack_to_torch, _torch_dtype, _load_into_torch)
    return out.eval()
