"""What a worker node checks before it consumes anything: configuration it cannot run with.

The chain (``configs/chain.json``, its ``precise`` block included) is read
lazily by each thread's runtime, so a broken file used to surface only in the
tasks: the worker logged it, said "ready", and consumed ``gpusched.decide``
messages that then failed one by one. :func:`check_configuration` reads it
once at start — ``gpusched worker`` before it starts Celery, and any
``celery -A tasks.app worker`` on Celery's ``worker_init`` signal, before the
pool forks or the consumer connects — and :func:`refuse_to_start` stops the
process with one line and exit code 2 (invalid configuration, as the CLI's
other commands exit).
"""

from __future__ import annotations

import sys
from typing import NoReturn

from tasks.base.settings import Settings, SettingsError
from tasks.intake.chain_config import load_chain

#: The exit code of a worker that refuses to start (the CLI's "invalid input or settings").
EXIT_INVALID_CONFIGURATION = 2


def check_configuration(settings: Settings) -> None:
    """Read what the worker's tasks will need and fail now if it is unusable.

    Raises:
        tasks.base.settings.SettingsError: one line naming the file or setting and the
            problem (:class:`~tasks.intake.chain_config.ChainConfigError` for the chain).
    """
    load_chain(settings.chain_path)


def refuse_to_start(error: SettingsError) -> NoReturn:
    """Print ``gpusched: <problem>`` on stderr and exit with :data:`EXIT_INVALID_CONFIGURATION`."""
    text = " ".join(str(error).split()) or type(error).__name__
    print(f"gpusched: {text}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_INVALID_CONFIGURATION)
