"""Models: the encoder-decoder Transformer, a decoder-only language model, an encoder-only
classifier/tagger, a Vision Transformer, a vision-language-action policy, and a policy that emits
its actions as tokens (a prefix-LM over words, patches and action tokens), each with a
JSON-serialisable config. blocks.py holds the pieces they share.

Every model: ``forward(...) -> (out, cache)``, ``backward(dout, cache) -> (dinputs, grads)``
(dinputs a dict by name: {"src_embeddings", "tgt_embeddings", "memory"}, {"embeddings"} or
{"images"}), and ``loss(...) -> (loss, grads)``."""
from .action_lm import ActionLM, ActionLMConfig
from .classifier import EncoderClassifier, EncoderClassifierConfig
from .config import Config
from .lm import DecoderLM, DecoderLMConfig
from .transformer import Transformer, TransformerConfig
from .vit import ViT, ViTConfig
from .vla import VLA, VLAConfig

__all__ = ["ActionLM", "ActionLMConfig", "Config", "DecoderLM", "DecoderLMConfig", "EncoderClassifier",
           "EncoderClassifierConfig", "Transformer", "TransformerConfig", "ViT", "ViTConfig", "VLA", "VLAConfig"]
