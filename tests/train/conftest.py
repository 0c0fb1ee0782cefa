"""Fixtures of the training tests."""
import pytest
from train_helpers import TINY_MODEL, tiny_config, tiny_task

from npformer.train.trainer import Trainer


@pytest.fixture
def start_tiny(tmp_path):
    """start_tiny(name, **train_overrides) -> a Trainer for a new tiny run in tmp_path/name."""
    def make(name="run", **kw):
        return Trainer.start(tiny_task(), dict(TINY_MODEL), tiny_config(**kw), tmp_path / name)
    return make
