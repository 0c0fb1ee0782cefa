"""Data: a character vocabulary and the task registry (``copy``, ``dates``, ``text``, ``digits``,
``tabletop``; see ``tasks.TASKS``). Every task generates or reads its own data; nothing is downloaded."""
from .tasks import Batch, Task, get_task, register_model_kind, register_task, task_names
from .vocab import CharVocab

__all__ = ["Batch", "CharVocab", "Task", "get_task", "register_model_kind", "register_task", "task_names"]
