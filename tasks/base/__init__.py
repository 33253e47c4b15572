"""Base: the leaves every room may read; they import nothing of ``tasks`` but each other.

The lowest floor (``docs/architecture.md``; ``tests/test_room_order.py`` pins
that every import goes to the same room or a lower one).

* :mod:`~tasks.base.settings` — ``Settings`` (``configs/service.json``, ``GPUSCHED_*``);
* :mod:`~tasks.base.logging` — structlog configuration;
* :mod:`~tasks.base.keys` — every key, stream and queue name;
* :mod:`~tasks.base.step` — the wire ``Step`` one stage of a decision hands the next;
* :mod:`~tasks.base.events` — the audit event envelope and types;
* :mod:`~tasks.base.digests` — request, result and inputs digests;
* :mod:`~tasks.base.rows` — how cluster rows are stored: row JSON, instance keys, metadata;
* :mod:`~tasks.base.liveness` — when each periodic job of this process last finished a pass;
* :mod:`~tasks.base.lifecycle` — the request record's states and their legal transitions.
"""
