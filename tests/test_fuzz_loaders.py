"""Every file npformer reads comes from someone else. A bounded fuzz over the loaders, through the
command line called in-process: a run's config.json (``npformer info``, ``npformer eval``), its
trainer_state.json (``eval``, ``train --resume``), safetensors headers (a run's model.safetensors;
a sentence encoder's), a sentence encoder's config.json and pipeline files (``npformer embed``), the
TSV instruction file (``eval --instructions``) and the similar cache (``npformer similar``). Each
generated input ends cleanly: exit 0 (the file is still valid; a broken cache is rebuilt and the
search answers as before) or exit 2 with one line on stderr that names the file, never a traceback.

Inputs are valid files mutated (cut short, bytes flipped, bytes inserted, a value replaced by a
hostile one: deep nesting, huge or non-finite numbers, wrong types) and random bytes. The runs are
deterministic (derandomize), with a fixed number of examples each (``N``). Before the fuzz, the limits
one at a time: the JSON reader's, and each model's parameter count against the model it builds.
"""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_bert import write_model

from npformer import settings as npf_settings
from npformer.cli import main
from npformer.models import config as model_config
from npformer.pretrained import bert as bert_module

N = 50                                   # examples per fuzzed file (a fuzz of several files: N each)


def fuzz(n: int = N):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


# -- the limits, one at a time ---------------------------------------------------------------------

@pytest.mark.parametrize("text,words", [
    ("[" * 100_000 + "]" * 100_000, "deeper than 64 levels"),
    ("[" * 65 + "]" * 65, "deeper than 64 levels"),
    ('{"a": ' * 65 + "1" + "}" * 65, "deeper than 64 levels"),
    ("[" * 100_000, "deeper than 64 levels"),                           # unterminated as well
    ('{"a": 1e999}', "too large for a float"),
    ('{"a": -1e400}', "too large for a float"),
    ('{"a": NaN}', "holds NaN"),
    ('{"a": [Infinity]}', "holds Infinity"),
    ('{"a": ' + "1" * 65 + "}", "a number of 65 characters"),
    ('{"a": ' + "1" * 5000 + "}", "a number of 5,000 characters"),
    ('{"a": 0.' + "1" * 70 + "}", "a number of 72 characters"),
    ('{"a": [1, 2', "is not valid JSON"),
    ('["\\"[[[[", 1', "is not valid JSON"),
    ("\xff", "is not UTF-8 text"),
    ("[]", "must hold a JSON object, not a JSON array"),
])
def test_json_reader_limits(tmp_path, text, words):
    f = tmp_path / "x.json"
    f.write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff" else b"\xff")
    with pytest.raises(npf_settings.FileFormatError) as e:
        npf_settings.read_json(f, top=dict)
    msg = str(e.value)
    assert msg.startswith(str(f)) and words in msg and "\n" not in msg and len(msg) <= 300, msg


def test_json_reader_keeps_what_is_valid(tmp_path):
    f = tmp_path / "x.json"
    state = {"s": {"state": 2 ** 127 + 1, "inc": 3}, "deep": [[[[[[[[1]]]]]]]], "x": -1.5e300, "t": "[[{{\\\""}
    f.write_text(json.dumps(state))
    assert npf_settings.read_json(f) == state                          # a 128-bit generator state fits
    f.write_text('{"loss": NaN, "big": 1e999}')
    got = npf_settings.read_json(f, allow_nonfinite=True)               # for a caller that needs them
    assert np.isnan(got["loss"]) and got["big"] == float("inf")
    f.write_bytes(b" " * (npf_settings.MAX_JSON_BYTES + 1))
    with pytest.raises(npf_settings.FileFormatError, match="larger than 1,048,576 bytes"):
        npf_settings.read_json(f)


def test_reading_names_the_file_once():
    with pytest.raises(npf_settings.FileFormatError, match=r"^f.json: is malformed \(KeyError: 'x'\)$"):
        with npf_settings.reading("f.json"):
            _ = {}["x"]
    with pytest.raises(npf_settings.FileFormatError, match=r"^f.json says no$"):
        with npf_settings.reading("f.json"):
            raise ValueError("f.json says no")
    with pytest.raises(ZeroDivisionError):                              # a bug stays a bug
        with npf_settings.reading("f.json"):
            _ = 1 / 0


MODEL_CONFIGS = {
    "transformer": st.fixed_dictionaries({
        "src_vocab_size": st.integers(2, 30), "d_model": st.sampled_from([4, 8, 12]), "n_heads": st.just(2),
        "d_ff": st.integers(1, 20), "n_encoder_layers": st.integers(0, 2), "n_decoder_layers": st.integers(1, 2),
        "max_len": st.integers(1, 20), "positional": st.sampled_from(["sinusoidal", "learned"]),
        "norm_first": st.booleans(), "final_norm": st.sampled_from([None, True, False]),
        "share_embeddings": st.booleans(), "tie_output": st.booleans(), "tgt_vocab_size": st.integers(2, 30)}),
    "decoder_lm": st.fixed_dictionaries({
        "vocab_size": st.integers(2, 30), "d_model": st.sampled_from([4, 8]), "n_heads": st.just(2),
        "d_ff": st.integers(1, 20), "n_layers": st.integers(1, 3), "max_len": st.integers(1, 20),
        "positional": st.sampled_from(["sinusoidal", "learned"]), "norm_first": st.booleans(),
        "final_norm": st.sampled_from([None, True, False]), "tie_output": st.booleans()}),
    "classifier": st.fixed_dictionaries({
        "vocab_size": st.integers(2, 30), "n_classes": st.integers(1, 5), "head": st.sampled_from(["classification",
                                                                                                  "tagging"]),
        "d_model": st.sampled_from([4, 8]), "n_heads": st.just(2), "d_ff": st.integers(1, 20),
        "n_layers": st.integers(1, 2), "positional": st.sampled_from(["sinusoidal", "learned"]),
        "norm_first": st.booleans()}),
    "vit": st.fixed_dictionaries({
        "image_size": st.sampled_from([4, 8]), "patch_size": st.sampled_from([2, 4]), "in_channels": st.integers(1, 3),
        "n_classes": st.integers(1, 5), "d_model": st.sampled_from([4, 8]), "n_heads": st.just(2),
        "d_ff": st.integers(1, 20), "n_layers": st.integers(1, 2), "pool": st.sampled_from(["cls", "mean"]),
        "positional": st.sampled_from(["sinusoidal", "learned"]), "norm_first": st.booleans()}),
    "vla": st.fixed_dictionaries({
        "vocab_size": st.integers(2, 30), "max_words": st.integers(1, 6), "image_size": st.sampled_from([8, 16]),
        "patch_size": st.just(8), "in_channels": st.integers(1, 3), "d_model": st.sampled_from([4, 8]),
        "n_heads": st.just(2), "d_ff": st.integers(1, 20), "n_layers": st.integers(1, 2),
        "head": st.sampled_from(["pointer", "linear"]), "text_dim": st.sampled_from([0, 5]),
        "norm_first": st.booleans()}),
    "action_lm": st.fixed_dictionaries({
        "vocab_size": st.integers(2, 30), "max_words": st.integers(1, 6), "image_size": st.sampled_from([8, 16]),
        "patch_size": st.just(8), "in_channels": st.integers(1, 3), "action_vocab": st.integers(1, 20),
        "action_len": st.integers(1, 4), "d_model": st.sampled_from([4, 8]), "n_heads": st.just(2),
        "d_ff": st.integers(1, 20), "n_layers": st.integers(1, 2), "text_dim": st.sampled_from([0, 5]),
        "positional": st.sampled_from(["sinusoidal", "learned"]), "norm_first": st.booleans()}),
}


@pytest.mark.parametrize("kind", sorted(MODEL_CONFIGS))
def test_param_count_is_the_built_models(kind):
    """param_count reads each model's __init__ as arithmetic: it must agree with the model built."""
    from npformer.data.tasks import model_kind_classes

    config_cls, model_cls = model_kind_classes(kind)

    @fuzz(12)
    @given(MODEL_CONFIGS[kind])
    def check(fields):
        if kind == "transformer" and fields["share_embeddings"]:
            fields["tgt_vocab_size"] = fields["src_vocab_size"]
        c = config_cls(**fields)
        assert model_config.param_count(c) == model_cls(c, rng=0).num_parameters()
    check()


@pytest.mark.parametrize("kind,fields,words", [
    ("decoder_lm", {"vocab_size": 50, "d_model": 2 ** 16, "n_heads": 1, "d_ff": 1}, "parameters, more than npformer"),
    ("transformer", {"src_vocab_size": 2 ** 31, "tgt_vocab_size": 2 ** 31, "d_model": 2, "n_heads": 1},
     "parameters, more than npformer"),
    ("classifier", {"vocab_size": 5, "n_classes": 2, "n_layers": 10 ** 9, "d_model": 2, "n_heads": 1},
     "at most 1,024 layers"),
    ("decoder_lm", {"vocab_size": 5, "max_len": 2 ** 40, "positional": "sinusoidal", "d_model": 2, "n_heads": 1},
     "sinusoidal position table"),
])
def test_an_absurd_run_config_is_refused_before_building(tmp_path, capsys, monkeypatch, kind, fields, words):
    from npformer.data.tasks import model_kind_classes

    config_cls, model_cls = model_kind_classes(kind)
    monkeypatch.setattr(model_cls, "__init__", lambda *a, **k: pytest.fail("built"))
    (tmp_path / "config.json").write_text(json.dumps({"task": "copy", "model_kind": kind, "model": fields,
                                                      "train": {}, "data": {}}))
    assert main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert words in err and str(tmp_path / "config.json") in err and len(err.strip().splitlines()) == 1, err


# -- the fuzz ------------------------------------------------------------------------------------

HOSTILE = ["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "9" * 30, "9" * 100, "9" * 5000, "-1", "0", "1.5",
           "-0.0", "1e308", "2147483648", "18446744073709551616", "true", "false", "null", '""', '"x"',
           '"\\ud800"', "[]", "{}", "[1, 2, 3]", '{"a": 1}', "[" * 3000 + "]" * 3000,
           '{"a": ' * 200 + "1" + "}" * 200, "[" * 64 + "]" * 64]


def _paths(value, path=()):
    """Every (path, value) inside a JSON value."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, path + (i,))


def _replace(value, path, marker):
    if not path:
        return marker
    value = json.loads(json.dumps(value))
    inner = value
    for k in path[:-1]:
        inner = inner[k]
    inner[path[-1]] = marker
    return value


@st.composite
def mutated(draw, valid: bytes, json_text: bool = True):
    """valid bytes, mutated: cut short, bytes flipped or inserted, a JSON value replaced by a hostile
    literal (json_text), a hostile document, or random bytes."""
    how = draw(st.sampled_from(["cut", "flip", "insert", "value", "value", "document", "random"]
                               if json_text else ["cut", "flip", "insert", "random"]))
    if how == "cut":
        return valid[:draw(st.integers(0, max(len(valid) - 1, 0)))]
    if how == "flip":
        data = bytearray(valid)
        for _ in range(draw(st.integers(1, 3))):                       # any byte, or one that keeps it text
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255) | st.sampled_from(b'0189{}[]":,-.e '))
        return bytes(data)
    if how == "insert":
        at = draw(st.integers(0, len(valid)))
        return valid[:at] + draw(st.binary(min_size=1, max_size=8)) + valid[at:]
    if how == "random":
        return draw(st.binary(max_size=300))
    literal = draw(st.sampled_from(HOSTILE) | st.integers(-3, 40).map(str))
    if how == "document":
        return literal.encode()
    doc = json.loads(valid)
    path, _ = draw(st.sampled_from(list(_paths(doc))))
    marker = "\x00MARK\x00"
    return json.dumps(_replace(doc, path, marker)).replace(json.dumps(marker), literal).encode()


def clean(code: int, err: str, command: str, file: Path) -> None:
    """Exit 0, or exit 2 with one line naming ``file``, or its directory (for a loader that says
    which files disagree)."""
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"npformer {command}: error: "), err
        assert str(file.parent) in lines[0], err


@pytest.fixture
def small_limits(monkeypatch):
    """The size limits lowered while fuzzing (inserted digits can make 32 into 3200000): what passes
    them builds in milliseconds. The limits themselves are tested above."""
    for module in (model_config, bert_module):
        monkeypatch.setattr(module, "MAX_PARAMETERS", 200_000)
        monkeypatch.setattr(module, "MAX_LAYERS", 8)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny copy run at step 1 and a tiny tabletop run at step 0, saved by the trainer."""
    from npformer.data.copy import CopyTask
    from npformer.data.tasks import get_task
    from npformer.train.trainer import TrainConfig, Trainer

    d = tmp_path_factory.mktemp("fuzz_runs")
    copy = Trainer.start(CopyTask(CopyTask.Settings(n_symbols=4, min_len=1, max_len=4)),
                         {"d_model": 8, "n_heads": 2, "d_ff": 8, "n_encoder_layers": 1, "n_decoder_layers": 1},
                         TrainConfig(steps=1, batch_size=4, eval_every=100, eval_n=4, final_eval_n=4), d / "copy")
    copy.run(progress=False, plot=False)
    tabletop = Trainer.start(get_task("tabletop").create({"eval_size": 4}),
                             {"d_model": 8, "n_heads": 2, "d_ff": 8, "n_layers": 1},
                             TrainConfig(steps=1, batch_size=4, eval_every=100, eval_n=4), d / "tabletop")
    tabletop.close()
    return d


def fresh_copy(src: Path, tmp: Path) -> Path:
    """A copy of the directory ``src`` in ``tmp`` (the previous example's removed)."""
    out = tmp / src.name
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    return out


def _mutated_header(data, safetensors: bytes):
    """safetensors bytes whose header is mutated (its length kept right, or not), or whose first
    bytes are."""
    (n,) = struct.unpack("<Q", safetensors[:8])
    header, rest = safetensors[8:8 + n], safetensors[8 + n:]
    if data.draw(st.booleans()):
        new = data.draw(mutated(header))
        return struct.pack("<Q", len(new)) + new + rest
    return data.draw(mutated(safetensors[:8 + n], json_text=False)) + rest


def mutate(data, f: Path) -> None:
    """Replace the file ``f`` by a mutation of itself (of its header, for a safetensors file)."""
    valid = f.read_bytes()
    f.write_bytes(_mutated_header(data, valid) if f.suffix == ".safetensors" else data.draw(mutated(valid)))


RUN = "RUN"                              # the run directory, in the commands below
RUN_COMMANDS = {                         # a run's file -> the commands that read it
    "config.json": [["info", RUN], ["eval", RUN, "--n", "2"]],
    "model.safetensors": [["info", RUN], ["eval", RUN, "--n", "2"]],
    "trainer_state.json": [["eval", RUN, "--n", "2"],
                           ["train", "copy", "--resume", "--out", RUN, "--steps", "1", "--no-progress", "--no-plot"]],
}


@pytest.mark.parametrize("name", sorted(RUN_COMMANDS))
@fuzz()
@given(data=st.data())
def test_fuzz_run_files(runs, small_limits, tmp_path, capsys, data, name):
    run = fresh_copy(runs / "copy", tmp_path)
    mutate(data, run / name)
    for command in RUN_COMMANDS[name]:
        code = main([str(run) if a is RUN else a for a in command])
        clean(code, capsys.readouterr().err, command[0], run / name)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("fuzz_model") / "model")


@fuzz()
@given(data=st.data(), name=st.sampled_from(["config.json", "model.safetensors", "modules.json",
                                               "sentence_bert_config.json", "1_Pooling/config.json",
                                               "tokenizer.json"]))
def test_fuzz_sentence_encoder_files(tiny_model, small_limits, tmp_path, capsys, data, name):
    model = fresh_copy(tiny_model, tmp_path)
    mutate(data, model / name)
    (tmp_path / "in.txt").write_text("the cat sat\n")
    code = main(["embed", "--model", str(model), "--output", str(tmp_path / "o.npy"), str(tmp_path / "in.txt")])
    clean(code, capsys.readouterr().err, "embed", model / name)


INSTRUCTIONS = (b"# instruction<TAB>colour<TAB>container\n"
                b"grab the crimson cube and drop it in the crate\tred\tbox\n"
                b"put the blue block in the bowl\tblue\tbowl\n")


@fuzz()
@given(data=st.data())
def test_fuzz_instruction_file(runs, small_limits, tmp_path, capsys, data):
    f = tmp_path / "lines.tsv"
    f.write_bytes(data.draw(mutated(INSTRUCTIONS, json_text=False)
                            | st.lists(st.sampled_from(["put", "the", "red", "blue", "box", "bowl", "\t", "\n", "#",
                                                        " ", "\r", "\x00", "é", "x" * 300]),
                                       max_size=40).map(lambda w: "".join(w).encode())))
    clean(main(["eval", str(runs / "tabletop"), "--instructions", str(f), "--n", "1"]),
          capsys.readouterr().err, "eval", f)


@fuzz()
@given(data=st.data())
def test_fuzz_similar_cache(tiny_model, small_limits, tmp_path, capsys, data):
    from npformer.cli.similar import cache_path

    corpus = tmp_path / "corpus.txt"
    cache = cache_path(corpus)
    argv = ["similar", "--model", str(tiny_model), "--corpus", str(corpus), "-k", "2", "a cat"]
    if not corpus.exists():
        corpus.write_text("the cat sat on the mat\nrain today\nthe dog sat\nthe dog sat\n")
        assert main(argv) == 0
        (tmp_path / "ref.txt").write_text(capsys.readouterr().out)
        (tmp_path / "good.npz").write_bytes(cache.read_bytes())
    good = (tmp_path / "good.npz").read_bytes()
    cache.write_bytes(data.draw(mutated(good, json_text=False)))
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0 and not err and out == (tmp_path / "ref.txt").read_text(), (code, err)
    assert cache.read_bytes() == good, "a broken cache is rebuilt"
