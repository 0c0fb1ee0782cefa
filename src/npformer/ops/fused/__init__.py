"""Compiled twins of the NumPy reference ops (numba), each in its own module named after its reference.

The reference stays the code a learner reads and the specification: each twin's header names the
reference it mirrors and the test that ties them (tests/ops/test_twins.py). These modules import
numba at their top, so nothing imports them except the references' public functions, on a twin's
first call (``ops/kernels.py`` chooses). The kernels split their work by the array's shape alone and
sum across rows in a fixed order: the same bits on any number of numba threads.
"""
