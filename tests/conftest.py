# BLAS threads are left as the library sets them (as users run): `make test` exercises the threaded
# kernels, and CI's second run sets OPENBLAS_NUM_THREADS=1 for the single-threaded ones.
import numpy as np
import pytest

# A missing oracle (torch, scipy, ..., the MiniLM weights) skips its tests, but fails them under CI.
from oracles import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401


@pytest.fixture
def rng():
    return np.random.default_rng(0)
