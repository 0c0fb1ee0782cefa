"""``npformer translate DIR TEXT...``: translate with a trained encoder-decoder run.

    npformer translate runs/dates "29 November 2026" "Nov 3, 1999"
    npformer translate runs/dates --input dates.txt --beam 1      # one source a line; greedy

Prints one result a line, in the order of the sources. Beam search by default, with the
paper's beam size 4 and length penalty alpha 0.6; ``--beam 1`` is greedy decoding.
"""
from __future__ import annotations

from . import CLIError

BATCH = 64                      # sources decoded together


HELP = "translate text with a trained encoder-decoder run"
DESCRIPTION = "Translate each TEXT (or each line of --input FILE) with the run's model; one result a line, in order."


def add_arguments(p) -> None:
    p.add_argument("run", metavar="DIR", help="a run directory of an encoder-decoder task (dates, copy)")
    p.add_argument("texts", nargs="*", metavar="TEXT", help="sources to translate")
    p.add_argument("--input", metavar="FILE", help="a UTF-8 file with one source a line")
    p.add_argument("--beam", type=int, default=4, metavar="K", help="beam size (default 4; 1 = greedy)")
    p.add_argument("--alpha", type=float, default=0.6, metavar="A",
                   help="length penalty alpha, lp = ((5 + |Y|) / 6) ** alpha (default 0.6)")


def read_sources(texts: list[str], input_path: str | None) -> list[str]:
    """The sources from the arguments or the file (one a line); one-line errors for empty input."""
    if texts and input_path:
        raise CLIError("give sources as TEXT arguments or with --input FILE, not both")
    if input_path:
        with open(input_path, "rb") as f:
            raw = f.read()
        try:
            lines = raw.decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise CLIError(f"{input_path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
        if not lines:
            raise CLIError(f"empty input: {input_path} has no lines")
        for i, line in enumerate(lines, 1):
            if not line.strip():
                raise CLIError(f"empty input: line {i} of {input_path} is blank")
        return lines
    if not texts:
        raise CLIError("empty input: give TEXT to translate or --input FILE")
    return list(texts)


def translate_texts(run, texts: list[str], beam: int = 4, alpha: float = 0.6) -> list[str]:
    """Translate ``texts`` with a loaded run (``train.checkpoint.load_run``); one string each."""
    import numpy as np

    from ..data.vocab import pad_batch
    from ..decode import beam_search, greedy, strip_eos

    if beam < 1:
        raise CLIError(f"--beam must be >= 1, got {beam}")
    task, model = run.task, run.model
    vocab = task.tgt_vocab
    encoded = [task.encode_source(t) for t in texts]          # ValueError: empty, unknown characters
    max_new = min(task.max_target_len, model.config.max_len)
    out: list[str] = []
    for i in range(0, len(encoded), BATCH):
        src = pad_batch(encoded[i:i + BATCH], model.config.pad_id)          # (B, S)
        bos = np.full((len(src), 1), vocab.bos_id, dtype=np.int64)          # (B, 1)
        if beam == 1:
            rows = strip_eos(greedy(model, bos, max_new, src_ids=src, eos_id=vocab.eos_id), vocab.eos_id)
        else:
            hyps = beam_search(model, bos, max_new, src_ids=src, eos_id=vocab.eos_id, beam=beam, alpha=alpha)
            rows = [h[0].tokens for h in hyps]
        out.extend(task.decode_target(r) for r in rows)
    return out


def run(args) -> int:
    from ..train.checkpoint import load_run

    sources = read_sources(args.texts, args.input)
    if args.beam < 1:
        raise CLIError(f"--beam must be >= 1, got {args.beam}")
    r = load_run(args.run, model_kind="transformer")
    for line in translate_texts(r, sources, args.beam, args.alpha):
        print(line)
    return 0
