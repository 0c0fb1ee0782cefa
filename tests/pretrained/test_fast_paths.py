"""The choices SentenceEncoder makes by itself, pinned to the reference: small work (a query) on
one thread with the BLAS on one thread, batches on the Python threads; the transposed weights
BertModel.infer keeps, and their refresh by load_state_dict."""
import numpy as np
import pytest

import npformer.ops.inference as inference
from npformer.pretrained import SentenceEncoder
from npformer.pretrained import encoder as encoder_module
from oracles import minilm_dir, require

threadpoolctl = require("threadpoolctl")
torch = require("torch")
sentence_transformers = require("sentence_transformers")

QUERIES = ["Hello", "how do I reset my password?", "the cat sat on the mat, quickly!", "Café naïve 1999"]


@pytest.fixture(scope="module")
def enc():
    return SentenceEncoder.load(minilm_dir())


@pytest.fixture(scope="module")
def st_embeddings():
    st = sentence_transformers.SentenceTransformer(str(minilm_dir()), device="cpu")
    with torch.inference_mode():
        return st.encode(QUERIES, batch_size=64, convert_to_numpy=True)


def blas_threads():
    return max(i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas")


def test_one_query_at_a_time_on_one_blas_thread(enc, st_embeddings, monkeypatch):
    seen = []
    real = enc.model.infer

    def watching(seqs):
        seen.append(blas_threads())
        return real(seqs)
    monkeypatch.setattr(enc.model, "infer", watching)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        for i, q in enumerate(QUERIES):
            ours = enc.encode([q], threads=2)
            assert np.abs(ours[0] - st_embeddings[i]).max() <= 1e-5, q
        assert blas_threads() == 2, "the BLAS setting is restored"
    assert seen == [1] * len(QUERIES)
    assert encoder_module.SMALL_WORK_TOKENS >= max(len(s) for s in enc.tokenizer.encode(QUERIES))


def test_queries_through_the_tiled_products(enc, st_embeddings, monkeypatch):
    """A query's products go in tiles (ops/inference.py matmul_inference): the embeddings stay
    those of sentence-transformers, and of whole products."""
    lengths = [len(s) for s in enc.tokenizer.encode(QUERIES)]
    assert max(lengths) <= inference.FEW_ROWS
    assert min(lengths) * 384 * 1152 > inference.TILE_MACS            # each query's (T, E) x (E, 3E), at least
    ours = np.concatenate([enc.encode([q]) for q in QUERIES])
    assert np.abs(ours - st_embeddings).max() <= 1e-5
    monkeypatch.setattr(inference, "FEW_ROWS", 0)                      # whole products
    assert np.abs(ours - np.concatenate([enc.encode([q]) for q in QUERIES])).max() <= 1e-6


def test_large_work_runs_on_the_python_threads(enc, monkeypatch):
    texts = [(w + " ") * 100 for w in ("word", "text", "line", "note")]  # 4 x 102 tokens > SMALL_WORK_TOKENS, distinct
    calls = []
    real = encoder_module.map_threads

    def watching(fn, items, threads, one_blas_thread=False):
        calls.append((len(items), threads, one_blas_thread))
        return real(fn, items, threads, one_blas_thread)
    monkeypatch.setattr(encoder_module, "map_threads", watching)
    a = enc.encode(texts, threads=2)
    assert calls == [(2, 2, False)]
    np.testing.assert_allclose(a, enc.encode(texts, threads=1), atol=1e-6)


def test_infer_transposed_weights_follow_load_state_dict(enc):
    model = SentenceEncoder.load(minilm_dir()).model                   # a copy we may change
    seqs = enc.tokenizer.encode(["a short text", "another one, a little longer"])
    h0, _ = model.infer(seqs)
    assert model._weights_t is not None
    state = model.state_dict()
    w = "encoder.layers.0.ffn.linear1.weight"
    model.load_state_dict({**{k: v.copy() for k, v in state.items()}, w: state[w] * 0.5})
    h1, off = model.infer(seqs)
    ids, mask = enc.tokenizer.pad(seqs)
    ref, _ = model.forward(ids, mask)                                  # the reference, new weights
    assert np.abs(h1 - h0).max() > 1e-3, "the new weights are used"
    for i in range(len(seqs)):
        assert np.abs(h1[off[i]:off[i + 1]] - ref[i, :len(seqs[i])]).max() <= 1e-4
