"""``make demo``: the main job end to end on embedded defaults.

First every example request is decided in process; then, when the service
modules are present, the Redis/Celery pipeline runs on the example cluster.
"""

from __future__ import annotations

import sys

from tasks.edges.demo_offline import run_offline_demo


def main() -> int:
    """Run the demo; returns a process exit code."""
    run_offline_demo()
    try:
        from tasks.edges.demo_service import run_service_demo
    except ModuleNotFoundError:
        return 0
    return run_service_demo()


if __name__ == "__main__":
    sys.exit(main())
