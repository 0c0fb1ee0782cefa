"""The task registry: what a model learns, how its batches are made and how it is scored.

A task is a ``Task`` subclass registered under its ``name``. It ties together
  * a model kind (a config dataclass and a model class, see ``register_model_kind``),
  * its own data settings (a ``Settings`` dataclass, saved in the run's config.json),
  * training batches (``train_batch``), the loss (``loss``), held-out scoring (``evaluate``),
  * and, for text tasks, turning text into ids and back (``encode_source``, ``decode_target``).

Adding a task (e.g. in npformer/data/mytask.py)::

    class MyTask(Task):
        name = "mytask"                     # npformer train mytask
        model_kind = "classifier"           # a key of MODEL_KINDS, or a kind given to register_model_kind
        primary_metric = "accuracy"         # shown in the progress bar and in metrics.json
        higher_is_better = True

        @dataclass
        class Settings:                     # the task's data settings, JSON values only
            n_classes: int = 10             # one comment per field

        def default_model_config(self): return {"vocab_size": ..., "n_classes": self.settings.n_classes}
        def default_train_config(self): return {"steps": 500, "batch_size": 32}
        def train_batch(self, rng, batch_size): return Batch((x, y), n_tokens=x.size)   # model.loss(x, y, ...)
        def evaluate(self, model, n=None, seed=0): return {"accuracy": ..., "loss": ...}

and add ``"mytask": ("npformer.data.mytask", "MyTask")`` to ``TASKS`` below: the registry imports the
module when the task is first asked for. Code outside npformer calls ``register_task(MyTask)`` instead.
Nothing registers itself when it is imported.
"""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..settings import from_dict as settings_from_dict
from ..settings import quoted

if TYPE_CHECKING:
    from ..models.config import Config
    from ..nn import Module


# -- the registry ---------------------------------------------------------------------------------
# Two tables, resolved lazily with importlib: a module is imported when its entry is first asked for,
# and a module that fails to import is an error naming it. ``register_task``/``register_model_kind``
# add entries explicitly (such an entry holds the classes themselves).

# task name -> (module, Task class name)
TASKS: dict[str, tuple] = {
    "copy": ("npformer.data.copy", "CopyTask"),
    "dates": ("npformer.data.dates", "DatesTask"),
    "text": ("npformer.data.text", "TextTask"),
    "digits": ("npformer.data.digits", "DigitsTask"),
    "tabletop": ("npformer.data.tabletop", "TabletopTask"),
    "gripper": ("npformer.data.gripper", "GripperTask"),
}

# model kind -> (module, config class name, model class name)
MODEL_KINDS: dict[str, tuple] = {
    "transformer": ("npformer.models", "TransformerConfig", "Transformer"),
    "decoder_lm": ("npformer.models", "DecoderLMConfig", "DecoderLM"),
    "classifier": ("npformer.models", "EncoderClassifierConfig", "EncoderClassifier"),
    "vit": ("npformer.models.vit", "ViTConfig", "ViT"),
    "vla": ("npformer.models.vla", "VLAConfig", "VLA"),
    "action_lm": ("npformer.models.action_lm", "ActionLMConfig", "ActionLM"),
}


def _resolve(table: dict, what: str, name: str) -> tuple:
    """The classes of ``table[name]``: imported from (module, *class names), or as registered."""
    if name not in table:
        raise ValueError(f"unknown {what} {quoted(name)}; known {what}s: {', '.join(sorted(table))}")
    module, *names = table[name]
    if not isinstance(module, str):                   # registered with register_task/register_model_kind
        return table[name]
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} {quoted(name)}: module {module} failed to import: {e}") from e
    return tuple(getattr(mod, n) for n in names)


def register_model_kind(kind: str, config_cls, model_cls) -> None:
    """Make ``kind`` buildable: ``config_cls`` is a dataclass of JSON fields, ``model_cls(config, rng=rng)``
    a Module with ``loss(*batch_arrays, label_smoothing=, rng=)``."""
    MODEL_KINDS[kind] = (config_cls, model_cls)


def model_kind_classes(kind: str) -> tuple[type[Config], Callable[..., Module]]:
    """(config class, model class) of a model kind; the model class is called as cls(config, rng=, dtype=)."""
    return _resolve(MODEL_KINDS, "model kind", kind)


def model_config_from_dict(kind: str, d: dict):
    """The model config dataclass of ``kind`` from a dict (unknown keys and wrong types raise)."""
    config_cls, _ = model_kind_classes(kind)
    return settings_from_dict(config_cls, d, what="model")


# -- batches --------------------------------------------------------------------------------------

@dataclass
class Batch:
    """One training batch: ``arrays`` go positionally to ``model.loss``; ``n_tokens`` counts the tokens
    the model reads (non-padding inputs), for the tokens-per-second figure; the first ``n_inputs`` arrays
    are what ``model.forward`` reads (default: all but the last, the targets)."""
    arrays: tuple
    n_tokens: int
    n_inputs: int | None = None

    @property
    def inputs(self) -> tuple:
        """The arrays ``model.forward`` reads (the training probe's)."""
        return self.arrays[:len(self.arrays) - 1 if self.n_inputs is None else self.n_inputs]


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

    settings: Any                               # each subclass declares its own Settings here

    def __init__(self, settings=None) -> None:
        self.settings = settings if settings is not None else self.Settings()

    # construction and serialisation
    @classmethod
    def create(cls, overrides: dict | None = None, data_path: str | None = None) -> "Task":
        """The task for a NEW run, from setting overrides (and --data FILE for tasks that read one)."""
        if data_path is not None and not cls.uses_data_file:
            raise ValueError(f"task {quoted(cls.name)} generates its own data and takes no --data file")
        if cls.uses_data_file and data_path is None:
            raise ValueError(f"task {quoted(cls.name)} needs a text file: --data FILE")
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


# -- tasks by name ---------------------------------------------------------------------------------

def register_task(cls: type[Task]) -> type[Task]:
    """Make ``cls`` available as ``get_task(cls.name)``; returns ``cls``. For code outside npformer,
    called explicitly (npformer's own tasks are listed in ``TASKS``)."""
    if not cls.name or not cls.model_kind:
        raise ValueError(f"task class {cls.__name__} must set name and model_kind")
    TASKS[cls.name] = (cls,)
    return cls


def task_names() -> list[str]:
    """The task names, sorted."""
    return sorted(TASKS)


def get_task(name: str) -> type[Task]:
    """The task class named ``name``; ValueError listing the known names otherwise."""
    return _resolve(TASKS, "task", name)[0]
