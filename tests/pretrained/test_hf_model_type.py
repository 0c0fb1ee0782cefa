"""npformer.pretrained.hf.model_type: a Hugging Face directory's config.json names its model_type;
npformer's own run directories have none; a hostile config.json is one clear error naming it."""
import json
import os

import pytest

from npformer.pretrained.hf import MAX_MODEL_TYPE_CHARS, model_type
from npformer.settings import MAX_JSON_BYTES, FileFormatError


def test_model_type_of_a_hugging_face_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta", "vocab_size": 5}))
    assert model_type(tmp_path) == "roberta"
    assert model_type(str(tmp_path)) == "roberta"


def test_none_for_no_directory_no_config_or_no_key(tmp_path):
    assert model_type(tmp_path / "absent") is None
    (tmp_path / "file").write_text("{}")
    assert model_type(tmp_path / "file") is None                   # a file, not a directory
    assert model_type(tmp_path) is None                            # no config.json
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 5, "model_type": None}))
    assert model_type(tmp_path) is None


def test_a_run_directory_has_no_model_type(tmp_path):
    """config.json as npformer train writes it: a tiny dates run, through the library's Trainer."""
    from npformer.data.tasks import get_task
    from npformer.train.trainer import TrainConfig, Trainer

    model = {"d_model": 8, "n_heads": 2, "d_ff": 8, "n_encoder_layers": 1, "n_decoder_layers": 1}
    trainer = Trainer.start(get_task("dates").create(), model, TrainConfig(steps=1, batch_size=2), tmp_path / "run")
    trainer.lock.release()
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert "model_type" not in config and config["model_kind"] == "transformer"
    assert model_type(tmp_path / "run") is None


@pytest.mark.parametrize("text,words", [
    ("[1, 2]", "must hold a JSON object"),
    ("{not json", "config.json"),
    ('{"model_type": 3}', "model_type must be a name"),
    ('{"model_type": ""}', "model_type must be a name"),
    (json.dumps({"model_type": "x" * (MAX_MODEL_TYPE_CHARS + 1)}), "model_type must be a name"),
    ("[" * 100 + "]" * 100, "deeper"),
    (json.dumps({"model_type": "bert", "pad": "x" * MAX_JSON_BYTES}), "larger than"),
])
def test_hostile_config_is_one_line_naming_it(tmp_path, text, words):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(FileFormatError) as e:
        model_type(tmp_path)
    msg = str(e.value)
    assert words in msg and "config.json" in msg and "\n" not in msg


def test_config_that_is_not_a_regular_file(tmp_path):
    (tmp_path / "config.json").mkdir()
    with pytest.raises(FileFormatError, match="not a regular file"):
        model_type(tmp_path)
    os.rmdir(tmp_path / "config.json")
    (tmp_path / "config.json").symlink_to(tmp_path / "nowhere.json")   # dangling link
    with pytest.raises(FileFormatError, match="not a regular file"):
        model_type(tmp_path)
    if hasattr(os, "mkfifo"):                                          # a FIFO would block a plain read
        os.unlink(tmp_path / "config.json")
        os.mkfifo(tmp_path / "config.json")
        with pytest.raises(FileFormatError, match="not a regular file"):
            model_type(tmp_path)
