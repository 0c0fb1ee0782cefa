"""GPT-2 through npformer's blocks against transformers' own GPT2LMHeadModel, in float32, on models that
transformers built from seeded random weights and saved with save_pretrained (tests/pretrained/tiny_gpt2.py):
a tiny one, and GPT-2 124M's width, heads, positions and vocabulary (768, 12, 1,024, 50,257) with 2 layers.

- logits and every layer's hidden states within 1e-4 x max(1, the largest |value| of transformers');
- greedy generation, teacher-forced on transformers' 50 greedy tokens: the same argmax at every step
  where npformer's top two logits differ by more than 1e-3 (random weights make near-ties), and
  npformer's own greedy loop gives transformers' tokens up to the first such near-tie;
- the KV cache: a prompt and then one token per step give the full forward's logits.
"""
import numpy as np
import pytest

from oracles import require

torch = require("torch")
require("transformers")

from tiny_gpt2 import TINY, WIDE, write_gpt2  # noqa: E402

from npformer.decode import make_stepper  # noqa: E402
from npformer.pretrained import CausalLM  # noqa: E402

TOL = 1e-4                  # the parity bound, float32 against float32
TIE = 1e-3                  # top-two gap below which a step's argmax is a near-tie, not compared
N_NEW = 50


def _build(tmp_path_factory, name: str):
    d = tmp_path_factory.mktemp(f"gpt2_{name}")
    ref = write_gpt2(d, **(TINY if name == "tiny" else WIDE), eos=False)
    return name, ref, CausalLM.load(d)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _build(tmp_path_factory, "tiny")


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    return _build(tmp_path_factory, "wide")


@pytest.fixture(params=["tiny", "wide"])
def pair(request):
    """(name, transformers' model, npformer's CausalLM) of one directory, each built once per module."""
    return request.getfixturevalue(request.param)


def _close(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    scale = max(1.0, float(np.abs(theirs).max()))
    err = float(np.abs(ours - theirs).max())
    assert err <= TOL * scale, f"{what}: max |difference| {err:.2e} > {TOL:.0e} x {scale:.3g}"


def _ids(lm: CausalLM, shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, lm.vocab_size, size=shape, dtype=np.int64)


def _hidden_states(lm: CausalLM, ids: np.ndarray) -> list[np.ndarray]:
    """transformers' hidden_states: the embeddings, each block's output but the last, and the last
    block's output after the final LayerNorm ln_f."""
    x, _ = lm.model.embed.forward(ids)                                       # (B, T, E)
    states = [x]
    for layer in lm.model.blocks.layers:
        x, _ = layer.forward(x, causal=True)                                 # (B, T, E)
        states.append(x)
    states[-1], _ = lm.model.blocks.norm.forward(x)
    return states


def test_logits_and_every_hidden_state_match_transformers(pair):
    name, ref, lm = pair
    ids = _ids(lm, (2, 24))
    with torch.no_grad():
        out = ref(torch.from_numpy(ids), output_hidden_states=True)
    ours = lm.logits(ids)
    assert ours.dtype == np.float32                                          # float32 throughout, no upcast
    _close(ours, out.logits.numpy(), f"{name} logits")
    ours = _hidden_states(lm, ids)
    assert len(ours) == len(out.hidden_states) == lm.config.n_layer + 1
    for i, (a, b) in enumerate(zip(ours, out.hidden_states, strict=True)):
        _close(a, b.numpy(), f"{name} hidden state {i}")


def test_a_long_input_takes_the_tiled_kernel_and_still_matches(tiny):
    name, ref, lm = tiny
    t = 520                                          # 520^2 >= TILED_MIN_SCORES: the prompt's step runs tiled
    ids = _ids(lm, (1, t), seed=1)
    with torch.no_grad():
        theirs = ref(torch.from_numpy(ids)).logits.numpy()
    _close(lm.logits(ids), theirs, f"{name} logits over {t} positions")


def test_greedy_generation_teacher_forced_on_transformers_tokens(pair):
    name, ref, lm = pair
    prompt = _ids(lm, (1, 8), seed=2)
    with torch.no_grad():
        full = ref.generate(torch.from_numpy(prompt), max_new_tokens=N_NEW, min_new_tokens=N_NEW, do_sample=False,
                            pad_token_id=0).numpy()                             # (1, 8 + 50)
    new = full[0, prompt.shape[1]:]
    assert new.shape == (N_NEW,)
    logits = lm.logits(full[:, :-1])[0, prompt.shape[1] - 1:]               # (50, V): step j predicts new[j]
    top2 = np.sort(logits, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > TIE
    assert clear.sum() >= N_NEW // 2, f"{name}: only {clear.sum()} of {N_NEW} steps without a near-tie"
    np.testing.assert_array_equal(logits.argmax(-1)[clear], new[clear])
    if name == "wide":
        return                              # the KV cache test below covers the wide model's cached steps
    # our own greedy loop (KV cache) agrees up to the first near-tie, after which paths may part
    ours = lm.generate(prompt[0].tolist(), N_NEW)
    agree = N_NEW if clear.all() else int(np.argmin(clear))
    assert ours[:agree] == new[:agree].tolist()


def test_kv_cache_steps_give_the_full_forwards_logits(pair):
    name, _, lm = pair
    ids = _ids(lm, (2, 8), seed=3)
    full, _ = lm.model.forward(ids)                                          # (B, T, V)
    stepper = make_stepper(lm.model, batch=2, max_len=8)
    steps = [stepper.step(ids[:, :4])] + [stepper.step(ids[:, t:t + 1]) for t in range(4, 8)]
    _close(np.concatenate(steps, axis=1), full, f"{name} cached steps")
    _close(lm.logits(ids), full, f"{name} CausalLM.logits")
