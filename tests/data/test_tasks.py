"""The data side: the character vocabulary, the task registry, and the copy, dates and text tasks."""
import datetime as dt
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from npformer.data import CharVocab, get_task, task_names
from npformer.data.dates import FORMATS, DatesTask, format_date, ordinal
from npformer.data.seq2seq import is_heldout
from npformer.data.vocab import pad_batch

# -- vocabulary ----------------------------------------------------------------------------------


def test_vocab_round_trip_and_specials():
    v = CharVocab("abcé ")
    assert len(v) == 4 + 5 and (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    ids = v.encode("ab é", bos=True, eos=True)
    assert ids.dtype == np.int64 and ids[0] == v.bos_id and ids[-1] == v.eos_id
    assert v.decode(ids) == "ab é"
    assert v.decode([v.pad_id, 4, v.eos_id, 5]) == "a"                  # stops at <eos>, skips <pad>
    assert v.decode(v.encode("axbz", unknown="unk")) == "a\ufffdb\ufffd"
    assert CharVocab.from_dict(json.loads(json.dumps(v.to_dict()))) == v


def test_vocab_names_characters_outside_it():
    v = CharVocab("abc")
    with pytest.raises(ValueError, match=r"characters outside the vocabulary: 'x', 'Z' in 'axZa'"):
        v.encode("axZa")
    with pytest.raises(ValueError, match="twice"):
        CharVocab("abca")
    with pytest.raises(ValueError, match="outside the vocabulary of 7"):
        v.decode([99])


def test_pad_batch():
    out = pad_batch([np.array([5, 6, 7]), np.array([8])], pad_id=0)
    np.testing.assert_array_equal(out, [[5, 6, 7], [8, 0, 0]])


# -- registry ------------------------------------------------------------------------------------

def test_registry():
    assert {"copy", "dates", "text"} <= set(task_names())
    assert get_task("dates").model_kind == "transformer" and get_task("text").model_kind == "decoder_lm"
    with pytest.raises(ValueError, match="unknown task 'nope'; known tasks: .*copy.*dates.*text"):
        get_task("nope")


def test_registry_resolves_every_entry_and_names_a_module_that_fails(monkeypatch):
    from npformer.data import tasks

    assert task_names() == ["copy", "dates", "digits", "gripper", "tabletop", "text"]
    for name in task_names():
        cls = get_task(name)
        assert cls.name == name and issubclass(cls, tasks.Task)
        config_cls, model_cls = tasks.model_kind_classes(cls.model_kind)
        assert config_cls.__name__.endswith("Config") and callable(model_cls)
    with pytest.raises(ValueError,
                       match="unknown model kind 'nope'; known model kinds: action_lm, classifier, decoder_lm"):
        tasks.model_kind_classes("nope")
    monkeypatch.setitem(tasks.TASKS, "broken", ("npformer.data.no_such_module", "BrokenTask"))
    with pytest.raises(ImportError, match="task 'broken': module npformer.data.no_such_module failed to import"):
        get_task("broken")
    monkeypatch.setitem(tasks.MODEL_KINDS, "broken", ("npformer.no_such_module", "C", "M"))
    with pytest.raises(ImportError, match="model kind 'broken': module npformer.no_such_module failed"):
        tasks.model_kind_classes("broken")


def test_register_task_and_model_kind_explicitly(monkeypatch):
    from npformer.data import tasks
    from npformer.models import DecoderLM, DecoderLMConfig

    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    monkeypatch.setattr(tasks, "MODEL_KINDS", dict(tasks.MODEL_KINDS))

    class MyTask(tasks.Task):
        name, model_kind = "mine", "my_lm"

    assert tasks.register_task(MyTask) is MyTask and get_task("mine") is MyTask and "mine" in task_names()
    tasks.register_model_kind("my_lm", DecoderLMConfig, DecoderLM)
    assert tasks.model_kind_classes("my_lm") == (DecoderLMConfig, DecoderLM)

    class Nameless(tasks.Task):
        pass

    with pytest.raises(ValueError, match="must set name and model_kind"):
        tasks.register_task(Nameless)


def test_settings_are_type_checked():
    with pytest.raises(TypeError, match="data.first_year must be int"):
        get_task("dates").create({"first_year": "1900"})
    with pytest.raises(ValueError, match="data has no setting 'colour'"):
        get_task("dates").create({"colour": 1})
    with pytest.raises(ValueError, match="first_year <= last_year"):
        get_task("dates").create({"first_year": 2000, "last_year": 1990})


# -- dates ---------------------------------------------------------------------------------------

ISSUE_EXAMPLES = ["29 November 2026", "November 29, 2026", "Nov 29, 2026", "29 Nov 2026",
                  "Sunday, 29 November 2026", "Sun, Nov 29 2026", "the 29th of November, 2026",
                  "November 29th 2026", "29.11.2026", "2026/11/29", "29-Nov-2026", "NOVEMBER 29 2026"]


def test_every_format_of_the_issue_is_written_exactly():
    d = dt.date(2026, 11, 29)
    written = [format_date(d, i) for i in range(len(FORMATS))]
    assert written[:12] == ISSUE_EXAMPLES
    assert all(format_date(d, i) == example for i, (example, _) in enumerate(FORMATS))
    assert len(FORMATS) > 12                                             # and a few of our own


def test_weekdays_are_true_and_ordinals_right():
    rng = np.random.default_rng(0)
    for o in rng.integers(dt.date(1900, 1, 1).toordinal(), dt.date(2099, 12, 31).toordinal(), size=200):
        d = dt.date.fromordinal(int(o))
        full = format_date(d, 4)                                         # "Sunday, 29 November 2026"
        assert full.split(",")[0] == ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
                                      "Sunday"][d.isoweekday() - 1]
        assert dt.datetime.strptime(full, "%A, %d %B %Y").date() == d   # the C library agrees
        assert dt.datetime.strptime(format_date(d, 5), "%a, %b %d %Y").date() == d
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 30, 31)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "30th", "31st"]


def test_dates_held_out_split_is_disjoint_and_stable():
    task = DatesTask()
    assert len(task.train_days) + len(task.heldout_days) == (dt.date(2099, 12, 31) - dt.date(1900, 1, 1)).days + 1
    assert 0.08 < len(task.heldout_days) / len(task.train_days) < 0.14
    held = {dt.date.fromordinal(int(o)).isoformat() for o in task.heldout_days}
    rng = np.random.default_rng(1)
    train_pairs = task.sample_pairs(rng, 3000, heldout=False)
    assert not {t for _, t in train_pairs} & held                        # never trained on a held-out date
    assert {t for _, t in task.sample_pairs(rng, 300, heldout=True)} <= held
    for s, t in train_pairs[:50]:
        assert len(s) <= task.max_source_len and len(t) + 1 == task.max_target_len


def test_held_out_split_is_the_same_in_every_process():
    """The split must not depend on Python's per-process string hash (PYTHONHASHSEED), or a resumed
    or evaluated run would score examples it trained on."""
    keys = [f"{y}-{m:02d}-{y % 28 + 1:02d}" for y in range(1900, 2100, 7) for m in (1, 6, 11)]
    here = [is_heldout(k, 10) for k in keys]
    assert 0 < sum(here) < len(keys)                                     # both sides of the split occur
    code = f"from npformer.data.seq2seq import is_heldout; print([is_heldout(k, 10) for k in {keys!r}])"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        assert out.stdout.strip() == str(here), f"PYTHONHASHSEED={seed} gives another split"


def test_dates_batches_are_deterministic_and_well_formed():
    task = DatesTask()
    a = task.train_batch(np.random.default_rng(7), 16)
    b = task.train_batch(np.random.default_rng(7), 16)
    for x, y in zip(a.arrays, b.arrays, strict=True):
        np.testing.assert_array_equal(x, y)
    src, tgt_in, tgt_out = a.arrays
    v = task.vocab
    assert (tgt_in[:, 0] == v.bos_id).all() and (tgt_out[:, -1] == v.eos_id).all()
    np.testing.assert_array_equal(tgt_in[:, 1:], tgt_out[:, :-1])       # shifted by one
    assert a.n_tokens == int((src != 0).sum() + (tgt_in != 0).sum())


def test_dates_encode_source_errors():
    task = DatesTask()
    assert task.decode_target(task.vocab.encode("2026-11-29", eos=True)) == "2026-11-29"
    with pytest.raises(ValueError, match="empty input"):
        task.encode_source("   ")
    with pytest.raises(ValueError, match="characters outside the vocabulary: 'é'"):
        task.encode_source("29 décembre 2026")
    with pytest.raises(ValueError, match="longer than this task's limit"):
        task.encode_source("1" * 100)


# -- copy ----------------------------------------------------------------------------------------

def test_copy_pairs():
    task = get_task("copy").create({"n_symbols": 5, "max_len": 6})
    pairs = task.sample_pairs(np.random.default_rng(0), 200, heldout=False)
    assert all(s == t and 1 <= len(s) <= 6 and set(s) <= set("abcde") for s, t in pairs)
    assert not any(is_heldout(s, 10) for s, _ in pairs)
    assert all(is_heldout(s, 10) for s, _ in task.sample_pairs(np.random.default_rng(0), 50, heldout=True))


# -- text ----------------------------------------------------------------------------------------

def test_text_task(tmp_path):
    f = tmp_path / "t.txt"
    text = "héllo wörld, " * 40
    f.write_text(text, encoding="utf-8")
    task = get_task("text").create({"block_size": 8}, data_path=str(f))
    assert set(task.vocab.chars) == set(text)
    train, held = task.splits()
    assert len(train) + len(held) == len(text) and len(held) == len(text) - int(len(text) * 0.9)
    b = task.train_batch(np.random.default_rng(0), 4)
    x, y = b.arrays
    assert x.shape == y.shape == (4, 8)
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    again = get_task("text").from_dict(json.loads(json.dumps(task.to_dict())))   # as from config.json
    np.testing.assert_array_equal(again.splits()[0], train)
    with pytest.raises(ValueError, match="characters outside the vocabulary: 'z'"):
        task.encode_source("zebra")
    with pytest.raises(ValueError, match="empty input"):
        task.encode_source("")
    f.write_text(text + "!", encoding="utf-8")
    with pytest.raises(ValueError, match="changed since this run started"):
        get_task("text").from_dict(task.to_dict()).splits()
