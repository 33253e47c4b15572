"""The client import path named by Contract 3: ``from tasks.client import submit``.

The client lives in :mod:`tasks.edges.client`.
"""

from __future__ import annotations

from tasks.edges.client import ServiceClient, Submission, WaitTimeout, default_client, submit

__all__ = ["ServiceClient", "Submission", "WaitTimeout", "default_client", "submit"]
