"""Word pieces as words, and what a word-piece tokenizer cut off (docs/EXPLORE_FORMAT.md, GROUP.word_index
and INPUT.truncated).

A word is a piece and the '##' continuations that follow it, as WordPiece split it (BERT's pre-tokenizer
already made punctuation its own word); [CLS], [SEP] and [PAD] are each a word of their own. The page
merges a (Tq, Tk) attention map into words by summing over a word's key pieces and averaging over its
query pieces, so each word row still sums to 1.

    word_fields(pieces, pieces)      # {"word_index": {"query", "key"}, "word_labels": {"query", "key"}}
    truncation(text, spans, limit)   # None, or where the text was cut
"""
from __future__ import annotations

SPECIALS = ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "<s>", "</s>", "<pad>", "<mask>")
CONTINUATION = "##"
WORD_START = "\u0120"     # byte-level BPE (RoBERTa): 'Ġ' marks a piece that starts a word after a space


def _byte_level(pieces: list[str]) -> bool:
    return any(p.startswith(WORD_START) for p in pieces)


def word_index(pieces: list[str]) -> list[int]:
    """The word each piece belongs to, 0, 1, ... in order: a '##' piece joins the word before it (WordPiece);
    with byte-level pieces (RoBERTa's 'Ġ' marks), a piece without the mark joins the word before it."""
    byte_level = _byte_level(pieces)
    out: list[int] = []
    for n, p in enumerate(pieces):
        if byte_level:
            continues = not p.startswith(WORD_START) and p not in SPECIALS
        else:
            continues = p.startswith(CONTINUATION) and len(p) > len(CONTINUATION)
        joins = n > 0 and continues and pieces[n - 1] not in SPECIALS
        out.append(out[-1] if joins else (out[-1] + 1 if out else 0))
    return out


def word_labels(pieces: list[str], index: list[int]) -> list[str]:
    """Each word's text: its pieces joined, the '##' (or 'Ġ') marks dropped."""
    byte_level = _byte_level(pieces)
    labels: list[str] = []
    for p, w in zip(pieces, index, strict=True):
        if w == len(labels):
            labels.append(p[len(WORD_START):] if byte_level and p.startswith(WORD_START) else p)
        else:
            labels[w] += p if byte_level else p[len(CONTINUATION):]
    return labels


def word_fields(query_pieces: list[str], key_pieces: list[str]) -> dict:
    """GROUP.word_index and GROUP.word_labels for a group of word pieces."""
    qi, ki = word_index(query_pieces), word_index(key_pieces)
    return {"word_index": {"query": qi, "key": ki},
            "word_labels": {"query": word_labels(query_pieces, qi), "key": word_labels(key_pieces, ki)}}


def truncation(text: str, spans: list[tuple[int, int]], pieces: list[str], limit: int) -> dict | None:
    """INPUT.truncated: None when the pieces cover the whole text, else where it was cut. ``spans`` are the
    kept pieces' (start, end) character offsets in ``text`` ((0, 0) for the special tokens), ``limit`` the
    tokenizer's most pieces, specials included."""
    ends = [(e, n) for n, ((s, e), p) in enumerate(zip(spans, pieces, strict=True)) if p not in SPECIALS and e > s]
    kept, last = max(ends) if ends else (0, -1)
    dropped = len(text) - kept
    if not text[kept:].strip():
        return None
    after = pieces[last] if last >= 0 else ""
    return {"limit": int(limit), "pieces": len(pieces), "kept_chars": int(kept), "dropped_chars": int(dropped),
            "after_piece": after, "after_index": int(last),
            "note": (f"truncated to the model's limit of {limit} word pieces: kept characters 0-{kept - 1} (up to "
                     f"piece {last} {after!r}), dropped the last {dropped} of {len(text)} characters")}
