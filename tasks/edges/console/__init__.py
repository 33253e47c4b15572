"""The read-only web console (``gpusched console``): cluster map, requests, one request, live feed, health.

Modules: :mod:`~tasks.edges.console.app` (the Starlette app and its routes),
:mod:`~tasks.edges.console.data` (what each page reads, with the CLI's own
views), :mod:`~tasks.edges.console.feed` (one reader of the audit stream fanned
out to every open page as server-sent events); ``templates/`` and ``static/``
ship in the package (nothing is loaded from a CDN). Importing this package
imports nothing of Starlette, Redis or Celery.
"""

from __future__ import annotations

__all__: list[str] = []
