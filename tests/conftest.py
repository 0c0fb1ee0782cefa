import os

# Keep BLAS single-threaded under pytest: the suite runs many tiny products, where threads only add overhead.
os.environ.setdefault("OMP_NUM_THREADS", "1")
