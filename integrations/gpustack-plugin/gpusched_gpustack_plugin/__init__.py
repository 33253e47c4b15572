"""GPUStack extension plugin: GPUStack leaves placement to gpusched.

GPUStack (2.2.3) has no switch for its scheduler: ``Server._start_leader_tasks``
always calls ``Server._start_scheduler``, and ``Server._start_worker_instance_cleaner``
deletes the instances of a worker that stayed ``not_ready`` past
``GPUSTACK_MODEL_INSTANCE_RESCHEDULE_GRACE_PERIOD``. GPUStack instantiates the entry
points of the group ``gpustack.plugins`` in ``create_app`` (``gpustack/extension.py``),
before the leader tasks start, so this plugin can replace both methods on the class.

Switched on by the environment variable :data:`SWITCH` (``1``, ``true``, ``yes``, ``on``);
otherwise it changes nothing but the status route. The replacement is idempotent: a second
instance (a test app, a reload) finds the methods already replaced.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from fastapi import FastAPI
from gpustack.extension import Plugin

__all__ = ["SWITCH", "ExternalPlacementPlugin", "external_scheduler_enabled"]

#: The setting that switches GPUStack's scheduler off (also a gpusched setting of that name).
SWITCH = "GPUSCHED_GPUSTACK_EXTERNAL_SCHEDULER"
#: Route the bridge reads to check that nothing else places instances.
STATUS_PATH = "/gpusched/plugin"
VERSION = "0.1.0"
_TRUE = frozenset({"1", "true", "yes", "on"})

logger = logging.getLogger(__name__)


def external_scheduler_enabled(environ: Any = None) -> bool:
    """Whether :data:`SWITCH` is set to a true value."""
    value = (environ if environ is not None else os.environ).get(SWITCH, "")
    return str(value).strip().lower() in _TRUE


def _scheduler_not_started(self: Any) -> None:
    """Replaces ``Server._start_scheduler``: instances stay ``pending`` for gpusched."""
    logger.info("GPUStack Scheduler NOT started: placement is external (gpusched).")


def _cleaner_not_started(self: Any) -> None:
    """Replaces ``Server._start_worker_instance_cleaner``: gpusched moves instances off lost workers."""
    logger.info("GPUStack worker instance cleaner NOT started: gpusched reschedules lost workers.")


def _switch_off_placement() -> None:
    from gpustack.server import server

    server.Server._start_scheduler = _scheduler_not_started  # type: ignore[method-assign]
    server.Server._start_worker_instance_cleaner = _cleaner_not_started  # type: ignore[method-assign]


class ExternalPlacementPlugin(Plugin):
    """Registered as ``gpusched`` in ``gpustack.plugins``."""

    def __init__(self, app: FastAPI, cfg: Any) -> None:
        super().__init__(app, cfg)
        enabled = external_scheduler_enabled()
        if enabled:
            _switch_off_placement()

        async def status() -> dict[str, Any]:
            return {"plugin": "gpusched", "version": VERSION, "external_scheduler": enabled}

        app.add_api_route(STATUS_PATH, status, methods=["GET"], include_in_schema=False)
