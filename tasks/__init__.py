"""gpusched service: Celery app and tasks, Redis state, CLI."""
