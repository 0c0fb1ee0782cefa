"""``npformer generate DIR --prompt P --tokens N``: continue a prompt with a trained text run, or with
a GPT-2-family Hugging Face directory (config.json with model_type gpt2; ``pretrained.CausalLM``).

    npformer generate runs/text --prompt "Once upon a time" --tokens 300 --temperature 0.8 --top-k 20
    npformer generate my-gpt2 --prompt "Once upon a time" --tokens 40

A GPT-2 directory decodes greedily unless --temperature is given, and prints the prompt followed by
its continuation, as for a run.

Samples with the KV cache from ``np.random.default_rng(--seed)`` (same seed, same text) and prints
the prompt followed by its continuation. The special tokens (<pad>, <bos>, <eos>, <unk>) never
occur in the training text and are never sampled. A model reads at most max_len positions: when
the text outgrows that, generation continues from the last max_len / 2 characters.
"""
from __future__ import annotations

from . import CLIError

GPT2_TOKENS = 50                     # new tokens a GPT-2 directory generates without --tokens

HELP = "continue a prompt with a trained language-model run or a GPT-2 directory"
DESCRIPTION = ("Continue --prompt with --tokens sampled characters (a text run), or --tokens new tokens "
               "(a GPT-2-family Hugging Face directory, greedy by default).")


def add_arguments(p) -> None:
    p.add_argument("run", metavar="DIR", help="a run directory of the text task, or a GPT-2 directory")
    p.add_argument("--prompt", required=True, metavar="P", help="the text to continue")
    p.add_argument("--tokens", type=int, default=None, metavar="N",
                   help=f"characters (a run; required) or tokens (a GPT-2 directory; default {GPT2_TOKENS}) "
                        "to generate")
    p.add_argument("--temperature", type=float, default=None, metavar="T",
                   help="softmax temperature (default: 1 for a run, 0 = greedy for a GPT-2 directory)")
    p.add_argument("--top-k", type=int, default=None, metavar="K",
                   help="sample among the K most likely characters (tokens) only")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the sampler (default 0)")


def generate_text(run, prompt: str, n_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                  seed: int = 0) -> str:
    """The continuation (n_tokens characters) of ``prompt`` under a loaded decoder-only run."""
    import numpy as np

    from ..data.vocab import SPECIALS
    from ..decode import decode_loop, sample_next

    if n_tokens < 1:
        raise CLIError(f"--tokens must be >= 1, got {n_tokens}")
    if not (np.isfinite(temperature) and temperature >= 0):
        raise CLIError(f"--temperature must be a number >= 0, got {temperature}")
    task, model = run.task, run.model
    n_chars = len(task.vocab) - len(SPECIALS)
    if top_k is not None and not 1 <= top_k <= n_chars:
        raise CLIError(f"--top-k must be between 1 and the {n_chars} characters of the vocabulary, got {top_k}")
    ids = task.encode_source(prompt)                              # ValueError: empty, unknown characters
    rng = np.random.default_rng(seed)
    n_special = len(SPECIALS)

    def choose(logits):                                           # (B, V) -> (B,)
        logits = logits.copy()
        logits[:, :n_special] = -np.inf                           # never <pad>, <bos>, <eos>, <unk>
        return sample_next(logits, rng, temperature, top_k)

    max_len = model.config.max_len
    context = ids[-max(1, max_len // 2):] if len(ids) >= max_len else ids
    out: list[int] = []
    while len(out) < n_tokens:
        room = max_len - len(context) + 1                         # the last token is never fed back
        new = decode_loop(model, context[None], min(room, n_tokens - len(out)), choose)[0]  # (N,)
        out.extend(new.tolist())
        context = np.concatenate([context, new])[-max(1, max_len // 2):]   # slide the window
    return task.decode_target(np.asarray(out))


def run(args) -> int:
    from ..pretrained.hf import model_type
    from ..train.checkpoint import load_run

    if not args.prompt:
        raise CLIError("empty input: give a non-empty --prompt")
    if args.tokens is not None and args.tokens < 1:
        raise CLIError(f"--tokens must be >= 1, got {args.tokens}")
    kind = model_type(args.run)
    if kind is not None:
        return _run_hf(args, kind)
    if args.tokens is None:
        raise CLIError("--tokens N is required for a run directory")
    r = load_run(args.run, model_kind="decoder_lm")
    temperature = 1.0 if args.temperature is None else args.temperature
    text = generate_text(r, args.prompt, args.tokens, temperature, args.top_k, args.seed)
    print(args.prompt + text)
    return 0


def _run_hf(args, kind: str) -> int:
    """A Hugging Face directory: GPT-2-family only (a causal LM)."""
    from ..pretrained import CausalLM

    if kind != "gpt2":
        raise CLIError(f"{args.run}: model_type {kind!r} is not a causal language model npformer runs "
                       "(generate reads model_type 'gpt2')")
    lm = CausalLM.load(args.run)
    n = GPT2_TOKENS if args.tokens is None else args.tokens
    temperature = 0.0 if args.temperature is None else args.temperature
    text = lm.generate(args.prompt, n, temperature=temperature, top_k=args.top_k, seed=args.seed)
    print(args.prompt + str(text))
    return 0
