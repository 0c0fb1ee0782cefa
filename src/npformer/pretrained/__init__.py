"""Pretrained models run by npformer's own modules (no torch, no transformers): BERT-family sentence
encoders (all-MiniLM-L6-v2 by default), and GPT-2-family causal language models (``CausalLM``)."""
from .bert import BertConfig, BertModel, load_bert
from .causal_lm import CausalLM
from .encoder import SentenceEncoder, default_model_dir
from .gpt2 import ByteBPETokenizer, GPT2Config, load_gpt2
from .tokenizer import WordPieceTokenizer

__all__ = ["BertConfig", "BertModel", "ByteBPETokenizer", "CausalLM", "GPT2Config", "SentenceEncoder",
           "WordPieceTokenizer", "default_model_dir", "load_bert", "load_gpt2"]
