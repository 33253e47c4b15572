"""The Celery entry point named by Contract 3: ``celery -A tasks.app worker``.

The app and its configuration live in :mod:`tasks.runtime.celery_app`.
"""

from __future__ import annotations

from tasks.runtime.celery_app import app

__all__ = ["app"]
