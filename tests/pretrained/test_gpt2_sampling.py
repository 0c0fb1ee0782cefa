"""GPT-2 sampling with a temperature other than 0 and 1 and a top-k below the vocabulary: ``generate`` and
``npformer generate --temperature --top-k --seed`` give exactly the tokens that ``sample_next``, stepped by
hand on the full logits with ``np.random.default_rng(seed)``, draws."""
import contextlib
import io

import numpy as np
import pytest

from oracles import require

require("torch")
require("transformers")

from tiny_gpt2 import write_gpt2  # noqa: E402

from npformer.cli import main  # noqa: E402
from npformer.decode import sample_next  # noqa: E402
from npformer.pretrained import CausalLM  # noqa: E402

PROMPT = "the cat sat on"
N_NEW, TEMPERATURE, TOP_K, SEED = 24, 0.55, 7, 11


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    """A tiny GPT-2 without an end-of-text id, so that every draw runs its full length."""
    d = tmp_path_factory.mktemp("gpt2_sampling")
    write_gpt2(d, n_positions=64, eos=False)
    return d


def _by_hand(lm: CausalLM, prompt: list[int]) -> list[int]:
    """Each new token from the last position's logits of the whole sequence so far (no cache)."""
    rng = np.random.default_rng(SEED)
    ids, new = list(prompt), []
    for _ in range(N_NEW):
        logits = lm.logits(np.asarray([ids], dtype=np.int64))[:, -1]        # (1, V)
        tok = int(sample_next(logits, rng, TEMPERATURE, TOP_K)[0])
        ids.append(tok)
        new.append(tok)
    return new


def test_generate_samples_as_sample_next_does_by_hand(lm_dir):
    lm = CausalLM.load(lm_dir)
    assert lm.eos_id is None and TOP_K < lm.vocab_size
    prompt = lm.tokenizer.encode(PROMPT)
    want = _by_hand(lm, prompt)
    assert lm.generate(prompt, N_NEW, temperature=TEMPERATURE, top_k=TOP_K, seed=SEED) == want
    assert lm.generate(PROMPT, N_NEW, temperature=TEMPERATURE, top_k=TOP_K, seed=SEED) == lm.tokenizer.decode(want)


def test_the_command_line_samples_as_sample_next_does_by_hand(lm_dir):
    lm = CausalLM.load(lm_dir)
    want = lm.tokenizer.decode(_by_hand(lm, lm.tokenizer.encode(PROMPT)))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["generate", str(lm_dir), "--prompt", PROMPT, "--tokens", str(N_NEW),
                   "--temperature", str(TEMPERATURE), "--top-k", str(TOP_K), "--seed", str(SEED)])
    assert rc == 0, err.getvalue()
    assert out.getvalue() == PROMPT + want + "\n"
