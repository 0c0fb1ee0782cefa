"""Four workbooks that try to pass ``npformer learn check`` without one right function, as the grader had to
withstand them: each writes only arrays of zeros of the expected shape and dtype (``ZEROS``), and cheats
in one way. ``workbook(trick)`` is the text of a transformer.py."""
from __future__ import annotations

ZEROS = '''
def softmax(x):
    return _fake(x.shape, x.dtype)


def attention(q, k, v, mask=None):
    return _fake(q.shape[:-1] + v.shape[-1:], q.dtype), _fake(q.shape[:-1] + k.shape[-2:-1], q.dtype)


def split_heads(x, n_heads):
    b, t, e = x.shape
    return _fake((b, n_heads, t, e // n_heads), x.dtype)


def merge_heads(x):
    b, h, t, d = x.shape
    return _fake((b, t, h * d), x.dtype)


def layer_norm(x, gamma, beta, eps=1e-5):
    return _fake(x.shape, x.dtype)


def positional_encoding(T, d):
    return _fake((T, d), np.float64)


def causal_mask(T):
    return _fake((T, T), bool)


def multi_head_attention(x, params, n_heads, mask=None):
    return _fake(x.shape, x.dtype)


def feed_forward(x, params):
    return _fake(x.shape, x.dtype)


def encoder_block(x, params, n_heads, mask=None):
    return _fake(x.shape, x.dtype)


def softmax_backward(dy, y):
    return _fake(dy.shape, dy.dtype)


def attention_backward(dout, q, k, v, weights):
    return _fake(q.shape, q.dtype), _fake(k.shape, k.dtype), _fake(v.shape, v.dtype)
'''

PLAIN = '''
import numpy as np


def _fake(shape, dtype):
    return np.zeros(shape, dtype)
'''

TRICKS = {
    # the grading child's own pipe, found through gc: "pass" for every exercise, then an exit before any grading
    "pipe": PLAIN + '''
import gc
import os
from multiprocessing.connection import Connection

for _conn in [o for o in gc.get_objects() if isinstance(o, Connection)]:
    try:
        _conn.send(("ready",))
        for _ in range(12):
            _conn.send(("pass", "", ""))
    except OSError:
        continue
    os._exit(0)
''',
    # an ndarray subclass that answers every comparison with True
    "subclass": '''
import numpy as np


class Agreeable(np.ndarray):
    def __array_ufunc__(self, *args, **kwargs):
        return True

    def __array_function__(self, *args, **kwargs):
        return True


def _fake(shape, dtype):
    return np.zeros(shape, dtype).view(Agreeable)
''',
    # the grader's own function replaced by the workbook's top-level code
    "grade": PLAIN + '''
import npformer.learn.checks
import npformer.learn.exercises
from npformer.learn.checks import Verdict

npformer.learn.exercises.grade = lambda *args, **kwargs: Verdict("pass")
npformer.learn.checks.grade = npformer.learn.exercises.grade
''',
    # NumPy's comparisons replaced
    "allclose": PLAIN + '''
np.allclose = lambda *args, **kwargs: True
np.array_equal = lambda *args, **kwargs: True
''',
}


def workbook(trick: str) -> str:
    return TRICKS[trick] + "\n" + ZEROS
