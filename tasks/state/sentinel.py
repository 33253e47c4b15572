"""Reaching the master through Redis Sentinel: the state clients (redis-py) and the broker (kombu).

With ``redis_sentinels`` and ``redis_sentinel_master`` set, no process
connects to a fixed host: each connection asks the Sentinels which server is
the master of that name, and asks again after a connection to it fails or
answers ``READONLY`` (a demoted master). ``redis_url`` still says how to talk
to the master — its scheme (``rediss://`` for TLS), its database and its
credentials (else ``redis_username``/``redis_password``) — but its host and
port are not used.

* The state clients are redis-py's :class:`redis.sentinel.Sentinel`
  ``master_for`` clients (:func:`master_client`); their connections are
  :class:`redis.sentinel.SentinelManagedConnection`, which re-discover the
  master on every reconnect.
* The broker is kombu's Sentinel transport (``sentinel://host:port;...``
  URLs, ``master_name`` and ``sentinel_kwargs`` transport options), subclassed
  by the broker door (:class:`tasks.runtime.broker_door.SentinelTransport`) so
  the door and the out-of-memory ride-out work there too.

kombu lists the Sentinels as alternate broker URLs, and on a connection error
its ``Connection.switch`` moves to the next one — re-reading the transport
from that URL's scheme, which would replace the door's transport with kombu's
plain one after the first failover. :func:`same_transport` is the failover
strategy the service gives Celery instead (``broker_failover_strategy``): it
hands kombu each Sentinel as a bare ``host:port``, which ``switch`` takes as
a host name and keeps the configured transport. Which Sentinel kombu names
does not matter: its Sentinel channel asks every Sentinel of the list on each
connection (redis-py's ``discover_master``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import cycle
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.connection import SSLConnection, parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel

from tasks.base.settings import Settings

#: What ``redis_url`` contributes to a master connection through Sentinel (not its host or port).
URL_PARTS_KEPT = ("db", "username", "password")


def sentinel_kwargs(settings: Settings) -> dict[str, Any]:
    """Connection arguments for the Sentinels themselves (not the master).

    Their password is ``redis_sentinel_password``; a query to one Sentinel is
    not retried (the next Sentinel of the list is asked instead) and gives up
    after ``redis_socket_connect_timeout_s``; TLS when ``redis_url`` is
    ``rediss://``.
    """
    timeout = settings.redis_socket_connect_timeout_s
    kwargs: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        "protocol": 2,
    }
    if settings.redis_sentinel_password is not None:
        kwargs["password"] = settings.redis_sentinel_password.get_secret_value()
    if uses_tls(settings):
        kwargs["ssl"] = True
    return kwargs


def uses_tls(settings: Settings) -> bool:
    """Whether ``redis_url`` asks for TLS (``rediss://``)."""
    return urlsplit(settings.redis_url).scheme == "rediss"


def master_kwargs(settings: Settings) -> dict[str, Any]:
    """What ``redis_url`` says about the master, without its host: database, credentials, TLS.

    Credentials in the URL win over ``redis_username``/``redis_password``, as for a plain URL.
    """
    parsed: dict[str, Any] = parse_url(settings.redis_url)  # type: ignore[no-untyped-call]
    kwargs: dict[str, Any] = {name: parsed[name] for name in URL_PARTS_KEPT if name in parsed}
    kwargs.update({name: value for name, value in parsed.items() if name.startswith("ssl_")})
    if parsed.get("connection_class") is SSLConnection:
        kwargs["ssl"] = True  # SentinelConnectionPool picks its TLS connection class from this
    if "username" not in kwargs and settings.redis_username:
        kwargs["username"] = settings.redis_username
    if "password" not in kwargs and settings.redis_password is not None:
        kwargs["password"] = settings.redis_password.get_secret_value()
    return kwargs


def sentinel_manager(settings: Settings) -> Sentinel:
    """A redis-py :class:`~redis.sentinel.Sentinel` over ``redis_sentinels`` (connects lazily)."""
    # untyped before redis 8.2, typed since: the ignore holds for both
    return Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
        list(settings.sentinel_addresses), sentinel_kwargs=sentinel_kwargs(settings)
    )


def master_client(settings: Settings, **connection: Any) -> redis.Redis:
    """A client of the current master of ``redis_sentinel_master``; it follows a failover.

    Args:
        connection: connection arguments (timeouts, retry, decoding) for the master's connections.
    """
    assert settings.redis_sentinel_master is not None  # Settings require it with redis_sentinels
    manager = sentinel_manager(settings)
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call,unused-ignore]
        settings.redis_sentinel_master, redis_class=redis.Redis, **master_kwargs(settings), **connection
    )
    return client


def same_transport(alternates: Iterable[str]) -> Iterator[str]:
    """kombu's failover strategy for Sentinel URLs: each as ``host:port``, round robin.

    A bare host keeps the transport Celery configured (``Connection.switch``
    re-reads the transport from a URL's scheme only); see the module docstring.
    """
    return cycle([urlsplit(url).netloc.rpartition("@")[2] if "://" in url else url for url in alternates])


def broker_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings that point the broker at the Sentinels (merged into ``celery_config``).

    ``broker_url`` lists every Sentinel (``sentinel://host:port/db;...``, no
    credentials: they travel as ``broker_user``/``broker_password``), the
    transport is the broker door's Sentinel transport, and the transport
    options name the master and carry the Sentinels' own connection arguments.
    """
    kwargs = master_kwargs(settings)
    db = int(kwargs.get("db", 0))
    urls = [f"sentinel://{_netloc(host, port)}/{db}" for host, port in settings.sentinel_addresses]
    config: dict[str, Any] = {
        "broker_url": ";".join(urls),
        "broker_user": kwargs.get("username"),
        "broker_password": kwargs.get("password"),
        "broker_transport": "tasks.runtime.broker_door:SentinelTransport",
        "broker_failover_strategy": same_transport,
    }
    if kwargs.get("ssl"):
        options = {name: value for name, value in kwargs.items() if name.startswith("ssl_")}
        config["broker_use_ssl"] = options or {"ssl_cert_reqs": "required"}
    return config


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    """kombu's Sentinel transport options: the master's name and the Sentinels' connection arguments."""
    return {"master_name": settings.redis_sentinel_master, "sentinel_kwargs": sentinel_kwargs(settings)}


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
