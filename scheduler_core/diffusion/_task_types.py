"""Diffusion task types (upstream ``ModelTaskType``) and the predicates the tuner asks."""

from __future__ import annotations

from typing import Literal

#: Upstream ``ModelTaskType`` members the flow distinguishes (``ServerArgs._adjust_offload``, the tuner).
TaskType = Literal["T2I", "I2I", "TI2I", "T2V", "I2V", "TI2V", "I2M", "VLA_ACTION"]

#: ``ModelTaskType.is_image_gen()``: text/image-to-image tasks.
IMAGE_GEN_TASKS: frozenset[str] = frozenset({"T2I", "I2I", "TI2I"})

#: ``ModelTaskType.is_action_gen()``: the Pi0.5 vision-language-action task.
ACTION_GEN_TASK = "VLA_ACTION"


def upper_task_type(value: object) -> object:
    """Upper-case a task-type string so ``t2i`` and ``T2I`` validate alike.

    Non-strings pass through untouched so the type check can reject them.
    """
    return value.upper() if isinstance(value, str) else value


def is_image_gen(task_type: str) -> bool:
    """Whether ``task_type`` generates images (T2I, I2I or TI2I)."""
    return task_type in IMAGE_GEN_TASKS


def is_action_gen(task_type: str) -> bool:
    """Whether ``task_type`` is the action (VLA) task, whose unset offload flags default off."""
    return task_type == ACTION_GEN_TASK
