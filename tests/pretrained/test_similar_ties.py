"""Identical inputs, identical results: a text's embedding varies by about 1e-7 with the batch it runs
in and its place there, so ``SentenceEncoder.encode`` embeds each distinct text once (equal texts, equal
bits), a text alone and inside a batch of 64 others stay within 1e-6, ``npformer similar`` clips its
cosines to [-1, 1], and ten identical corpus lines rank 1 to 10 by line number. On all-MiniLM-L6-v2."""
import numpy as np
import pytest

from npformer.cli import main
from npformer.pretrained import SentenceEncoder
from oracles import minilm_dir

WORDS = "the a cat dog sat on mat sofa rain sun is red blue block box bowl stock market fell today".split()
TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def encoder():
    return SentenceEncoder.load(minilm_dir())


def _others(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(3, 9))) for _ in range(n)]


def test_equal_texts_get_equal_bits_wherever_they_stand(encoder):
    texts = _others(64)
    where = (0, 13, 31, 50, 63)
    for i in where:
        texts[i] = TEXT
    for threads in (1, 3):                                              # pieces of a batch side by side
        emb = encoder.encode(texts, batch_size=64, threads=threads)     # (64, 384)
        for i in where[1:]:
            assert np.array_equal(emb[i], emb[0]), (threads, i)
    ten = encoder.encode([TEXT] * 10, threads=3)                        # (10, 384): pieces of 4, 3 and 3
    assert all(np.array_equal(row, ten[0]) for row in ten)


def test_a_text_alone_and_inside_a_batch_of_64_others_differ_by_at_most_1e_6(encoder):
    others = _others(64, seed=1)
    alone = encoder.encode([TEXT], threads=1)[0]                         # (384,)
    inside = encoder.encode(others[:32] + [TEXT] + others[32:], batch_size=65)[32]
    assert np.abs(inside - alone).max() <= 1e-6


def test_ten_identical_lines_rank_1_to_10_by_line_number(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(f"{TEXT}\n" * 10)
    code = main(["similar", "--corpus", str(corpus), "--no-cache", "-k", "10", TEXT])
    out = capsys.readouterr().out.splitlines()[1:]
    assert code == 0 and [ln.split("line ")[1].split(":")[0] for ln in out] == [str(i) for i in range(1, 11)], out
    assert all(float(ln.split()[0]) <= 1.0 for ln in out), out


def test_cosine_scores_are_clipped_to_plus_minus_one():
    from npformer.cli.similar import cosine_scores

    rng = np.random.default_rng(0)
    for _ in range(1000):                                               # a float32 unit row whose v.v rounds above 1
        v = rng.normal(size=384).astype(np.float32)
        v /= np.sqrt(np.einsum("e,e->", v, v))
        if float(v @ v) > 1.0:
            break
    else:
        pytest.skip("no float32 unit row with v.v > 1 in 1,000 draws on this BLAS")
    rows = np.stack([v, -v])                                            # (2, 384)
    s = cosine_scores(rows, rows)                                       # (2, 2)
    assert s.max() <= 1.0 and s.min() >= -1.0
    np.testing.assert_allclose(s, [[1, -1], [-1, 1]], atol=1e-6)
