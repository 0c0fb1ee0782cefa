"""``--serve``'s API under generated request bodies (hypothesis, a fixed and derandomized set): random
bytes, deep nesting, huge numbers, NaN and Infinity, wrong types, the right shape with bad values,
and broken copies of a good body. Each gets an answer: 4xx with a one-line JSON error (or 200 with a
payload, when a generated body happens to be a good request), never 500 and never a hung connection."""
import json
from collections import Counter

import pytest
from explore_runs import explore_runs  # noqa: F401 (a fixture)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_client import post, serving

from npformer.explore.serve import MAX_BODY, MAX_DEPTH

EXAMPLES = 300
GOOD = b'{"inputs": [{"text": "29 November 2026"}, "4 July 1976"]}'

scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**63 - 2) | st.floats(allow_nan=False)
           | st.text(max_size=40))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(["text", "inputs", "index", ""]) | st.text(max_size=6),
                                        inner, max_size=3), max_leaves=10)
literal = st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e400", b"1e-400", b"9" * 4400,
                           b"-0", b"1.0", b"true", b"null", b'"\\ud800"', b'"\\u0000"', b"[]", b"{}"])


def dumped(obj) -> bytes:
    return json.dumps(obj).encode()


def nested(opener: bytes, closer: bytes):
    return st.integers(MAX_DEPTH + 1, 6000).map(lambda n: b'{"inputs": ' + opener * n + closer * n + b"}")


def in_a_good_shape(lit: bytes, where: int) -> bytes:
    """``lit`` where a good request has a value: as an input, as its text, or beside "inputs"."""
    return [b'{"inputs": [' + lit + b"]}", b'{"inputs": [{"text": ' + lit + b"}]}", b'{"inputs": ' + lit + b"}",
            b'{"inputs": ["1 May 2001"], "x": ' + lit + b"}", lit][where]


@st.composite
def broken(draw, body: bytes) -> bytes:
    """``body`` cut short, with a byte changed, or with a slice repeated."""
    i = draw(st.integers(0, len(body) - 1))
    return draw(st.sampled_from([body[:i], body[:i] + bytes([draw(st.integers(0, 255))]) + body[i + 1:],
                                 body[:i] + body[i:] * 2]))


bodies = st.one_of(
    st.binary(max_size=300),                                                           # random bytes
    nested(b"[", b"]"), nested(b'{"a": ', b"}"), nested(b"[", b""),                    # deep nesting
    st.builds(in_a_good_shape, literal, st.integers(0, 4)),                           # NaN, huge numbers, ...
    values.map(lambda v: dumped({"inputs": v})),                                      # wrong types
    values.filter(lambda v: not isinstance(v, str)).map(lambda v: dumped({"inputs": [{"text": v}]})),
    values.map(dumped),
    st.text(max_size=60).map(lambda s: dumped({"inputs": [{"text": s}]})),           # good shape, bad text
    st.lists(st.text(alphabet="0123456789 JFMASOND", max_size=40), min_size=5, max_size=9).map(
        lambda xs: dumped({"inputs": xs})),                                            # too many inputs
    st.integers(0, 3).map(lambda k: dumped({"inputs": ["x" * (100 + k * 1000)]})),    # too long
    broken(GOOD),                                                                      # a good body, broken
)


@pytest.fixture(scope="module")
def server(explore_runs):  # noqa: F811
    with serving(explore_runs["dates"]) as srv:
        yield srv


def test_generated_bodies_get_an_answer_never_500_and_never_a_hang(server):
    seen = Counter()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(body=bodies)
    def one(body):
        assert len(body) <= MAX_BODY
        status, answer = post(server, body, {})                     # a hung connection times out the client
        seen[status] += 1
        if status == 200:
            assert answer["version"] == 1 and answer["inputs"] and answer["serve"]
        else:
            assert 400 <= status < 500 and set(answer) == {"error"}, (status, answer)
            assert answer["error"] and "\n" not in answer["error"] and "Traceback" not in answer["error"]

    one()
    print(f"--serve fuzz: {sum(seen.values())} bodies, answers {dict(sorted(seen.items()))}")
    assert sum(seen.values()) >= EXAMPLES and 500 not in seen
    assert seen[400] >= EXAMPLES // 2
