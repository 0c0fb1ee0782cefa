"""How the tabletop policy reads instructions: its own words or frozen MiniLM states (cached per text);
instruction files and their bad lines; the shipped paraphrase set."""
import dataclasses

import numpy as np
import pytest

from npformer.data import tabletop as tt
from npformer.data.pretrained_text import PretrainedText
from npformer.data.tabletop_policy import PARAPHRASES, read_instructions
from npformer.models.vla import VLA
from oracles import minilm_dir


def test_scratch_reader_refuses_unknown_words_or_reads_them_as_unk():
    r = tt.text_reader("scratch")
    assert r is tt.text_reader("scratch") and r.text_dim == 0      # one per process
    text = "put the red block in the box"
    np.testing.assert_array_equal(r.inputs([text]), tt.encode(text)[None])
    with pytest.raises(ValueError, match="unknown word 'crate'") as e:
        r.inputs(["put the red block in the crate"])
    assert "[UNK]" not in str(e.value) and "yellow" in str(e.value)    # the known words, [UNK] not among them
    assert tt.VOCAB[0] == tt.PAD and tt.VOCAB[-1] == tt.UNK == "[UNK]" and tt.UNK_ID == len(tt.VOCAB) - 1
    assert tt.UNK not in tt.training_words() and set(tt.VOCAB[1:-1]) == tt.training_words()
    the, red, into, unk = (tt.WORD_TO_ID[w] for w in ("the", "red", "into", "[UNK]"))
    ids = r.inputs(["lift the red brick into the crate"], unknown_ok=True)[0]   # unknown -> [UNK]
    assert list(ids[:7]) == [unk, the, red, unk, into, the, unk] and not ids[7:].any()
    ids = r.inputs(["lift the red brick into the crate"], unknown_ok=True, unk_id=0)[0]   # a run without [UNK]
    assert list(ids[:7]) == [0, the, red, 0, into, the, 0]
    with pytest.raises(ValueError, match="unk_id must be"):
        r.inputs([text], unknown_ok=True, unk_id=3)
    assert tt.tokenize("put the [UNK] in the box") == ["put", "the", "unk", "in", "the", "box"]  # never typed in
    assert r.unknown("lift the red brick into the crate") == ["lift", "brick", "crate"]
    with pytest.raises(ValueError, match="at most 16"):
        r.inputs([" ".join(["red"] * 17)], unknown_ok=True)
    with pytest.raises(ValueError, match="empty"):
        r.inputs(["  ?! "], unknown_ok=True)
    with pytest.raises(ValueError, match="text_encoder must be one of scratch, minilm"):
        tt.text_reader("glove")


@pytest.fixture(scope="module")
def minilm():
    minilm_dir()                                                   # skip (or fail under CI) without the weights
    return tt.text_reader("minilm")


class _Counting:
    """A SentenceEncoder stand-in that counts the texts it is asked to embed."""

    def __init__(self, enc):
        self.enc, self.model, self.tokenizer, self.asked = enc, enc.model, enc.tokenizer, []

    def token_embeddings(self, texts):
        self.asked += list(texts)
        return self.enc.token_embeddings(texts)


def test_minilm_states_are_minilms_own_computed_once_per_text(minilm):
    reader = PretrainedText(_Counting(minilm.encoder), max_words=12)
    texts = ["put the red block in the box", "grab the crimson cube and drop it in the crate",
             "put the red block in the box"]
    states = reader.inputs(texts)                                  # (3, L, 384)
    pieces = [reader.tokens(t) for t in texts]
    assert pieces[0] == ["[CLS]", "put", "the", "red", "block", "in", "the", "box", "[SEP]"]
    assert states.shape == (3, max(map(len, pieces)), 384) and states.dtype == np.float32
    want = minilm.encoder.token_embeddings(texts[:2])
    np.testing.assert_allclose(states[0, :9], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(states[1, :len(pieces[1])], want[1], rtol=1e-5, atol=1e-5)
    assert not states[0, 9:].any() and (states[0, :9] != 0).any(-1).all()    # zero rows pad, real rows never zero
    assert sorted(reader.encoder.asked) == sorted(texts[:2])       # each distinct text ran once
    reader.inputs(texts[::-1])
    assert len(reader.encoder.asked) == 2                          # and never again
    assert reader.unknown("put the red block in the box") == []
    with pytest.raises(ValueError, match="15 word pieces, at most 12"):
        reader.inputs(["put the red block in the box and then put the blue one"])
    with pytest.raises(ValueError, match="empty"):
        reader.inputs([""])


def test_minilm_task_config_batches_and_model(minilm):
    task = tt.TabletopTask(tt.TabletopTask.settings_with({"text_encoder": "minilm"}))
    cfg = task.model_config()
    assert cfg.text_dim == 384 and cfg.max_words == tt.MINILM_MAX_PIECES and cfg.text_dropout == 0.3
    assert task.default_train_config()["blas_threads"] == 1
    scratch = tt.TabletopTask()
    b_m = task.train_batch(np.random.default_rng(0), 8)
    b_s = scratch.train_batch(np.random.default_rng(0), 8)
    words, images, actions = b_m.arrays
    assert words.ndim == 3 and words.shape[2] == 384 and words.dtype == np.float32
    np.testing.assert_array_equal(images, b_s.arrays[1])           # the same scenes and actions as scratch
    np.testing.assert_array_equal(actions, b_s.arrays[2])
    # every template word is one word piece, so both count the same words
    assert b_m.n_tokens == b_s.n_tokens + 2 * 8                    # + [CLS] and [SEP]
    model = task.build_model(cfg, np.random.default_rng(0))
    assert "text_proj.weight" in model.state_dict() and model.state_dict()["text_proj.weight"].shape == (64, 384)
    loss, grads = model.loss(*b_m.arrays, rng=np.random.default_rng(1))    # text_dropout draws masks
    assert np.isfinite(loss) and set(grads) == set(model.state_dict())
    with pytest.raises(ValueError, match="text_dim 0"):
        task.build_model(dataclasses.replace(cfg, text_dim=0, text_dropout=0.0), np.random.default_rng(0))
    with pytest.raises(ValueError, match="text_dim 384"):
        scratch.build_model(cfg, np.random.default_rng(0))
    with pytest.raises(ValueError, match="text_encoder must be one of"):
        tt.TabletopTask.settings_with({"text_encoder": "bert"})


def test_scratch_config_is_todays():
    """text_encoder scratch: the same model config and keys as before the MiniLM policy existed, and an old
    config.json without the new fields still loads."""
    task = tt.TabletopTask()
    cfg = task.model_config()
    assert cfg.text_dim == 0 and cfg.max_words == 16 and cfg.vocab_size == len(tt.VOCAB) and cfg.text_dropout == 0
    assert "blas_threads" not in task.default_train_config()
    model = task.build_model(cfg, np.random.default_rng(0))
    assert not any(k.startswith("text_") for k in model.state_dict())
    assert model.state_dict()["word_embed.tok.weight"].shape == (len(tt.VOCAB), 64)
    old = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "text_dim"}
    assert tt.TabletopTask.from_dict({"eval_size": 10}).settings.text_encoder == "scratch"
    assert isinstance(task.build_model(old, np.random.default_rng(0)), VLA)


def test_the_unk_row_starts_at_zero_and_training_never_moves_it():
    """No training instruction holds an unknown word: the [UNK] row gets no gradient, so it stays the zero
    it starts at (AdamW's decay and moments move nothing without one); every other row does train."""
    from npformer.train.optim import AdamW
    task = tt.TabletopTask()
    model = task.build_model(task.model_config({"d_model": 16, "n_heads": 2, "d_ff": 16, "n_layers": 1}),
                             np.random.default_rng(0))
    table = model.word_embed.tok.params["weight"]                   # (V, E)
    assert tt.unknown_id(model) == tt.UNK_ID and not table[tt.UNK_ID].any() and table[1:tt.UNK_ID].all(-1).all()
    before = table.copy()
    opt = AdamW(model.state_dict(), lr=1e-2, weight_decay=0.1)
    rng = np.random.default_rng(1)
    for _ in range(3):
        loss, grads = task.loss(model, task.train_batch(rng, 16), rng)
        assert not grads["word_embed.tok.weight"][tt.UNK_ID].any()
        opt.step(grads)
    assert not table[tt.UNK_ID].any() and (table[tt.WORD_TO_ID["red"]] != before[tt.WORD_TO_ID["red"]]).all()


def test_a_run_saved_before_unk_reads_unknown_words_as_padding():
    """A word table of UNK_ID rows (every word but [UNK], each at the same id as now) is an older run's:
    it loads, and an unknown word becomes padding there; any other size is an error naming both."""
    from npformer.data.tabletop_policy import evaluate_instructions
    task = tt.TabletopTask()
    small = {"d_model": 16, "n_heads": 2, "d_ff": 16, "n_layers": 1}
    old = task.build_model(task.model_config({**small, "vocab_size": tt.UNK_ID}), np.random.default_rng(0))
    assert tt.unknown_id(old) == 0
    r = tt.text_reader("scratch")
    ids = tt.model_words(r, old, ["put the red brick in the crate"], unknown_ok=True)
    assert (ids[0, [3, 6]] == 0).all() and ids.max() < tt.UNK_ID
    lines = [(1, "put the red brick in the crate", "red", "box")]
    res = evaluate_instructions(old, lines, n=4)
    assert res["unknown_as"].startswith("padding") and res["lines"][0]["unknown_words"] == ["brick", "crate"]
    new = task.build_model(task.model_config(small), np.random.default_rng(0))
    assert evaluate_instructions(new, lines, n=4)["unknown_as"] == "[UNK]"
    assert tt.model_words(r, new, ["put the red brick in the crate"], unknown_ok=True)[0, 3] == tt.UNK_ID
    odd = task.build_model(task.model_config({**small, "vocab_size": 5}), np.random.default_rng(0))
    with pytest.raises(ValueError, match=f"word table has 5 rows; the tabletop vocabulary has {len(tt.VOCAB)}"):
        tt.unknown_id(odd)


# -- instruction files ------------------------------------------------------------------------------

def test_read_instructions(tmp_path):
    f = tmp_path / "ok.tsv"
    f.write_text("# a comment\ngrab the crimson cube and drop it in the crate\tred\tbox\n\n"
                 "  put the blue block in the dish \tblue\tbowl\n")
    assert read_instructions(f) == [(2, "grab the crimson cube and drop it in the crate", "red", "box"),
                                       (4, "put the blue block in the dish", "blue", "bowl")]


@pytest.mark.parametrize("body,message", [
    ("put the red block in the box\tred\tbox\nput the blue block in the box blue box\n",
     "line 2: expected instruction<TAB>colour<TAB>container, got 1 tab-separated field(s)"),
    ("put the red block\tred\tbox\tbowl\n", "line 1: expected instruction<TAB>colour<TAB>container, got 4"),
    ("put the red block\t\tbox\n", "line 1: expected instruction<TAB>colour<TAB>container, got an empty field"),
    ("\n\nput the orange block in the box\torange\tbox\n", "line 3: colour 'orange' is not in the world"),
    ("put the red block in the crate\tred\tcrate\n", "line 1: container 'crate' is not in the world (box, bowl)"),
    ("", "holds no instructions"),
    ("# only a comment\n\n", "holds no instructions"),
])
def test_bad_instruction_files(tmp_path, body, message):
    f = tmp_path / "bad.tsv"
    f.write_text(body)
    with pytest.raises(ValueError, match="^" + str(f).replace("\\", "\\\\") + " ") as e:
        read_instructions(f)
    assert message in str(e.value) and "\n" not in str(e.value)


# -- the paraphrase set ----------------------------------------------------------------------------

CATEGORIES = ("colours", "containers", "nouns", "shapes", "verbs")


def paraphrases(part: str) -> dict:
    return {c: read_instructions(PARAPHRASES / part / f"{c}.tsv") for c in CATEGORIES}


def test_the_paraphrase_set_never_uses_training_wording():
    dev, held = paraphrases("dev"), paraphrases("heldout")
    lines = [x for part in (dev, held) for c in CATEGORIES for x in part[c]]
    assert len(lines) >= 60 and all(len(held[c]) >= 5 for c in CATEGORIES)
    texts = [t for _, t, _, _ in lines]
    assert len(set(texts)) == len(texts)                           # no line twice, across the parts too
    trained = {t.format(c=c, b=b, k=k, **{"in": i}) for t in tt.TEMPLATES for c in tt.COLOURS for b in tt.BLOCK_NOUNS
               for k in tt.CONTAINERS for i in tt.PREPOSITIONS}      # every instruction training can draw
    assert not set(texts) & trained
    for _, text, colour, container in lines:
        words = tt.tokenize(text)
        assert len(words) <= tt.MAX_WORDS, text                     # the scratch policy can read its length
        assert [w for w in words if w not in tt.WORD_TO_ID], f"every line has a word training never uses: {text}"
        assert not [w for w in words if w in tt.COLOURS and w != colour], text
        assert not [w for w in words if w in tt.CONTAINERS and w != container], text
    for part in (dev, held):                                       # the five colour names kept, but in colours
        for c in CATEGORIES:
            named = [colour in tt.tokenize(t) for _, t, colour, _ in part[c]]
            assert all(named) if c != "colours" else not any(named), c
    synonyms = {next(w for w in tt.tokenize(t) if w not in tt.WORD_TO_ID) for part in (dev, held)
                for _, t, _, _ in part["colours"]}
    assert len(synonyms) == 19
    dev_syn = {next(w for w in tt.tokenize(t) if w not in tt.WORD_TO_ID) for _, t, _, _ in dev["colours"]}
    assert not dev_syn & {next(w for w in tt.tokenize(t) if w not in tt.WORD_TO_ID) for _, t, _, _ in held["colours"]}


def test_no_new_word_of_the_paraphrase_set_is_ever_trained_on():
    """Each paraphrase line's new words (those outside the world's five colours and two containers) appear
    in nothing training reads: not in the templates, nouns or prepositions (``training_words``), and not in
    any instruction the training split draws (both readers train on ``sample_episodes``)."""
    world = set(tt.COLOURS) | set(tt.CONTAINERS)
    new = set()
    for part in ("dev", "heldout"):
        for c in CATEGORIES:
            for _, text, _, _ in read_instructions(PARAPHRASES / part / f"{c}.tsv"):
                unseen = [w for w in tt.tokenize(text) if w not in tt.training_words()]
                assert unseen, f"{part}/{c}: every word of {text!r} is a training word"
                new |= set(unseen) - world
    drawn = set()                                                  # train_batch draws these for both readers
    rng = np.random.default_rng(0)
    for _ in range(8):
        _, texts, _ = tt.sample_episodes(rng, 256, "train")
        drawn |= {w for t in texts for w in tt.tokenize(t)}
    assert drawn == tt.training_words()
    assert not new & drawn and not new & tt.training_words()
    assert {"crate", "dish", "lift", "brick", "crimson", "mug"} <= new
