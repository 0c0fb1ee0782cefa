"""Modules: the Transformer's parts, each composed from the core ops with a forward and a backward."""
from .attention import MultiHeadAttention, merge_heads, split_heads
from .basic import Dropout, Embedding, LayerNorm, Linear
from .embeddings import Embeddings
from .feedforward import FeedForward
from .layers import DecoderLayer, EncoderLayer
from .masks import causal_mask, lengths_mask, padding_mask
from .module import Module, ModuleList, add_grads
from .stacks import Decoder, Encoder
from .transformer import TransformerStack

__all__ = [
    "Decoder", "DecoderLayer", "Dropout", "Embedding", "Embeddings", "Encoder", "EncoderLayer",
    "FeedForward", "LayerNorm", "Linear", "Module", "ModuleList", "MultiHeadAttention", "TransformerStack",
    "add_grads", "causal_mask", "lengths_mask", "merge_heads", "padding_mask", "split_heads",
]
