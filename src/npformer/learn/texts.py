"""What the learner reads of each exercise: its contract and one hint (the stub's docstring) and the
reference solution, as source text. ``exercises.py`` joins them with the grading into ``EXERCISES``.

The solutions are plain NumPy, written as one workbook: ``np`` is imported, and each may call the
ones above it (multi_head_attention calls split_heads, attention and merge_heads).
"""
from __future__ import annotations

SOLUTIONS = {
    "softmax": """\
def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))          # the largest exp is 1: no overflow
    return e / e.sum(axis=-1, keepdims=True)
""",
    "attention": """\
def attention(q, k, v, mask=None):
    scale = q.dtype.type(1 / np.sqrt(q.shape[-1]))          # keeps float32 float32
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale   # (..., Tq, Tk)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)                # a row with no allowed key: exp(-inf) = 0
    e = np.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    weights = e / np.where(total > 0, total, 1)             # that row stays all zeros, never 0 / 0
    return np.matmul(weights, v), weights
""",
    "split_heads": """\
def split_heads(x, n_heads):
    b, t, e = x.shape
    return x.reshape(b, t, n_heads, e // n_heads).transpose(0, 2, 1, 3)
""",
    "merge_heads": """\
def merge_heads(x):
    b, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * d)
""",
    "layer_norm": """\
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)                     # biased: divided by C
    return (x - mean) / np.sqrt(var + x.dtype.type(eps)) * gamma + beta
""",
    "positional_encoding": """\
def positional_encoding(T, d):
    angle = np.arange(T)[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)   # (T, d/2)
    pe = np.zeros((T, d))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return pe
""",
    "causal_mask": """\
def causal_mask(T):
    return np.tri(T, dtype=bool)                            # True at and below the diagonal
""",
    "multi_head_attention": """\
def multi_head_attention(x, params, n_heads, mask=None):
    q, k, v = (split_heads(x @ params["w_" + n] + params["b_" + n], n_heads) for n in "qkv")
    out, _ = attention(q, k, v, mask)                       # scales by 1/sqrt(E/H)
    return merge_heads(out) @ params["w_o"] + params["b_o"]
""",
    "feed_forward": """\
def feed_forward(x, params):
    h = np.maximum(x @ params["w_1"] + params["b_1"], 0)
    return h @ params["w_2"] + params["b_2"]
""",
    "encoder_block": """\
def encoder_block(x, params, n_heads, mask=None):
    h = layer_norm(x + multi_head_attention(x, params["attn"], n_heads, mask), **params["ln_1"])
    return layer_norm(h + feed_forward(h, params["ffn"]), **params["ln_2"])
""",
    "softmax_backward": """\
def softmax_backward(dy, y):
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))
""",
    "attention_backward": """\
def attention_backward(dout, q, k, v, weights):
    scale = q.dtype.type(1 / np.sqrt(q.shape[-1]))
    dv = np.swapaxes(weights, -1, -2) @ dout                # out = weights v
    dweights = dout @ np.swapaxes(v, -1, -2)
    dscores = softmax_backward(dweights, weights) * scale
    return dscores @ k, np.swapaxes(dscores, -1, -2) @ q, dv
""",
}

# exercise name -> (contract, hint)
CONTRACTS = {
    "softmax": ("""Softmax over the last axis of x, for any shape.

x: float array (..., N). Returns y of x's shape and dtype (float32 in, float32 out);
every row along the last axis is positive and sums to 1.""",
                "exp of a large score overflows: subtract each row's max first, it does not change the result."),
    "attention": ("""Scaled dot-product attention, softmax(q k^T / sqrt(D)) v, over the last two axes.

q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), any leading batch or head axes.
mask: None or boolean, broadcastable to (..., Tq, Tk); True = the query may attend to that key.
Returns (out, weights): out (..., Tq, Dv), weights (..., Tq, Tk), in the inputs' dtype.
A query row with no allowed key gets all-zero weights and a zero output, never NaN.""",
                  "transpose only k's last two axes (np.swapaxes(k, -1, -2)); k.T reverses all of them."),
    "split_heads": ("""Split the model width into heads: (B, T, E) -> (B, H, T, E/H), H = n_heads.

Head h holds the features h*E/H to (h+1)*E/H of every token. Same dtype as x.""",
                    "reshape to (B, T, H, E/H) first, then move the head axis forward."),
    "merge_heads": ("""Concatenate the heads again: (B, H, T, D) -> (B, T, H*D), the inverse of split_heads.

Same dtype as x.""",
                    "undo split_heads' steps in the reverse order."),
    "layer_norm": ("""Layer normalisation over the last axis, as the paper and torch.nn.LayerNorm.

x (..., C), gamma (C,), beta (C,): (x - mean) / sqrt(var + eps) * gamma + beta, with the
biased variance (divided by C). Returns x's shape and dtype.""",
                   "eps goes inside the square root, and np.var's default (ddof=0) is the biased variance."),
    "positional_encoding": ("""The paper's sinusoidal positions, a float64 (or float32) array (T, d) for an even d:

PE[p, 2i] = sin(p / 10000^(2i/d)),  PE[p, 2i+1] = cos(p / 10000^(2i/d)).""",
                            "compute the angles p / 10000^(2i/d) once as a (T, d/2) array."),
    "causal_mask": ("""Boolean (T, T) mask for a decoder: mask[i, j] is True where key j is at or before
query i (j <= i), so that no token reads ahead.""",
                    "np.tri builds a lower triangle."),
    "multi_head_attention": ("""Multi-head self-attention of x (B, T, E) with H = n_heads heads.

params: w_q, w_k, w_v, w_o of shape (E, E) and b_q, b_k, b_v, b_o of shape (E,),
applied as x @ w + b. q, k, v are projected, split into heads (B, H, T, E/H), attended
with 1/sqrt(E/H) and the optional mask (boolean, broadcastable to (B, H, T, T), True =
may attend), merged back to (B, T, E), then projected by w_o, b_o.
Returns out (B, T, E) in x's dtype.""",
                             "reuse your split_heads, attention and merge_heads."),
    "feed_forward": ("""Position-wise feed-forward network: relu(x @ w_1 + b_1) @ w_2 + b_2.

x (..., E); params: w_1 (E, F), b_1 (F,), w_2 (F, E), b_2 (E,). Returns x's shape and dtype.""",
                     "np.maximum(h, 0) is the ReLU."),
    "encoder_block": ("""The paper's post-LN encoder block, x (B, T, E) -> (B, T, E):

h = layer_norm(x + multi_head_attention(x, params["attn"], n_heads, mask), **params["ln_1"])
out = layer_norm(h + feed_forward(h, params["ffn"]), **params["ln_2"])
params["ln_1"], params["ln_2"] hold gamma and beta (eps stays 1e-5). Returns x's dtype.""",
                      "residual add first, then normalise: layer_norm(x + sublayer(x))."),
    "softmax_backward": ("""Backward of softmax over the last axis: given y = softmax(x) and dy = dL/dy,
return dx = dL/dx, of y's shape and dtype.""",
                         "each y of a row depends on every x of that row: the Jacobian is diag(y) - y y^T; "
                         "apply it to dy without building it."),
    "attention_backward": ("""Backward of attention(q, k, v) with no mask, scale 1/sqrt(D).

dout (..., Tq, Dv) = dL/dout; weights (..., Tq, Tk) is the forward's softmax.
Returns (dq, dk, dv) with the shapes and dtype of q, k, v.""",
                           "go back through out = w v, then the softmax, then scores = q k^T / sqrt(D)."),
}
