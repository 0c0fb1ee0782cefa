"""Pretrained BERT-family sentence encoders (all-MiniLM-L6-v2 by default), run by npformer's
own modules: no torch, no transformers."""
from .bert import BertConfig, BertModel, load_bert
from .encoder import SentenceEncoder, default_model_dir
from .tokenizer import WordPieceTokenizer

__all__ = ["BertConfig", "BertModel", "SentenceEncoder", "WordPieceTokenizer", "default_model_dir", "load_bert"]
