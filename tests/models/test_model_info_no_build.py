"""``npformer info`` builds no model: its counts come from the config (``models.config.param_count`` and
``components``), so a 123-byte config of 10^9 parameters is described under a 1 GiB memory limit, and a
model kind registered from outside, which npformer cannot count, says "parameters: unknown"."""
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from npformer.cli import main
from npformer.data import tasks
from npformer.models import (
    DecoderLM,
    DecoderLMConfig,
    EncoderClassifier,
    EncoderClassifierConfig,
    Transformer,
    TransformerConfig,
)
from npformer.models.config import Config, components
from npformer.models.vit import ViT, ViTConfig
from npformer.models.vla import VLA, VLAConfig

LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from npformer.cli import main
sys.exit(main(["info", "--json", sys.argv[1]]))
"""


def test_a_config_of_a_billion_parameters_is_described_in_1_gib(tmp_path):
    model = {"vocab_size": 1_000_000, "d_model": 1000, "n_heads": 8, "d_ff": 4000, "n_layers": 2}
    (tmp_path / "config.json").write_text(json.dumps({"model_kind": "decoder_lm", "model": model}))
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-c", LIMITED, str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    embed, layer = 1_000_000 * 1000 + 256 * 1000, 4 * 1000 ** 2 + 4 * 1000 + 2 * 1000 * 4000 + 4000 + 1000 + 4 * 1000
    assert out["components"] == {"embed": embed, "blocks": 2 * layer + 2 * 1000, "output projection": 0}
    assert out["parameters"] == embed + 2 * layer + 2 * 1000 > 10 ** 9


@pytest.mark.parametrize("model_cls,config", [
    (Transformer, TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=16, n_heads=2, d_ff=24,
                                    n_encoder_layers=2, n_decoder_layers=1, max_len=12)),
    (Transformer, TransformerConfig(src_vocab_size=30, tgt_vocab_size=20, d_model=16, n_heads=2, d_ff=24,
                                    n_encoder_layers=1, n_decoder_layers=2, max_len=12, share_embeddings=False,
                                    tie_output=False, norm_first=True, positional="learned")),
    (DecoderLM, DecoderLMConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=24, n_layers=2, tie_output=False)),
    (DecoderLM, DecoderLMConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=24, n_layers=3, norm_first=False)),
    (EncoderClassifier, EncoderClassifierConfig(vocab_size=20, n_classes=3, d_model=16, n_heads=2, d_ff=24)),
    (ViT, ViTConfig(pool="cls")), (ViT, ViTConfig(pool="mean", n_layers=1)),
    (VLA, VLAConfig(vocab_size=20)), (VLA, VLAConfig(vocab_size=20, text_dim=12, head="linear", n_layers=1)),
])
def test_the_rows_are_the_built_models_children(model_cls, config):
    model = model_cls(config, rng=0)
    built = [(name, child.num_parameters()) for name, child in model.children()]
    rows = components(config)
    assert [(name, n) for name, n, _ in rows if name != "output projection"] == built
    for (name, _, note), (_, child) in zip(rows, model.children(), strict=False):
        layers = getattr(child, "layers", None)
        if layers:
            assert note.startswith(f"{len(layers)} layers x {layers[0].num_parameters():,}"), (name, note)


@dataclass
class OutsideConfig(Config):
    width: int = 4                          # a field npformer knows nothing about


class OutsideModel:
    def __init__(self, config, rng=0, dtype=None):
        raise AssertionError("npformer info built the model")


def test_a_kind_registered_from_outside_has_unknown_parameters(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(tasks.MODEL_KINDS, "outside", (OutsideConfig, OutsideModel))
    (tmp_path / "config.json").write_text(json.dumps({"model_kind": "outside", "model": {"width": 7}}))
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "parameters: unknown" in out and "width                7" in out, out
    assert main(["info", "--json", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["parameters"] is None
