"""npformer similar's cache of corpus embeddings: written next to the corpus on the first search,
read (only the queries embedded) on the next, rewritten when the corpus or the model changes,
a plain .npz without pickles, and a broken cache file is recomputed, never trusted; one owned by
another user, writable by others or not a regular file is ignored and not written. Top-k's ties.
The tests of the cache's trust run on a tiny generated model (tiny_bert.py), in milliseconds."""
import io
import os
import zipfile

import numpy as np
import pytest
from tiny_bert import write_model

from npformer.cli import CLIError, main
from npformer.cli import similar as similar_module
from npformer.cli.embed import _lines
from npformer.cli.similar import CACHE_VERSION, cache_path, model_key, split_lines, top_k
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


def test_top_k_ties_at_the_cut_off_go_to_the_lower_index():
    """Duplicate corpus lines score alike: the one cut off by k is the later one. argpartition alone picks
    among ties at the cut-off as its selection algorithm falls: here it gives [3] for the first row."""
    scores = np.array([[0.5, 0.5, 0.9, 0.9], [0.2, 0.7, 0.7, 0.7]], dtype=np.float32)
    assert [list(r) for r in top_k(scores, 1)] == [[2], [1]]
    assert [list(r) for r in top_k(scores, 2)] == [[2, 3], [1, 2]]
    rng = np.random.default_rng(1)
    s = rng.integers(0, 3, size=(300, 21)).astype(np.float32)          # many ties, at every cut-off
    for k in (1, 5, 17):
        for row, best in zip(s, top_k(s, k), strict=True):
            assert list(best) == list(np.argsort(-row, kind="stable")[:k])


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


# -- the cache's trust, on a tiny model ------------------------------------------------------------

@pytest.fixture
def tiny(tmp_path):
    """(search(*extra) -> (exit code, stdout, stderr), corpus, model directory) on the tiny model."""
    model = write_model(tmp_path / "model")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nrain today\nthe dog sat on the sofa\nstock market fell\n")

    def search(capsys, *extra):
        code = main(["similar", "--model", str(model), "--corpus", str(corpus), "-k", "2", *extra, "a cat"])
        out, err = capsys.readouterr()
        return code, out, err
    return search, corpus, model


def test_duplicate_lines_rank_the_first_one_first(tiny, capsys):
    search, corpus, _ = tiny
    corpus.write_text("rain today\nstock market fell\nthe cat sat\nthe cat sat\n")
    code, out, _ = search(capsys, "--top-k", "1", "--no-cache")
    assert code == 0 and "line 3: the cat sat" in out, out


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "compressed", "nan_row", "long_rows",
                                    "wrong_shape", "wrong_version"])
def test_a_corrupt_cache_is_ignored_and_rebuilt(tiny, capsys, encoded, damage):
    search, corpus, _ = tiny
    code, ref, _ = search(capsys)
    cache = cache_path(corpus)
    good = cache.read_bytes()
    with np.load(cache) as z:
        z = dict(z)
    if damage == "truncated":
        cache.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        cache.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4)
    elif damage == "empty":
        cache.write_bytes(b"")
    elif damage == "compressed":                                       # a zip bomb would be compressed
        np.savez_compressed(cache, **z)
    else:
        if damage == "nan_row":
            z["embeddings"][1, 0] = np.nan
        elif damage == "long_rows":                                    # finite, but not unit length
            z["embeddings"] *= 2
        elif damage == "wrong_shape":
            z["embeddings"] = z["embeddings"][:3]
        else:
            z["version"] = np.array(CACHE_VERSION + 7)
        np.savez(cache, **z)
    encoded.clear()
    code, out, err = search(capsys)
    assert code == 0 and out == ref and not err
    assert encoded == [4, 1], "the corpus is embedded again"
    assert cache.read_bytes() == good, "and the cache rewritten"


@pytest.mark.parametrize("case", ["other_user", "group_writable", "other_writable", "symlink"])
def test_a_cache_not_to_trust_is_ignored_and_not_written(tiny, capsys, encoded, monkeypatch, case):
    search, corpus, _ = tiny
    code, ref, _ = search(capsys)
    cache = cache_path(corpus)
    with np.load(cache) as z:
        planted = dict(z)
    planted["embeddings"] = planted["embeddings"][::-1].copy()         # a valid cache that lies
    np.savez(cache, **planted)
    planted_bytes = cache.read_bytes()
    if case == "other_user":
        monkeypatch.setattr(similar_module.os, "getuid", lambda: os.stat(cache).st_uid + 1)
    elif case == "group_writable":
        cache.chmod(0o664)
    elif case == "other_writable":
        cache.chmod(0o646)
    else:
        target = cache.with_name("elsewhere.npz")
        cache.rename(target)
        cache.symlink_to(target)
    encoded.clear()
    code, out, err = search(capsys)
    assert code == 0 and out == ref, "the planted embeddings are not used"
    assert encoded == [4, 1]
    assert "not trusted" in err and str(cache) in err and len(err.strip().splitlines()) == 1, err
    assert (cache.resolve() if case == "symlink" else cache).read_bytes() == planted_bytes, "nothing written"
    assert cache.is_symlink() == (case == "symlink")


def test_the_cache_is_written_for_its_owner_alone(tiny, capsys):
    search, corpus, _ = tiny
    old = os.umask(0o002)                                              # a umask that gives the group write
    try:
        assert search(capsys)[0] == 0
    finally:
        os.umask(old)
    assert cache_path(corpus).stat().st_mode & 0o022 == 0
    with zipfile.ZipFile(cache_path(corpus)) as zf:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())


@pytest.mark.parametrize("edit", ["tokenizer_config.json", "1_Pooling/config.json", "vocab.txt", "new_folder/x.json"])
def test_the_cache_key_covers_the_whole_model_directory(tiny, edit):
    _, _, model = tiny
    key = model_key(model)
    (model / ".git").mkdir()
    (model / ".git" / "index").write_text("hidden files are not the model")
    assert model_key(model) == key
    f = model / edit
    f.parent.mkdir(exist_ok=True)
    f.write_text(f.read_text() + " " if f.exists() else "{}")
    assert model_key(model) != key
