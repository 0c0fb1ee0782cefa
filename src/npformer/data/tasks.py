"""The task registry: what a model learns, how its batches are made and how it is scored.

A task is a ``Task`` subclass registered under its ``name``. It ties together
  * a model kind (a config dataclass and a model class, see ``register_model_kind``),
  * its own data settings (a ``Settings`` dataclass, saved in the run's config.json),
  * training batches (``train_batch``), the loss (``loss``), held-out scoring (``evaluate``),
  * and, for text tasks, turning text into ids and back (``encode_source``, ``decode_target``).

Adding a task (e.g. in npformer/data/mytask.py)::

    @register_task
    class MyTask(Task):
        name = "mytask"                     # npformer train mytask
        model_kind = "classifier"           # or "transformer", "decoder_lm", or your registered kind
        primary_metric = "accuracy"         # shown in the progress bar and in metrics.json
        higher_is_better = True

        @dataclass
        class Settings:                     # the task's data settings, JSON values only
            n_classes: int = 10             # one comment per field

        def default_model_config(self): return {"vocab_size": ..., "n_classes": self.settings.n_classes}
        def default_train_config(self): return {"steps": 500, "batch_size": 32}
        def train_batch(self, rng, batch_size): return Batch((x, y), n_tokens=x.size)   # model.loss(x, y, ...)
        def evaluate(self, model, n=None, seed=0): return {"accuracy": ..., "loss": ...}

and add its module name to ``TASK_MODULES`` below so the registry imports it on first use.
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..train.settings import from_dict as settings_from_dict

# -- model kinds ----------------------------------------------------------------------------------

# kind -> (module, config class name, model class name); imported on first use
_MODEL_KINDS: dict[str, tuple] = {
    "transformer": ("npformer.models", "TransformerConfig", "Transformer"),
    "decoder_lm": ("npformer.models", "DecoderLMConfig", "DecoderLM"),
    "classifier": ("npformer.models", "EncoderClassifierConfig", "EncoderClassifier"),
}


def register_model_kind(kind: str, config_cls, model_cls) -> None:
    """Make ``kind`` buildable: ``config_cls`` is a dataclass of JSON fields, ``model_cls(config, rng=rng)``
    a Module with ``loss(*batch_arrays, label_smoothing=, rng=)``."""
    _MODEL_KINDS[kind] = (config_cls, model_cls)


def model_kind_classes(kind: str) -> tuple[type, type]:
    """(config class, model class) of a registered model kind."""
    if kind not in _MODEL_KINDS:
        raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(sorted(_MODEL_KINDS))}")
    entry = _MODEL_KINDS[kind]
    if isinstance(entry[0], str):
        mod = importlib.import_module(entry[0])
        entry = (getattr(mod, entry[1]), getattr(mod, entry[2]))
        _MODEL_KINDS[kind] = entry
    return entry


def model_config_from_dict(kind: str, d: dict):
    """The model config dataclass of ``kind`` from a dict (unknown keys and wrong types raise)."""
    config_cls, _ = model_kind_classes(kind)
    return settings_from_dict(config_cls, d, what="model")


# -- batches --------------------------------------------------------------------------------------

@dataclass
class Batch:
    """One training batch: ``arrays`` go positionally to ``model.loss``; ``n_tokens`` counts the tokens
    the model reads (non-padding inputs), for the tokens-per-second figure."""
    arrays: tuple
    n_tokens: int


# -- tasks ----------------------------------------------------------------------------------------

class Task:
    """Base class of every task; see the module docstring. Subclasses set the class attributes and
    override ``train_batch`` and ``evaluate`` (and ``default_model_config``/``default_train_config``)."""

    name: ClassVar[str] = ""                    # registry key: npformer train NAME
    model_kind: ClassVar[str] = ""              # a key of the model-kind registry
    primary_metric: ClassVar[str] = "loss"      # the held-out number that sums the run up
    higher_is_better: ClassVar[bool] = False    # direction of primary_metric
    uses_data_file: ClassVar[bool] = False      # the task reads --data FILE
    description: ClassVar[str] = ""             # one line for --help

    @dataclass
    class Settings:                             # the task's data settings (none by default)
        pass

    def __init__(self, settings=None) -> None:
        self.settings = settings if settings is not None else self.Settings()

    # construction and serialisation
    @classmethod
    def create(cls, overrides: dict | None = None, data_path: str | None = None) -> "Task":
        """The task for a NEW run, from setting overrides (and --data FILE for tasks that read one)."""
        if data_path is not None and not cls.uses_data_file:
            raise ValueError(f"task {cls.name!r} generates its own data and takes no --data file")
        if cls.uses_data_file and data_path is None:
            raise ValueError(f"task {cls.name!r} needs a text file: --data FILE")
        return cls(cls.settings_with(overrides))

    @classmethod
    def settings_with(cls, overrides: dict | None = None):
        """The Settings dataclass: defaults <- ``overrides`` (type-checked)."""
        base = dataclasses.asdict(cls.Settings())
        return settings_from_dict(cls.Settings, {**base, **(overrides or {})}, what="data")

    def to_dict(self) -> dict:
        """The data settings as JSON (config.json's "data")."""
        return dataclasses.asdict(self.settings)

    @classmethod
    def from_dict(cls, d: dict) -> "Task":
        return cls(settings_from_dict(cls.Settings, d, what="data"))

    # model and training defaults
    def default_model_config(self) -> dict:
        """Overrides of the model config class's defaults for this task (vocabulary sizes, width...)."""
        return {}

    def default_train_config(self) -> dict:
        """Overrides of ``TrainConfig``'s defaults for this task (steps, batch size, schedule...)."""
        return {}

    def model_config(self, overrides: dict | None = None):
        """The model config dataclass: class defaults <- task defaults <- ``overrides``."""
        config_cls, _ = model_kind_classes(self.model_kind)
        base = dataclasses.asdict(config_cls()) if _has_all_defaults(config_cls) else {}
        return settings_from_dict(config_cls, {**base, **self.default_model_config(), **(overrides or {})},
                                  what="model")

    def build_model(self, config, rng: np.random.Generator):
        """A fresh model of this task's kind from its config (dataclass or dict)."""
        config_cls, model_cls = model_kind_classes(self.model_kind)
        if isinstance(config, dict):
            config = settings_from_dict(config_cls, config, what="model")
        return model_cls(config, rng=rng)

    # training and scoring
    def train_batch(self, rng: np.random.Generator, batch_size: int) -> Batch:
        raise NotImplementedError

    def loss(self, model, batch: Batch, rng: np.random.Generator | None, label_smoothing: float = 0.0):
        """(loss, grads) of one batch; grads has one entry per ``model.state_dict()`` key."""
        return model.loss(*batch.arrays, label_smoothing=label_smoothing, rng=rng)

    def evaluate(self, model, n: int | None = None, seed: int = 0) -> dict[str, float]:
        """Metrics on ``n`` held-out examples drawn with ``seed`` (the model is in eval mode)."""
        raise NotImplementedError


def _has_all_defaults(cls) -> bool:
    return all(f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
               for f in dataclasses.fields(cls))


# -- the registry ---------------------------------------------------------------------------------

# modules that register tasks when imported; a missing one (not written yet) is skipped
TASK_MODULES = ["copy", "dates", "text", "digits", "tabletop"]
_TASKS: dict[str, type[Task]] = {}
_loaded = False


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make ``cls`` available as ``get_task(cls.name)``."""
    if not cls.name or not cls.model_kind:
        raise ValueError(f"task class {cls.__name__} must set name and model_kind")
    _TASKS[cls.name] = cls
    return cls


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in TASK_MODULES:
        try:
            importlib.import_module(f"{__package__}.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{mod}":
                raise


def task_names() -> list[str]:
    """The registered task names, sorted."""
    _load_all()
    return sorted(_TASKS)


def get_task(name: str) -> type[Task]:
    """The task class registered as ``name``; ValueError listing the known names otherwise."""
    _load_all()
    if name not in _TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(_TASKS))}")
    return _TASKS[name]
