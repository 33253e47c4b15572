"""Redis ACL users of a deployment: who may enqueue requests, who may change the cluster.

Whoever can write to the service's Redis controls it: the Celery queues, the
cluster, the ledger and the audit log all live there. Redis ACL users split
that by role (``docs/security.md``):

* ``gpusched-service`` — the workers (and Flower): every data command on every
  key and channel of the database, no administration (``-@admin``: no
  ``CONFIG``, ``ACL``, ``DEBUG``, ``SHUTDOWN``, ...) and no ``FLUSHALL`` /
  ``FLUSHDB``;
* ``gpusched-control`` — the control plane and the operator's CLI
  (``cluster apply``, ``cluster event``, ``cancel``, ``submit`` that records
  itself, consumer groups on the results): the same commands — changing the
  cluster runs the same Lua scripts the workers run —, under its own name and
  password, so it can be rotated or revoked alone and ``ACL LOG`` tells who
  did what;
* ``gpusched-submit`` — a submitter: it may push messages onto
  ``gpusched.requests`` (``LPUSH``; the workers record and validate each
  request, ``submit_via = "queue"``), read kombu's binding of that queue,
  read the results stream (``XREAD``, ``XRANGE``, ``XREVRANGE``, ``XLEN``), the
  request records, the worker nodes' heartbeats, the data generation and the
  acknowledged position (``gpusched:acked``: what a replica holds) — and
  nothing else: no script, no
  other queue (no cluster event), no write to the ledger, the records or the
  streams. What it pushes onto the requests queue can only be a decision:
  :mod:`tasks.runtime.middleware.queue_guard` dead-letters any other task;
* ``gpusched-console`` — the web console (``gpusched console``) and any
  read-only dashboard: read commands only (``GET``, hash, sorted-set and stream
  reads, ``LLEN``; ``MULTI``/``EXEC`` to read several keys at one instant) on the
  partition's keys, its queues' lengths and kombu's ``unacked`` hash; no
  write, no script.

:func:`acl_file` renders the users for ``redis-server --aclfile`` with
SHA-256 password hashes (``#<hex>``, never the password) and the ``default``
user off; ``gpusched acl`` prints it (docker-compose writes it from the
passwords in ``.env`` before Redis starts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from tasks.state.keys import Keys

#: The ACL user name of each role.
USERS: dict[str, str] = {
    "service": "gpusched-service",
    "control": "gpusched-control",
    "submit": "gpusched-submit",
    "console": "gpusched-console",
}
#: Roles ``gpusched acl`` writes only when their password is set (the others are required).
OPTIONAL_ROLES = frozenset({"console"})

#: The console's commands: reads only (MULTI/EXEC read several keys at one instant).
_CONSOLE_COMMANDS = (
    "+ping", "+select", "+echo", "+multi", "+exec", "+discard",
    "+get", "+mget", "+exists", "+type", "+hget", "+hmget", "+hgetall", "+hvals", "+hkeys", "+hlen",
    "+hexists", "+zrange", "+zcard", "+zscore", "+xrange", "+xrevrange", "+xread", "+xlen", "+llen",
)

#: Service and control: every data command, on every key and channel; no administration, no flush.
_FULL = ("~*", "&*", "+@all", "-@admin", "-flushall", "-flushdb")


def role_rules(role: str, keys: Keys) -> tuple[str, ...]:
    """The ACL rules of ``role`` for one partition (without ``on`` and the password).

    Raises:
        KeyError: unknown role.
    """
    if role in ("service", "control"):
        return _FULL
    if role == "console":
        return ("resetkeys", "resetchannels", "-@all", *_CONSOLE_COMMANDS, f"%R~{keys.prefix}:*",
                *(f"%R~{queue}" for queue in keys.queues), "%R~unacked")
    if role != "submit":
        raise KeyError(role)
    return (
        "resetkeys", "resetchannels", "-@all",
        "+ping", "+select", "+echo",
        # push a message onto the requests queue (no other list, no declaration)
        "+lpush", f"%W~{keys.requests_queue}",
        # kombu routes a message through its queue's binding (read only)
        "+smembers", f"%R~_kombu.binding.{keys.requests_queue}",
        # results and records: read only
        "+xread", "+xrange", "+xrevrange", "+xlen", f"%R~{keys.results}",
        "+hget", "+hmget", "+hgetall", "+exists", f"%R~{keys.request('*')}",
        # waiting for a result: is any worker node alive (its heartbeats)
        f"%R~{keys.nodes}",
        # the data generation check before submitting, and how far a replica acknowledged the results
        "+get", "+mget", f"%R~{keys.generation}", f"%R~{keys.data_lost}", f"%R~{keys.version}",
        f"%R~{keys.acked}",
    )


def acl_line(role: str, password: str, keys: Keys) -> str:
    """One ``user`` line of an ACL file: the role's user, on, its password's SHA-256, its rules."""
    digest = hashlib.sha256(password.encode()).hexdigest()
    return " ".join(("user", USERS[role], "reset", "on", f"#{digest}", *role_rules(role, keys)))


def acl_file(passwords: Mapping[str, str], keys: Keys) -> str:
    """The ACL file for ``redis-server --aclfile``: a user per role given a password, ``default`` off.

    Raises:
        ValueError: an empty password, or an unknown role.
    """
    lines = ["user default off"]
    for role, password in passwords.items():
        if role not in USERS:
            raise ValueError(f"unknown role {role!r}: one of {', '.join(USERS)}")
        if not password:
            raise ValueError(f"the password of {USERS[role]} is empty")
        lines.append(acl_line(role, password, keys))
    return "\n".join(lines) + "\n"
