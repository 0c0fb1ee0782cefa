"""map_threads: results in order, the BLAS held to one thread only while the threads run,
and an error in a piece reaches the caller with the BLAS setting restored."""
import numpy as np
import pytest

from npformer.pretrained.parallel import default_threads, map_threads
from oracles import require

threadpoolctl = require("threadpoolctl")


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
