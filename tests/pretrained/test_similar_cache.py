"""npformer similar's cache of corpus embeddings: written next to the corpus on the first search,
read (only the queries embedded) on the next, rewritten when the corpus or the model changes,
a plain .npz without pickles, and a broken cache file is recomputed, never trusted."""
import io

import numpy as np
import pytest

from npformer.cli import CLIError, main
from npformer.cli.embed import _lines
from npformer.cli.similar import cache_path, model_key, split_lines, top_k
from npformer.pretrained import encoder as encoder_module
from oracles import minilm_dir

DOCS = ["Stock markets fell sharply today.", "", "The cat sleeps on the sofa.", "Rain is expected tomorrow.",
        "A new phone was released.", "The team won the final."]


@pytest.fixture(scope="module")
def model_dir():
    return minilm_dir()


@pytest.fixture
def encoded(monkeypatch):
    """Counts the texts SentenceEncoder.encode is asked to embed, per call."""
    calls = []
    real = encoder_module.SentenceEncoder.encode

    def counting(self, sentences, *a, **k):
        sentences = list(sentences)
        calls.append(len(sentences))
        return real(self, sentences, *a, **k)
    monkeypatch.setattr(encoder_module.SentenceEncoder, "encode", counting)
    return calls


def search(capsys, corpus, *extra):
    code = main(["similar", "--corpus", str(corpus), "--top-k", "3", *extra, "a kitten on a couch", "weather"])
    out = capsys.readouterr().out
    assert code == 0
    return out


@pytest.mark.usefixtures("model_dir")
def test_cache_written_then_used_then_invalidated(tmp_path, capsys, encoded):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(DOCS) + "\n", encoding="utf-8")
    first = search(capsys, corpus)
    assert encoded == [5, 2], "5 non-blank lines, then the 2 queries"
    cache = cache_path(corpus)
    assert cache.is_file() and cache.parent == corpus.parent
    with np.load(cache, allow_pickle=False) as z:                       # no pickles inside
        assert z["embeddings"].shape == (5, 384) and z["embeddings"].dtype == np.float32
    assert not [p for p in tmp_path.iterdir() if p not in (corpus, cache)], "no temporary left behind"

    encoded.clear()
    assert search(capsys, corpus) == first
    assert encoded == [2], "the second search embeds only the queries"
    assert search(capsys, corpus, "--no-cache") == first

    corpus.write_text("\n".join(DOCS[::-1]) + "\nSnow tomorrow.\n", encoding="utf-8")   # changed corpus
    encoded.clear()
    changed = search(capsys, corpus)
    assert encoded == [6, 2], "a changed corpus is embedded again"
    assert "Snow tomorrow." in changed and changed != first
    encoded.clear()
    assert search(capsys, corpus) == changed and encoded == [2]


@pytest.mark.usefixtures("model_dir")
def test_broken_or_foreign_cache_is_recomputed(tmp_path, capsys, encoded):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(DOCS), encoding="utf-8")
    ref = search(capsys, corpus, "--no-cache")
    assert not cache_path(corpus).exists()
    cache_path(corpus).write_bytes(b"not an npz")
    encoded.clear()
    assert search(capsys, corpus) == ref and encoded == [5, 2]
    with np.load(cache_path(corpus), allow_pickle=False) as z:        # replaced by a good one
        assert z["model"].item() == model_key(minilm_dir())
        z = dict(z)
    z["model"] = np.array("another model")                             # same corpus, another model
    np.savez(cache_path(corpus), **z)
    encoded.clear()
    assert search(capsys, corpus) == ref and encoded == [5, 2]


def test_top_k_best_first_ties_by_line():
    scores = np.array([[0.1, 0.9, 0.5, 0.9, -1.0], [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    assert [list(r) for r in top_k(scores, 3)] == [[1, 3, 2], [0, 1, 2]]
    assert [list(r) for r in top_k(scores, 5)] == [[1, 3, 2, 0, 4], [0, 1, 2, 3, 4]]
    rng = np.random.default_rng(0)
    s = rng.normal(size=(3, 200)).astype(np.float32)
    for row, best in zip(s, top_k(s, 7), strict=True):
        assert list(best) == list(np.argsort(-row, kind="stable")[:7])


@pytest.mark.parametrize("data", [b"", b"\n", b"a\nb", b"a\nb\n", b"a\r\nb\r\n\n", b"\xef\xbb\xbf", b"\xef\xbb\xbf\n",
                                  b"\xef\xbb\xbfa\nb", "caf\u00e9\n\u4e2d\r\n  \n".encode(), b"x\r", b"\r\n\r\n"])
def test_split_lines_is_embeds_line_reader(data):
    """similar's whole-file splitter (its fast twin) gives embed's line reader's lines."""
    assert split_lines(data, "c.txt") == list(_lines(io.BytesIO(data), "c.txt", "--corpus"))


def test_split_lines_reports_bad_utf8_as_embed_does():
    data = b"ok\nbad \xff here\n"
    with pytest.raises(CLIError) as a:
        split_lines(data, "c.txt")
    with pytest.raises(CLIError) as b:
        list(_lines(io.BytesIO(data), "c.txt", "--corpus"))
    assert str(a.value) == str(b.value) and "at byte 7" in str(a.value)
