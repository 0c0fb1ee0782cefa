"""The tabletop policy on a frozen MiniLM from the command line: train --text-encoder minilm, then eval,
eval --instructions (beside the scratch policy), act on a paraphrase, the study and the attention figure;
and the bad instruction files that must end in one line and exit code 2."""
import json

import pytest

from npformer.cli import main
from npformer.data.tabletop_policy import scene_for_seed
from oracles import minilm_dir

TINY = ["--set", "d_model=16", "--set", "n_heads=2", "--set", "d_ff=16", "--set", "n_layers=1",
        "--set", "batch_size=16", "--set", "eval_size=20", "--set", "eval_every=1000", "--no-progress", "--no-plot"]
LINES = ("grab the crimson cube and drop it in the crate\tred\tbox\n"
         "put the blue block in the bowl\tblue\tbowl\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    minilm_dir()                                                   # skip (or fail under CI) without the weights
    d = tmp_path_factory.mktemp("minilm_runs")
    assert main(["train", "tabletop", "--text-encoder", "minilm", "--steps", "4", "--out", str(d / "minilm"),
                 *TINY]) == 0
    assert main(["train", "tabletop", "--steps", "4", "--out", str(d / "scratch"), *TINY]) == 0
    (d / "lines.tsv").write_text(LINES)
    return d


def test_the_run_records_its_text_encoder_and_loads_in_eval(runs, capsys):
    cfg = json.loads((runs / "minilm" / "config.json").read_text())
    assert cfg["data"]["text_encoder"] == "minilm" and cfg["model"]["text_dim"] == 384
    assert json.loads((runs / "scratch" / "config.json").read_text())["model"]["text_dim"] == 0
    assert main(["train", "tabletop", "--resume", "--steps", "5", "--out", str(runs / "minilm"), "--no-progress",
                 "--no-plot"]) == 0                                # resumes as it was configured
    capsys.readouterr()
    assert main(["eval", str(runs / "minilm"), "--n", "10"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["n"] == 10 and 0 <= m["success"] <= 1 and "yellow_bowl_success" in m


def test_eval_instructions_both_policies_line_for_line(runs, capsys):
    out = {}
    for name in ("minilm", "scratch"):
        capsys.readouterr()
        assert main(["eval", str(runs / name), "--instructions", str(runs / "lines.tsv"), "--n", "12"]) == 0
        out[name] = json.loads(capsys.readouterr().out)
    for name, m in out.items():
        assert m["n_lines"] == 2 and m["n"] == 12 and m["text_encoder"] == name
        assert [r["line"] for r in m["lines"]] == [1, 2] and [r["colour"] for r in m["lines"]] == ["red", "blue"]
        assert all(0 <= r["success"] <= 1 for r in m["lines"])
        assert m["success"] == pytest.approx(sum(r["success"] for r in m["lines"]) / 2)
    assert out["minilm"]["unknown_words"] == 0                     # MiniLM reads any text
    assert out["scratch"]["unknown_words"] == 2 and out["scratch"]["lines_with_unknown_words"] == 1
    assert out["scratch"]["lines"][0]["unknown_words"] == ["crimson", "crate"]
    # the same seed draws the same scenes, so a rerun gives the same numbers
    assert main(["eval", str(runs / "minilm"), "--instructions", str(runs / "lines.tsv"), "--n", "12"]) == 0
    assert json.loads(capsys.readouterr().out)["lines"] == out["minilm"]["lines"]


def test_act_on_a_paraphrase_the_study_and_the_attention_figure(runs, capsys):
    run = str(runs / "minilm")
    assert main(["act", run, "--seed", "1", "--instruction", "lift the crimson brick into the crate",
                 "--out", str(runs / "act.png")]) == 0
    out = capsys.readouterr().out
    assert "word pieces read through MiniLM: [CLS] lift the crimson brick into the crate [SEP]" in out
    assert "not checked" in out and (runs / "act.png").stat().st_size > 1000
    seed = next(s for s in range(50) if "red" in scene_for_seed(s)[0].blocks)
    assert main(["act", run, "--seed", str(seed), "--instruction", "put the red brick in the crate",
                 "--out", str(runs / "act2.png")]) == 0
    out = capsys.readouterr().out
    assert "the scene says pick" in out and "the place is not checked" in out
    assert main(["act", run, "--study", "20"]) == 0
    study = json.loads(capsys.readouterr().out)
    assert study["n"] == 20 and len(study["pick->colour"]) == 1 and len(study["pick->colour"][0]) == 2
    assert main(["attention", run, "put the red block in the box", "--out", str(runs / "att.png")]) == 0
    assert (runs / "att.png").stat().st_size > 1000


@pytest.mark.parametrize("body,message", [
    ("put the red block in the box\tred\tbox\nput the blue block in the bowl, blue, bowl\n", "line 2: expected"),
    ("put the orange block in the box\torange\tbox\n", "line 1: colour 'orange' is not in the world"),
    ("put the red block in the crate\tred\tcrate\n", "line 1: container 'crate' is not in the world"),
    ("", "holds no instructions"),
    ("put the red block in the box" + " and the box" * 12 + "\tred\tbox\n", "line 1: the instruction has"),
])
def test_bad_instruction_files_are_one_line_and_exit_2(runs, capsys, tmp_path, body, message):
    f = tmp_path / "bad.tsv"
    f.write_text(body)
    for name in ("minilm", "scratch"):
        capsys.readouterr()
        assert main(["eval", str(runs / name), "--instructions", str(f)]) == 2
        err = capsys.readouterr().err
        assert message in err and str(f) in err and err.count("\n") == 1, err


def test_bad_uses_of_the_options(runs, capsys, tmp_path):
    for argv, message in [
        (["train", "copy", "--text-encoder", "minilm", "--out", str(tmp_path / "c")], "option of the tabletop task"),
        (["eval", str(runs / "minilm"), "--instructions", str(tmp_path / "missing.tsv")], "missing.tsv"),
        (["act", str(runs / "minilm"), "--instruction", "   "], "empty instruction"),
    ]:
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_a_scratch_run_saved_before_unk_still_loads_and_evaluates(runs, capsys):
    """An older scratch run: its word table has no [UNK] row (every other word at the same id). eval
    --instructions reads its unknown words as padding and says so; act refuses them as before."""
    import shutil

    from npformer.data import tabletop as tt
    from npformer.train.checkpoint import read_safetensors, safetensors_bytes

    old = runs / "scratch_before_unk"
    shutil.copytree(runs / "scratch", old)
    cfg = json.loads((old / "config.json").read_text())
    assert cfg["model"]["vocab_size"] == len(tt.VOCAB)
    cfg["model"]["vocab_size"] = tt.UNK_ID
    (old / "config.json").write_text(json.dumps(cfg))
    tensors, meta = read_safetensors(old / "model.safetensors")
    tensors["word_embed.tok.weight"] = tensors["word_embed.tok.weight"][:tt.UNK_ID]
    (old / "model.safetensors").write_bytes(safetensors_bytes(tensors, meta))
    out = {}
    for name in ("scratch", "scratch_before_unk"):
        capsys.readouterr()
        assert main(["eval", str(runs / name), "--instructions", str(runs / "lines.tsv"), "--n", "12"]) == 0
        out[name] = json.loads(capsys.readouterr().out)
    assert out["scratch"]["unknown_as"] == "[UNK]" and out["scratch_before_unk"]["unknown_as"].startswith("padding")
    assert out["scratch_before_unk"]["unknown_words"] == 2
    # the line with no unknown word reads the same ids in both, so it scores the same
    assert out["scratch"]["lines"][1] == out["scratch_before_unk"]["lines"][1]
    assert main(["eval", str(old), "--n", "10"]) == 0
    assert main(["act", str(old), "--instruction", "put the red brick in the box"]) == 2
    assert "unknown word 'brick'" in capsys.readouterr().err
