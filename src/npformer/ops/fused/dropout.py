"""Dropout's twin, alone or fused with the residual add: out = y * mask (+ x) in one pass, mask kept.

Mirrors ``ops/dropout.py`` ``dropout_forward`` and ``dropout_add_forward`` (dropout, then the residual
sum); pinned by tests/ops/test_twins.py (test_dropout_twins). The masks are the reference's, bit for bit:

- large arrays (the reference's row blocks): block i's draws come from its own SFC64 stream, seeded
  by ``SeedSequence(root, spawn_key=(i,))``. Each stream starts from the state NumPy's seeding gives it
  (``ops/dropout.py block_states`` reads it; the twin computes it, below) and the twin runs the
  generator itself, a chunk of raw 64-bit
  outputs at a time into a buffer, then one vectorized pass that reads the buffer as 32-bit draws, in
  the order ``random_raw(...).view(np.uint32)`` gives them, keeps where a draw is >= cut, and writes the
  mask and the output. A stream is one chain of dependent steps, so ``LANES`` blocks' streams run side
  by side (then a pair, then one alone: ``lane_groups``), each into its own buffer, as the lanes of one
  LLVM vector (``_fill_lanes``; numba's own loops left them scalar, several times slower). SFC64's step,
  as NumPy's C code takes it: tmp = a + b + counter; counter += 1; a = b ^ (b >> 11); b = c + (c << 3);
  c = rotl(c, 24) + tmp; the output is tmp. ``benchmarks/bench_bounds.py --only sfc64-lanes`` times
  the vector lanes against the scalar step ``_next`` (which the seeding's warm-up still takes).
- the blocks' starting states: ``block_states`` computes what ``ops/dropout.py block_states`` reads from
  NumPy's ``SFC64(SeedSequence(root, spawn_key=(k,)))``: SeedSequence's mixing of the entropy into its
  pool of four 32-bit words and its drawing of words from the pool, then SFC64's seeding (the words as
  a, b, c, the counter at 1, twelve outputs discarded), in one compiled call instead of two Python
  objects per block (tests/ops/test_twins.py test_dropout_twin_seeds_as_numpy).
- small arrays (one stream of ``rng``, float32 uniforms): the draws are NumPy's (``rng.random``, as the
  reference draws them) and only the mask and the sum are fused.

Dimension legend: N elements (flat), K blocks.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.core.extending import intrinsic, register_jitable

from ..kernels import Kernel

CHUNK = 1 << 16
RAW = 4096                 # raw 64-bit outputs per buffer and stream: 32 KiB, two draws each
LANES = 4                  # blocks whose streams run side by side (see _streams)
_1 = np.uint64(1)
_3 = np.uint64(3)
_11 = np.uint64(11)
_24 = np.uint64(24)
_40 = np.uint64(40)


@register_jitable
def _apply(yc, xc, has_x, mc, oc):  # type: ignore[no-untyped-def]
    """oc = yc * mc (+ xc): one chunk's output from its mask; xc is empty without a residual. oc may be yc."""
    if has_x:
        for i in range(yc.size):
            oc[i] = yc[i] * mc[i] + xc[i]
    else:
        for i in range(yc.size):
            oc[i] = yc[i] * mc[i]


@register_jitable
def _next(a, b, c, count):  # type: ignore[no-untyped-def]
    """One SFC64 step: (output, a, b, c, counter) after it."""
    tmp = a + b + count
    return tmp, b ^ (b >> _11), c + (c << _3), ((c << _24) | (c >> _40)) + tmp, count + _1


def _fill_lanes(lanes: int) -> Any:
    """A compiled-code function fill(st, raw, n): ``lanes`` SFC64 streams, each n steps, side by side as the
    lanes of one LLVM vector. st (lanes, 4) uint64, C-contiguous: stream v's state (a, b, c, counter),
    advanced in place; raw (lanes, M) uint64, C-contiguous, n <= M: raw[v, :n] <- stream v's outputs."""

    @intrinsic
    def fill(typingctx: Any, st: Any, raw: Any, n: Any) -> Any:
        def c_uint64_2d(a: Any) -> bool:
            return isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.uint64 and a.layout == "C"

        if not (c_uint64_2d(st) and c_uint64_2d(raw) and isinstance(n, types.Integer)):
            return None                                         # numba then reports no matching signature

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            i32, i64 = ir.IntType(32), ir.IntType(64)
            vec = ir.VectorType(i64, lanes)
            stp = context.make_array(sig.args[0])(context, builder, args[0]).data       # (lanes * 4,)
            raw_arr = context.make_array(sig.args[1])(context, builder, args[1])
            rawp, m = raw_arr.data, cgutils.unpack_tuple(builder, raw_arr.shape, 2)[1]  # (lanes * M,), M
            steps = context.cast(builder, args[2], sig.args[2], types.intp)

            def splat(c: int) -> Any:
                return ir.Constant(vec, [ir.Constant(i64, c)] * lanes)

            def at(v: int, field: int) -> Any:                  # &st[v, field]
                return builder.gep(stp, [ir.Constant(i64, 4 * v + field)])

            regs = []                                           # a, b, c, counter: one vector each
            for field in range(4):
                x = ir.Constant(vec, ir.Undefined)
                for v in range(lanes):
                    x = builder.insert_element(x, builder.load(at(v, field)), ir.Constant(i32, v))
                slot = cgutils.alloca_once(builder, vec)        # promoted to a register by LLVM
                builder.store(x, slot)
                regs.append(slot)
            with cgutils.for_range(builder, steps) as loop:
                a, b, c, k = (builder.load(r) for r in regs)
                t = builder.add(builder.add(a, b), k)          # the output
                builder.store(builder.xor(b, builder.lshr(b, splat(11))), regs[0])
                builder.store(builder.add(c, builder.shl(c, splat(3))), regs[1])
                rot = builder.or_(builder.shl(c, splat(24)), builder.lshr(c, splat(40)))
                builder.store(builder.add(rot, t), regs[2])
                builder.store(builder.add(k, splat(1)), regs[3])
                for v in range(lanes):                          # raw[v, j] = t[v]
                    off = builder.add(builder.mul(ir.Constant(i64, v), m), loop.index)
                    builder.store(builder.extract_element(t, ir.Constant(i32, v)), builder.gep(rawp, [off]))
            for field in range(4):
                x = builder.load(regs[field])
                for v in range(lanes):
                    builder.store(builder.extract_element(x, ir.Constant(i32, v)), at(v, field))
            return context.get_dummy_value()

        return types.void(st, raw, n), codegen

    return fill


_fill4, _fill2, _fill1 = (_fill_lanes(n) for n in (LANES, 2, 1))


def _streams(y: np.ndarray, x: np.ndarray, states: np.ndarray, per: int, groups: np.ndarray, cut: np.uint32,
             scale: np.ndarray, out: np.ndarray, mask: np.ndarray) -> None:
    # y, out, mask (N,); x (N,) or (0,) for no residual; states (K, 4) uint64, each block's SFC64 state
    # (a, b, c, counter); per: elements per block; groups (G, 2): (first block, LANES, 2 or 1 blocks) run
    # side by side; scale (1,) in the dtype. out may be y.
    n = y.size
    has_x = x.size > 0
    s = scale[0]
    zero = s - s
    for g in prange(groups.shape[0]):
        first, lanes = groups[g, 0], groups[g, 1]
        raw = np.empty((lanes, RAW), np.uint64)                       # one buffer per stream
        st = np.empty((lanes, 4), np.uint64)                          # the streams' states, advanced in place
        for v in range(lanes):
            for i in range(4):
                st[v, i] = states[first + v, i]
        for off in range(0, per, 2 * RAW):
            m = min(2 * RAW, per - off)
            if lanes == LANES:                                        # the chains side by side, one vector
                _fill4(st, raw, (m + 1) // 2)
            elif lanes == 2:
                _fill2(st, raw, (m + 1) // 2)
            else:
                _fill1(st, raw, (m + 1) // 2)
            for v in range(lanes):
                lo = (first + v) * per + off
                mv = min(m, n - lo)                                   # the last block may end early
                if mv <= 0:
                    continue
                draws = raw[v].view(np.uint32)                        # (2 RAW,) low half first
                mc, yc, oc = mask[lo:lo + mv], y[lo:lo + mv], out[lo:lo + mv]   # indexed from 0: LLVM vectorizes
                if has_x:
                    xc = x[lo:lo + mv]
                    for i in range(mv):
                        mi = s if draws[i] >= cut else zero
                        mc[i] = mi
                        oc[i] = yc[i] * mi + xc[i]
                else:
                    for i in range(mv):
                        mi = s if draws[i] >= cut else zero
                        mc[i] = mi
                        oc[i] = yc[i] * mi


def _keep(y: np.ndarray, x: np.ndarray, keep: np.ndarray, scale: np.ndarray, out: np.ndarray,
          mask: np.ndarray) -> None:
    # y, out, mask (N,); x (N,) or (0,); keep (N,) bool; scale (1,) in the dtype. out may be y.
    n = y.size
    has_x = x.size > 0
    s = scale[0]
    zero = s - s
    for c in prange((n + CHUNK - 1) // CHUNK):
        lo, hi = c * CHUNK, min(n, (c + 1) * CHUNK)
        kc, mc = keep[lo:hi], mask[lo:hi]                              # indexed from 0: LLVM vectorizes
        for i in range(hi - lo):
            mc[i] = s if kc[i] else zero
        _apply(y[lo:hi], x[lo:hi], has_x, mc, out[lo:hi])


# NumPy's SeedSequence (a pool of four 32-bit words; its hash constants) and SFC64's seeding from it, for
# the blocks' streams: the states ``ops/dropout.py block_states`` reads from NumPy's objects, one Python object
# per block (about 13 us each, 264 blocks a step of bench_small's d_model 256), computed here in one call.
# All arithmetic in uint64, cut to 32 bits after each product (the products of two 32-bit words fit).
_M32 = np.uint64(0xFFFFFFFF)
_16 = np.uint64(16)
_32 = np.uint64(32)
_INIT_A, _MULT_A = np.uint64(0x43B0D7E5), np.uint64(0x931E8875)     # mixing the entropy into the pool
_INIT_B, _MULT_B = np.uint64(0x8B51F9DD), np.uint64(0x58F38DED)     # drawing words from the pool
_MIX_L, _MIX_R = np.uint64(0xCA01F9DD), np.uint64(0x4973F715)
POOL = 4
SFC64_WARMUP = 12          # SFC64 discards its first 12 outputs after seeding


@register_jitable
def _hash(v, h):  # type: ignore[no-untyped-def]
    """(v hashed with the running constant h, h's next value): SeedSequence's hashmix."""
    v = v ^ h
    h = (h * _MULT_A) & _M32
    v = (v * h) & _M32
    return v ^ (v >> _16), h


@register_jitable
def _mix(x, y):  # type: ignore[no-untyped-def]
    r = (_MIX_L * x - _MIX_R * y) & _M32                  # wraps mod 2^64, then mod 2^32
    return r ^ (r >> _16)


def _seed_states(entropy: np.ndarray, states: np.ndarray) -> None:
    # entropy (W,) uint64: the root seed's 32-bit words, least significant first, zero-padded to at least
    # POOL, then a last word that stands for each block's spawn key k; states (K, 4) uint64 <- the SFC64
    # state (a, b, c, counter) that SFC64(SeedSequence(root, spawn_key=(k,))) starts from
    w = entropy.size
    for k in prange(states.shape[0]):
        pool = np.empty(POOL, np.uint64)
        words = np.empty(2 * 3, np.uint64)
        h = _INIT_A
        for i in range(POOL):                              # w > POOL: the key is never among these
            pool[i], h = _hash(entropy[i], h)
        for src in range(POOL):
            for dst in range(POOL):
                if src != dst:
                    v, h = _hash(pool[src], h)
                    pool[dst] = _mix(pool[dst], v)
        for src in range(POOL, w):
            word = np.uint64(k) if src == w - 1 else entropy[src]
            for dst in range(POOL):
                v, h = _hash(word, h)
                pool[dst] = _mix(pool[dst], v)
        h = _INIT_B                                        # generate_state(3, uint64): six 32-bit words
        for i in range(words.size):
            v = pool[i % POOL] ^ h
            h = (h * _MULT_B) & _M32
            v = (v * h) & _M32
            words[i] = v ^ (v >> _16)
        a = words[0] | (words[1] << _32)
        b = words[2] | (words[3] << _32)
        c = words[4] | (words[5] << _32)
        count = _1
        for _ in range(SFC64_WARMUP):
            _, a, b, c, count = _next(a, b, c, count)
        states[k, 0], states[k, 1], states[k, 2], states[k, 3] = a, b, c, count


streams_kernel = Kernel(_streams)
keep_kernel = Kernel(_keep)
seed_kernel = Kernel(_seed_states)


def block_states(root: int, n_blocks: int) -> np.ndarray:
    """(K, 4) uint64: ``ops/dropout.py block_states(root, n_blocks)``, the same words, without NumPy's objects.
    root: 0 <= root < 2^64; K < 2^32 (a spawn key of one 32-bit word)."""
    if not (0 <= root < 1 << 64 and 0 <= n_blocks < 1 << 32):
        raise ValueError(f"block_states: root must be in [0, 2^64) and n_blocks in [0, 2^32), got {root}, {n_blocks}")
    run = [(root >> s) & 0xFFFFFFFF for s in (0, 32)] if root >> 32 else [root]   # as SeedSequence splits it
    entropy = np.zeros(max(len(run), POOL) + 1, np.uint64)                  # (W,) zero-padded, key's word last
    entropy[:len(run)] = run
    states = np.empty((n_blocks, 4), np.uint64)
    seed_kernel(entropy, states)
    return states


def _flat(y: np.ndarray, x: np.ndarray | None, out: np.ndarray | None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    res = np.empty_like(y) if out is None else out                     # (...)
    mask = np.empty_like(y)                                            # (...)
    xf = np.empty(0, y.dtype) if x is None else x.reshape(-1)          # (N,) or (0,)
    return res, mask, xf


def dropout_streams(y: np.ndarray, x: np.ndarray | None, states: np.ndarray, per: int, cut: np.uint32,
                    scale: np.floating, out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(y * mask (+ x), mask) with block k's draws from SFC64 state ``states[k]`` over ``per`` elements;
    all C-contiguous of one shape and dtype; ``out`` may be y."""
    res, mask, xf = _flat(y, x, out)
    streams_kernel(y.reshape(-1), xf, states, per, lane_groups(states.shape[0]), cut, np.array([scale], y.dtype),
                   res.reshape(-1), mask.reshape(-1))
    return res, mask


def lane_groups(k: int) -> np.ndarray:
    """(G, 2) int64: K blocks as groups (first block, streams side by side): LANES at a time, then a pair,
    then one alone, as many as are left."""
    out, b = [], 0
    for lanes in (LANES, 2, 1):
        while k - b >= lanes:
            out.append((b, lanes))
            b += lanes
    return np.array(out, np.int64).reshape(-1, 2)


def dropout_keep(y: np.ndarray, x: np.ndarray | None, keep: np.ndarray, scale: np.floating,
                 out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(y * mask (+ x), mask), mask = keep * scale; all C-contiguous of one shape and dtype."""
    res, mask, xf = _flat(y, x, out)
    keep_kernel(y.reshape(-1), xf, keep.reshape(-1), np.array([scale], y.dtype), res.reshape(-1), mask.reshape(-1))
    return res, mask
