"""map_threads: results in order, the BLAS held to one thread only while the threads run,
and an error in a piece reaches the caller with the BLAS setting restored; two user threads
encoding at once share that limit and leave the BLAS as they found it."""
import threading

import numpy as np
import pytest

from npformer.pretrained import SentenceEncoder
from npformer.pretrained.parallel import default_threads, map_threads
from oracles import minilm_dir, require

threadpoolctl = require("threadpoolctl")


def set_blas_threads(n: int) -> None:
    """Set the BLAS to n threads from a thread of its own, which then ends: with threadpoolctl >= 3.8
    a live thread that set a limit keeps the sole right to set OpenBLAS's, and this test's threads
    must be free to set it, as a user's are."""
    t = threading.Thread(target=threadpoolctl.threadpool_limits, kwargs={"limits": n, "user_api": "blas"})
    t.start()
    t.join()


def blas_threads():
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


def test_results_in_order_and_blas_restored():
    seen = []

    def work(i):
        seen.append(blas_threads())
        return i * i, float(np.ones((64, 64)) @ np.ones(64) @ np.ones(64))
    with threadpoolctl.threadpool_limits(2, user_api="blas"):          # pytest's conftest sets 1
        before = blas_threads()
        out = list(map_threads(work, list(range(9)), threads=2))
        after = blas_threads()
    assert [o[0] for o in out] == [i * i for i in range(9)]
    assert before and all(n == 2 for n in before)
    assert all(s == [1] * len(before) for s in seen), "the BLAS runs on one thread inside the pieces"
    assert after == before


def test_error_in_a_piece_propagates_and_restores():
    def work(i):
        if i == 3:
            raise ValueError("piece 3 failed")
        return i
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        with pytest.raises(ValueError, match="piece 3"):
            list(map_threads(work, list(range(8)), threads=2))
        assert all(n == 2 for n in blas_threads())


def test_one_thread_runs_inline():
    assert list(map_threads(lambda i: i + 1, [1, 2], threads=1)) == [2, 3]
    assert default_threads() >= 1


def test_two_threads_encoding_at_once_get_their_results_and_restore_the_blas(monkeypatch):
    """Thread a starts encoding (the BLAS goes to one thread), b starts before a ends and ends after
    it. Each gets the embeddings it gets alone; b still runs on one BLAS thread after a ended, and
    the BLAS ends on the 2 threads it had. (Each call saving and restoring its own limit left it on 1.)"""
    enc = SentenceEncoder.load(minilm_dir())
    texts = {"a": ["the cat sat on the mat"], "b": ["how do I reset my password?"]}   # small work: inline
    alone = {k: enc.encode(v) for k, v in texts.items()}
    a_in, b_in, a_done = threading.Event(), threading.Event(), threading.Event()
    seen, out, errors = {}, {}, []
    real = enc.model.infer

    def infer(seqs):                                   # runs on the user thread that called encode
        name = threading.current_thread().name
        if name == "a":
            a_in.set()
            assert b_in.wait(10), "b never started"
        else:
            b_in.set()
            assert a_done.wait(10), "a never ended"
        seen[name] = blas_threads()
        return real(seqs)
    monkeypatch.setattr(enc.model, "infer", infer)

    def run(name):
        try:
            out[name] = enc.encode(texts[name])
        except BaseException as e:                     # reaches the test below
            errors.append(e)
        finally:
            if name == "a":
                a_done.set()

    threads = {k: threading.Thread(target=run, args=(k,), name=k) for k in texts}
    was = max(blas_threads())
    set_blas_threads(2)
    try:
        before = blas_threads()
        threads["a"].start()
        assert a_in.wait(10)                           # a holds the BLAS to one thread now
        threads["b"].start()
        for t in threads.values():
            t.join()
        after = blas_threads()
    finally:
        set_blas_threads(was)
    assert not errors, errors
    for k in texts:
        np.testing.assert_array_equal(out[k], alone[k], err_msg=k)
    assert seen == {"a": [1] * len(before), "b": [1] * len(before)}
    assert after == before and all(n == 2 for n in before)
