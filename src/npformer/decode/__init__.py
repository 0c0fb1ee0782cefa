"""Decoding: a KV cache for incremental decoding, greedy search, beam search with the GNMT
length penalty, and temperature / top-k sampling. Every strategy drives a *stepper*
(``make_stepper``): cached (``kvcache``) or recomputing the whole prefix each step. A prefix-LM
policy's action tokens decode over the same cache (``action_lm``: ``act_tokens``)."""
from .action_lm import CachedActionLM, act_tokens
from .beam import Hypothesis, beam_search, length_penalty
from .greedy import decode_loop, greedy, strip_eos
from .kvcache import CachedLM, CachedTransformerDecoder, KVCache
from .sample import sample, sample_next
from .steppers import RecomputeLM, RecomputeTransformerDecoder, is_encoder_decoder, make_stepper

__all__ = [
    "CachedActionLM", "CachedLM", "CachedTransformerDecoder", "Hypothesis", "KVCache", "RecomputeLM",
    "RecomputeTransformerDecoder", "act_tokens", "beam_search", "decode_loop", "greedy", "is_encoder_decoder",
    "length_penalty", "make_stepper", "sample", "sample_next", "strip_eos",
]
