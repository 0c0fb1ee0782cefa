"""``--layers A-B``: keep only some layers' maps in the payload, to shrink a large page.

The model still runs through every layer, so rollout (entry l: through layers 0..l) and relevance are the
whole model's; only the stored per-layer arrays are cut: each group's q, k, v, weights, rollout and
statistics, and the training probe's maps. Each cut group (and the probe) says which layers it holds in
"layers" (docs/EXPLORE_FORMAT.md); the page labels its layers with those numbers.

    first, last = parse_layers("2-3")
    payload = keep_layers(payload, first, last)
"""
from __future__ import annotations

import re

from .arrays import decode_array, encode_array

_SPEC = re.compile(r"(\d{1,4})(?:-(\d{1,4}))?")
_PER_LAYER = ("q", "k", "v", "weights", "rollout")      # GROUP arrays whose first axis is the layer


def parse_layers(text: str) -> tuple[int, int]:
    """"A-B" (0-based, inclusive; "A" alone is "A-A") -> (A, B); ValueError naming --layers otherwise."""
    m = _SPEC.fullmatch(str(text).strip())
    if not m:
        raise ValueError(f"--layers must be A-B, two layer numbers from 0 (e.g. 0-1), got {text!r}")
    first = int(m.group(1))
    last = first if m.group(2) is None else int(m.group(2))
    if last < first:
        raise ValueError(f"--layers A-B needs A <= B, got {text!r}")
    return first, last


def _cut(a: dict, first: int, last: int) -> dict:
    x = decode_array(a)[first:last + 1]
    if a["dtype"] == "u8" and "scale" not in a:
        raise ValueError("a per-layer array stored as unscaled u8 is not a map")
    return encode_array(x, a["dtype"], compress="codec" in a)


def keep_layers(payload: dict, first: int, last: int) -> dict:
    """The payload with only layers first..last of every group's and the probe's maps (in place, returned).
    ValueError when a group has no layer ``last``."""
    for inp in payload["inputs"]:
        for g in inp["groups"]:
            n = g["n_layers"]
            if not 0 <= first <= last < n:
                raise ValueError(f"--layers {first}-{last}: the {g['name']!r} attention has layers 0-{n - 1}")
    for inp in payload["inputs"]:
        for g in inp["groups"]:
            for name in _PER_LAYER:
                if g.get(name) is not None:
                    g[name] = _cut(g[name], first, last)
            g["stats"] = {k: v[first:last + 1] for k, v in g["stats"].items()}
            g["layers"] = list(range(first, last + 1))
            g["n_layers"] = last - first + 1
    tr = payload.get("training")
    if tr is not None:
        w = decode_array(tr["weights"])                              # (S, L, H, Tq, Tk)
        if last < w.shape[1]:
            tr["weights"] = encode_array(w[:, first:last + 1], "u8")
            tr["layers"] = list(range(first, last + 1))
        else:                                                        # a probe of another group's depth
            payload["training"] = None
    payload["notes"] = payload.get("notes", []) + [
        f"Only layers {first}-{last} are stored (--layers); rollout and relevance ran through every layer."]
    return payload
