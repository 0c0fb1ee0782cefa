"""``npformer info``: the base model's count, and a run directory's model."""
import json

from npformer.cli import main
from npformer.models import DecoderLM, DecoderLMConfig, EncoderClassifierConfig


def test_info_base_model(capsys):
    assert main(["info", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parameters"] == 63_082_496 and out["paper_parameters"] == 65_000_000
    assert out["components"] == {"embed": 18_944_000, "encoder": 18_914_304, "decoder": 25_224_192,
                                 "output projection": 0}
    assert out["config"]["d_model"] == 512


def test_info_run_dir_and_bare_config(tmp_path, capsys):
    cfg = DecoderLMConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=2, tie_output=False)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": "t", "model_kind": "decoder_lm", "model": cfg.to_dict(),
                                                 "train": {}, "data": {}}))
    from safetensors.numpy import save_file
    model = DecoderLM(cfg)
    save_file(model.state_dict(), str(run / "model.safetensors"))
    assert main(["info", str(run)]) == 0
    text = capsys.readouterr().out
    assert f"parameters {model.num_parameters():>27,}" in text
    assert "matches the config" in text and "generator" in text

    bare = tmp_path / "bare"
    bare.mkdir()
    EncoderClassifierConfig(vocab_size=20, n_classes=3).save_json(bare / "config.json")
    assert main(["info", str(bare), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "EncoderClassifier"


def test_info_errors(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing")]) == 2
    (tmp_path / "config.json").write_text('{"d_model": 30, "n_heads": 4}')
    assert main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is not a directory" in err and "d_model (30) must be divisible by n_heads (4)" in err
