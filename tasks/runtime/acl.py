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

from tasks.base.keys import Keys

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
#: What a partition's service and control users may not run even on their own keys: listing
#: key names (``KEYS``, ``SCAN``, ``RANDOMKEY`` see every partition's names).
_NO_LISTING = ("-keys", "-scan", "-randomkey")


def user_name(role: str, keys: Keys) -> str:
    """The ACL user of ``role`` for a partition: ``gpusched-<role>``, with a cluster id
    ``gpusched-<cluster>-<role>`` (ACL users are server-wide: each partition needs its own)."""
    return USERS[role] if keys.cluster is None else f"gpusched-{keys.cluster}-{role}"


def partition_patterns(keys: Keys) -> tuple[str, ...]:
    """Every key and channel pattern a partition's workers use, and no other partition's.

    The state keys (``gpusched:{c1}:*``, kombu's held messages included), the queues
    (``gpusched.{c1}.*``, their priority lists too), kombu's binding tables of those
    queues, and the event exchange's channels (``/<db>.gpusched.{c1}.events/...``). A
    cluster id holds no brace (:data:`tasks.base.settings.CLUSTER_ID_PATTERN`) and no
    other name of the service holds ``{<id>}``, so no pattern reaches another partition.
    """
    return (
        f"~{keys.prefix}:*", f"~{keys.queue_prefix}.*",
        f"~_kombu.binding.{keys.queue_prefix}.*", f"~_kombu.binding_permanent.{keys.queue_prefix}.*",
        f"&*{keys.queue_prefix}.*",
    )


def role_rules(role: str, keys: Keys) -> tuple[str, ...]:
    """The ACL rules of ``role`` for one partition (without ``on`` and the password).

    Unpartitioned, service and control reach every key of the database; with a
    cluster id only the partition's (:func:`partition_patterns`): ACL rules are
    server-wide and a database is no boundary, key patterns are.

    Raises:
        KeyError: unknown role.
    """
    if role in ("service", "control"):
        if keys.cluster is None:
            return _FULL
        return ("resetkeys", "resetchannels", *partition_patterns(keys), *_FULL[2:], *_NO_LISTING)
    if role == "console":
        return ("resetkeys", "resetchannels", "-@all", *_CONSOLE_COMMANDS, f"%R~{keys.prefix}:*",
                *(f"%R~{queue}" for queue in keys.queues), f"%R~{keys.unacked}")
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
    return " ".join(("user", user_name(role, keys), "reset", "on", f"#{digest}", *role_rules(role, keys)))


def acl_file(passwords: Mapping[str, str], keys: Keys, *more: tuple[Mapping[str, str], Keys]) -> str:
    """The ACL file for ``redis-server --aclfile``: a user per role given a password, ``default`` off.

    Args:
        passwords, keys: the roles' passwords of one partition.
        more: further ``(passwords, keys)`` partitions sharing the server (their users
            cannot reach each other's keys).

    Raises:
        ValueError: an empty password, an unknown role, or one password used by two users.
    """
    lines = ["user default off"]
    seen: dict[str, str] = {}
    for partition_passwords, partition_keys in ((passwords, keys), *more):
        for role, password in partition_passwords.items():
            if role not in USERS:
                raise ValueError(f"unknown role {role!r}: one of {', '.join(USERS)}")
            name = user_name(role, partition_keys)
            if not password:
                raise ValueError(f"the password of {name} is empty")
            if password in seen:  # a shared password would let either user be the other
                raise ValueError(f"{name} and {seen[password]} have the same password")
            seen[password] = name
            lines.append(acl_line(role, password, partition_keys))
    return "\n".join(lines) + "\n"
