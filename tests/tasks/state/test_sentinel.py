"""Connecting through Sentinel: the settings, the state clients, the broker and its failover strategy."""

from __future__ import annotations

import importlib

import pytest
from kombu.transport import redis as kombu_redis
from redis.sentinel import SentinelConnectionPool

from tasks.base.settings import Settings, SettingsError, load_settings
from tasks.runtime import broker
from tasks.runtime.broker_door import GuardedChannel
from tasks.runtime.celery_app import celery_config, client_app
from tasks.state import sentinel
from tasks.state.context import redis_client

SENTINELS = "10.0.0.1:26379,10.0.0.2:26380,[fd00::3]:26381"


def _through_sentinel(**extra: object) -> Settings:
    return Settings(redis_sentinels=SENTINELS, redis_sentinel_master="gpusched", **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "why"), [
    ("10.0.0.1", "'10.0.0.1' is not host:port"),
    ("10.0.0.1:", "'10.0.0.1:' is not host:port"),
    (":26379", "':26379' is not host:port"),
    ("h1:26379,,h2:26379", "'' is not host:port"),
    ("h1:26379;h2:26379", "'h1:26379;h2:26379' is not host:port"),
    ("h1:0", "'h1:0': port 0 is outside 1..65535"),
    ("h1:70000", "'h1:70000': port 70000 is outside 1..65535"),
    ("fd00::3:26379", "'fd00::3:26379' is not host:port"),
    ("h 1:26379", "'h 1:26379' is not host:port"),
    ("h1:26379,h1:26379", "names 'h1:26379' twice"),
    ("", "must list at least one Sentinel as host:port"),
])
def test_a_bad_sentinel_list_is_refused_on_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, value: str, why: str,
) -> None:
    monkeypatch.setenv("GPUSCHED_REDIS_SENTINELS", value)
    monkeypatch.setenv("GPUSCHED_REDIS_SENTINEL_MASTER", "gpusched")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert str(raised.value) == f"invalid setting redis_sentinels: {why}"


@pytest.mark.parametrize(("environment", "message"), [
    ({"GPUSCHED_REDIS_SENTINELS": "h1:26379"},
     "redis_sentinel_master: must name the master when redis_sentinels is set"),
    ({"GPUSCHED_REDIS_SENTINEL_MASTER": "gpusched"},
     "redis_sentinels: must list the Sentinels (host:port,host:port,...) when redis_sentinel_master is set"),
    ({"GPUSCHED_REDIS_SENTINELS": "h1:26379", "GPUSCHED_REDIS_SENTINEL_MASTER": "my master"},
     "redis_sentinel_master: 'my master' must match ^[A-Za-z0-9_.-]{1,64}$"),
    ({"GPUSCHED_REDIS_SENTINELS": "h1:26379", "GPUSCHED_REDIS_SENTINEL_MASTER": "m",
      "GPUSCHED_REDIS_URL": "unix:///run/redis.sock"},
     "redis_url: must be a redis:// or rediss:// URL with redis_sentinels "
     "(a unix socket does not fail over)"),
    ({"GPUSCHED_REPLICA_ACK_TIMEOUT_S": "30"},
     "replica_ack_timeout_s: must stay below redis_socket_timeout_s"),
    ({"GPUSCHED_MIN_REPLICAS_ACKED": "-1"}, "min_replicas_acked: Input should be greater than or equal to 0"),
])
def test_sentinel_settings_that_do_not_go_together_are_refused_naming_one(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], message: str,
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert str(raised.value) == f"invalid setting {message}"
    assert "\n" not in str(raised.value)


def test_the_sentinel_list_is_parsed_and_normalised() -> None:
    settings = Settings(redis_sentinels=" h1:26379, [fd00::3]:26381 ", redis_sentinel_master="m")
    assert settings.redis_sentinels == "h1:26379,[fd00::3]:26381"
    assert settings.sentinel_addresses == (("h1", 26379), ("fd00::3", 26381))


def test_replicas_are_required_through_sentinel_unless_set_otherwise() -> None:
    assert Settings().replicas_required == 0  # a plain Redis: nothing to wait for
    assert _through_sentinel().replicas_required == 1
    assert _through_sentinel(min_replicas_acked=0).replicas_required == 0
    assert Settings(min_replicas_acked=2).replicas_required == 2


def test_the_master_connection_takes_database_credentials_and_tls_from_the_url() -> None:
    plain = _through_sentinel(redis_url="redis://ignored-host:1/3", redis_username="svc",
                              redis_password="secret")
    assert sentinel.master_kwargs(plain) == {"db": 3, "username": "svc", "password": "secret"}
    tls = _through_sentinel(redis_url="rediss://u:p@ignored/2?ssl_cert_reqs=none", redis_password="other")
    assert sentinel.master_kwargs(tls) == {"db": 2, "username": "u", "password": "p", "ssl": True,
                                           "ssl_cert_reqs": "none"}  # the URL's credentials win
    assert sentinel.sentinel_kwargs(tls)["ssl"] is True
    guarded = sentinel.sentinel_kwargs(_through_sentinel(redis_sentinel_password="s3"))
    assert guarded["password"] == "s3" and guarded["retry"].get_retries() == 0


def test_a_state_client_asks_the_sentinels_for_the_named_master() -> None:
    client = redis_client(_through_sentinel(redis_url="redis://x/4"))
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "gpusched"
    assert [s.connection_pool.connection_kwargs["port"] for s in pool.sentinel_manager.sentinels] == [
        26379, 26380, 26381]
    assert pool.connection_kwargs["db"] == 4 and pool.connection_kwargs["decode_responses"] is True


def test_the_broker_goes_through_the_doors_sentinel_transport() -> None:
    config = celery_config(_through_sentinel(redis_url="redis://:pw@x/5"))
    assert config["broker_url"] == (
        "sentinel://10.0.0.1:26379/5;sentinel://10.0.0.2:26380/5;sentinel://[fd00::3]:26381/5"
    )
    assert config["broker_password"] == "pw"
    options = config["broker_transport_options"]
    assert options["master_name"] == "gpusched" and options["visibility_timeout"] == 300
    module, _, name = config["broker_transport"].partition(":")
    transport = getattr(importlib.import_module(module), name)
    assert issubclass(transport, kombu_redis.SentinelTransport)
    channel = transport.Channel
    assert issubclass(channel, GuardedChannel) and issubclass(channel, kombu_redis.SentinelChannel)
    assert issubclass(channel, broker.RideOutChannel) and channel.QoS is broker.RideOutQoS


def test_a_broker_failover_keeps_the_doors_transport() -> None:
    """kombu's switch to the next Sentinel re-reads the transport from its URL's scheme
    (``sentinel``: kombu's plain transport, without the door); the service's strategy keeps it."""
    app = client_app(_through_sentinel())
    try:
        connection = app.connection_for_write()
        for _ in range(4):  # round the list and further
            connection.maybe_switch_next()
            assert connection.transport_cls == "tasks.runtime.broker_door:SentinelTransport"
        assert connection.hostname == "10.0.0.2:26380"  # the next Sentinel, taken as a host name
        plain = app.connection_for_write(failover_strategy="round-robin")
        plain.maybe_switch_next()
        assert plain.transport_cls == "sentinel"  # what would happen without it
    finally:
        app.close()
