"""Models: the encoder-decoder Transformer, a decoder-only language model and an
encoder-only classifier/tagger, each with a JSON-serialisable config."""
from .classifier import EncoderClassifier, EncoderClassifierConfig
from .config import Config
from .lm import DecoderLM, DecoderLMConfig
from .transformer import Transformer, TransformerConfig
from .vit import ViT, ViTConfig
from .vla import VLA, VLAConfig

__all__ = ["Config", "DecoderLM", "DecoderLMConfig", "EncoderClassifier", "EncoderClassifierConfig",
           "Transformer", "TransformerConfig", "ViT", "ViTConfig", "VLA", "VLAConfig"]
