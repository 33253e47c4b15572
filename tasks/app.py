"""The Celery entry point named by Contract 3: ``celery -A tasks.app worker``.

The app and its configuration live in :mod:`tasks.runtime.celery_app`, which
reads the settings when it is imported. Invalid settings (a typo in
``GPUSCHED_*``, a bad value) stop ``celery`` here with the same one line on
stderr and exit code 2 as ``gpusched worker``, instead of Celery's traceback
of the failed import.
"""

from __future__ import annotations

import sys

from tasks.base.settings import SettingsError

try:
    from tasks.runtime.celery_app import app
except SettingsError as error:
    print(f"gpusched: {error}", file=sys.stderr, flush=True)
    raise SystemExit(2) from None

__all__ = ["app"]
