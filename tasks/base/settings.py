"""Service settings: ``configs/service.json`` defaults, ``GPUSCHED_*`` environment overrides.

Precedence (highest first): keyword arguments, ``GPUSCHED_<FIELD>`` environment
variables, the JSON file, the defaults below. The JSON file is
``$GPUSCHED_CONFIG_DIR/service.json`` when that variable is set, else the
``service.json`` shipped with the package (:func:`config_dir`).

A typo must not pass silently: an environment variable named ``GPUSCHED_*``
that is not a setting (nor :data:`CONFIG_DIR_ENV`), and a key of
``service.json`` that is not a setting, are refused with a one-line
:class:`SettingsError` naming it (and the closest setting).

The Celery/Redis timing rules the service relies on are enforced here, so a
deployment cannot configure itself into duplicate execution:

* ``task_time_limit_s`` < ``visibility_timeout_s`` (a running task is never
  redelivered while it still runs);
* ``max_countdown_s`` ≤ ``visibility_timeout_s / 2`` (an ETA message is never
  restored while it waits in a worker's memory); longer delays go through the
  Redis sorted sets drained by :mod:`tasks.runtime.drainer`;
* ``stuck_after_s`` > ``visibility_timeout_s``: the outbox watchdog re-drives a
  request only after the broker had its chance to redeliver a lost message.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_origin
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as SourceError

#: Environment variable naming the folder that holds ``service.json`` and ``chain.json``.
CONFIG_DIR_ENV = "GPUSCHED_CONFIG_DIR"
#: Prefix of every setting's environment variable.
ENV_PREFIX = "GPUSCHED_"
#: ``GPUSCHED_*`` environment variables that are not settings.
NON_SETTING_ENV = frozenset({CONFIG_DIR_ENV})
#: The package that ships ``configs/`` (``service.json``, ``chain.json``, the diffusion data).
CONFIG_PACKAGE = "gpusched_configs"
#: URL schemes of a Redis server (redis-py and kombu's Redis transport both take them).
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})
#: Cluster ids become Redis hash tags and queue names: keep them to a safe alphabet.
CLUSTER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: A Sentinel master name (sentinel.conf's ``sentinel monitor <name> ...``; no spaces there).
SENTINEL_MASTER_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: One Sentinel address: a host name or IPv4 address, or an IPv6 address in brackets, and a port.
SENTINEL_ADDRESS = re.compile(
    r"^(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]{1,253})):(?P<port>[0-9]{1,5})$"
)
MIB = 1 << 20
#: Room for Celery's headers and envelope around a message body (``argsrepr`` is at most 1 KiB).
MESSAGE_OVERHEAD_BYTES = 64 * 1024


class SettingsError(ValueError):
    """Settings that cannot be used; the message is one line and names the setting."""


class RuleBroken(ValueError):
    """A rule between settings is broken; ``setting`` is the first one it names.

    Raised inside the model validator, so pydantic reports it without a field
    (``loc`` is empty); :func:`describe_invalid` takes the setting from here.
    """

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting} {message}")
        self.setting = setting
        self.message = message


def config_dir() -> Path:
    """The configuration folder: ``$GPUSCHED_CONFIG_DIR``, else the shipped ``configs/``.

    The shipped data is the ``gpusched_configs`` package (``configs/`` in the source
    tree, package data in a wheel), found through :mod:`importlib.resources`, so an
    installed ``gpusched`` works from any directory.
    """
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    try:
        return Path(str(resources.files(CONFIG_PACKAGE)))
    except ModuleNotFoundError:  # a source tree that is not installed
        return Path(__file__).resolve().parents[2] / "configs"


class Settings(BaseSettings):
    """Everything a worker, the client and the CLI need to talk to one deployment."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    redis_url: str = "redis://localhost:6379/0"
    redis_username: str | None = Field(
        default=None, description="Redis ACL user (when the URL names none): the process's role"
    )
    redis_password: SecretStr | None = Field(
        default=None, description="its password (when the URL holds none); never logged"
    )
    redis_sentinels: str | None = Field(
        default=None,
        description="host:port,host:port,...: find the master through these Sentinels "
        "(redis_url then gives only the scheme, the database and the credentials)",
    )
    redis_sentinel_master: str | None = Field(
        default=None, description="the master's name in Sentinel (required with redis_sentinels)"
    )
    redis_sentinel_password: SecretStr | None = Field(
        default=None, description="the Sentinels' own password (their requirepass); never logged"
    )
    min_replicas_acked: int | None = Field(
        default=None, ge=0,
        description="replicas that must hold a write before it is acknowledged; "
        "None: 1 with redis_sentinels, 0 without",
    )
    replica_ack_timeout_s: float = Field(
        default=2.0, gt=0, description="how long one acknowledgement waits for the replicas (WAIT)"
    )
    ack_without_replica: bool = Field(
        default=True,
        description="with no replica attached to the master (after a failover, until the old master "
        "rejoins), acknowledge on the master alone (said in the log; a loss is detected as a rollback)",
    )
    submit_via: Literal["record", "queue"] = Field(
        default="record",
        description="record: submit() records the request itself (service/control users); "
        "queue: it only enqueues it and a worker records it (the submitter user)",
    )
    cluster: str | None = Field(default=None, description="partition id; None = single cluster")

    visibility_timeout_s: int = Field(default=300, ge=2)
    task_time_limit_s: int = Field(default=120, ge=1)
    task_soft_time_limit_s: int = Field(default=100, ge=1)
    unacked_restore_interval_s: int = Field(default=10, ge=1)
    max_countdown_s: float = Field(default=10.0, ge=0)

    max_crashes: int = Field(default=3, ge=1, description="deliveries that never completed")
    max_task_errors: int = Field(default=3, ge=1, description="unexpected exceptions per message")
    transient_backoff_s: float = Field(default=1.0, ge=0)

    decide_lock: bool = Field(default=True, description="serialise decide+reserve per partition")
    decide_batch_size: int = Field(
        default=50, ge=1, le=200,
        description="requests per gpusched.decide_batch message: submit_many and the service's own "
        "wake-ups, reschedules and re-drives (1: one gpusched.decide message each)",
    )
    collector_refresh_s: float = Field(
        default=300.0, ge=0,
        description="a worker's garbage collector: every this many seconds, between messages, its "
        "frozen heap is released and collected in full (0: every message; see tasks.runtime.middleware."
        "collector)",
    )
    decide_lock_wait_s: float = Field(default=5.0, ge=0)
    decide_lock_ttl_s: float = Field(default=10.0, gt=0)
    decider_standby: bool = Field(
        default=False,
        description="one worker node per partition takes decision messages, the others stand by "
        "and take over when its presence expires (see tasks.runtime.standby)",
    )
    decider_presence_ttl_s: float = Field(
        default=3.0, ge=0.3, le=60.0,
        description="with decider_standby: how long the active node's presence outlives its last "
        "renewal (renewed three times per TTL): a standby takes over this long after it stopped",
    )
    conflict_max_attempts: int = Field(default=8, ge=1)
    conflict_jitter_ms: float = Field(default=5.0, ge=0)
    conflict_retry_after_s: float = Field(default=1.0, gt=0)

    outbox_lease_s: float = Field(default=15.0, gt=0)
    stuck_after_s: float = Field(default=330.0, gt=0)
    drain_interval_s: float = Field(default=0.25, gt=0)
    wake_recheck_s: float = Field(
        default=1.0, gt=0, description="freed GPUs: check requests left parked for lack of slots again after"
    )
    request_ttl_s: int = Field(default=7 * 24 * 3600, ge=60)
    parked_ttl_s: int = Field(default=7 * 24 * 3600, ge=0, description="0: parked requests wait forever")
    results_maxlen: int = Field(default=1_000_000, ge=1000)
    changes_maxlen: int = Field(default=200_000, ge=1000)

    audit_checkpoint_every: int = Field(default=100_000, ge=0, description="events; 0: none")
    audit_checkpoints_kept: int = Field(default=2, ge=0, description="0: never trim the audit log")
    audit_archive_dir: str | None = Field(default=None, description="where the trimmed audit log is written")
    maintenance_interval_s: float = Field(default=30.0, gt=0)

    unreachable_grace_s: float = Field(default=60.0, ge=0)
    ready_stable_s: float = Field(default=30.0, ge=0)
    max_unreachable_fraction: float = Field(default=0.5, gt=0, le=1)
    max_removed_fraction: float = Field(
        default=0.5, ge=0, le=1,
        description="a snapshot removing more of the workers than this is refused unless confirmed",
    )

    redis_socket_timeout_s: float = Field(default=30.0, gt=0)
    redis_socket_connect_timeout_s: float = Field(default=5.0, gt=0)
    redis_health_check_interval_s: int = Field(default=25, ge=0)

    generation_file: str | None = Field(
        default=None,
        description="file where a worker also keeps the data generation id (survives its restart)",
    )
    max_request_bytes: int = Field(default=1 * MIB, ge=4096, description="stored request JSON")
    max_event_bytes: int = Field(default=1 * MIB, ge=4096, description="a cluster event, not a snapshot")
    max_snapshot_bytes: int = Field(default=64 * MIB, ge=4096, description="a snapshot's JSON")
    model_roots: tuple[str, ...] = Field(
        default=(), description="absolute folders under which model.local_path may be read"
    )

    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: str = "INFO"
    chain_file: str = "chain.json"
    worker_concurrency: int = Field(default=1, ge=1)

    metrics_port: int = Field(default=9464, ge=0, le=65535,
                              description="each worker node's /metrics and /healthz; 0 = off")
    metrics_host: str = Field(default="0.0.0.0", description="address the metrics port binds")
    metrics_redis_timeout_s: float = Field(
        default=2.0, gt=0, le=30,
        description="longest a /metrics or /healthz request waits for Redis (then: redis_up 0, 503)",
    )
    metrics_max_connections: int = Field(
        default=8, ge=1, le=256, description="requests /metrics and /healthz serve at once (more: 503)"
    )
    console_basic_auth: SecretStr | None = Field(
        default=None, description="user:password the web console requires (HTTP basic auth); never shown"
    )
    health_stale_after_s: float = Field(
        default=30.0, gt=0, description="a heartbeat or drainer pass older than this is unhealthy"
    )

    gpustack_api_key: SecretStr | None = Field(
        default=None, description="GPUStack API key of `gpusched gpustack` (a Bearer token); never logged"
    )
    gpustack_ca_file: str | None = Field(
        default=None, description="CA bundle that verifies GPUStack's TLS certificate (default: the system's)"
    )
    gpustack_metrics_port: int = Field(default=9466, ge=0, le=65535,
                                       description="the bridge's /metrics; 0 = off")
    gpustack_external_scheduler: bool = Field(
        default=False,
        description="read by the gpusched plugin inside GPUStack's server: its scheduler does not start",
    )

    @model_validator(mode="after")
    def _timing_rules(self) -> Settings:
        if self.task_time_limit_s >= self.visibility_timeout_s:
            raise RuleBroken("task_time_limit_s", "must stay below visibility_timeout_s")
        if self.task_soft_time_limit_s >= self.task_time_limit_s:
            raise RuleBroken("task_soft_time_limit_s", "must stay below task_time_limit_s")
        if self.max_countdown_s > self.visibility_timeout_s / 2:
            raise RuleBroken("max_countdown_s", "must be at most visibility_timeout_s / 2")
        if self.stuck_after_s <= self.visibility_timeout_s:
            raise RuleBroken("stuck_after_s",
                             "must exceed visibility_timeout_s (the broker redelivers first)")
        if self.replica_ack_timeout_s >= self.redis_socket_timeout_s:
            raise RuleBroken("replica_ack_timeout_s", "must stay below redis_socket_timeout_s")
        return self

    @model_validator(mode="after")
    def _sentinel_rules(self) -> Settings:
        if self.redis_sentinels is not None and self.redis_sentinel_master is None:
            raise RuleBroken("redis_sentinel_master", "must name the master when redis_sentinels is set")
        if self.redis_sentinel_master is not None and self.redis_sentinels is None:
            raise RuleBroken("redis_sentinels",
                             "must list the Sentinels (host:port,host:port,...) when "
                             "redis_sentinel_master is set")
        if self.redis_sentinels is not None and urlsplit(self.redis_url).scheme == "unix":
            raise RuleBroken("redis_url", "must be a redis:// or rediss:// URL with redis_sentinels "
                             "(a unix socket does not fail over)")
        return self

    @field_validator("cluster")
    @classmethod
    def _cluster_id(cls, cluster: str | None) -> str | None:
        """Cluster ids become Redis hash tags and queue names."""
        if cluster is not None and not CLUSTER_ID_PATTERN.match(cluster):
            raise ValueError(f"cluster id {cluster!r} must match {CLUSTER_ID_PATTERN.pattern}")
        return cluster

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str) -> str:
        """A URL redis-py and kombu both take (the message never repeats it: it may hold a password)."""
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  (parsing the port is the check)
        except ValueError:
            raise ValueError("is not a valid URL (redis://[:password@]host[:port][/db])") from None
        if parts.scheme not in REDIS_SCHEMES:
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return url

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinel_list(cls, value: str | None) -> str | None:
        """``host:port,host:port,...``, normalised (spaces dropped); at least one, none twice."""
        if value is None:
            return None
        addresses = [part.strip() for part in value.split(",")]
        if addresses == [""]:
            raise ValueError("must list at least one Sentinel as host:port")
        for address in addresses:
            parse_sentinel_address(address)
        repeated = sorted({a for a in addresses if addresses.count(a) > 1})
        if repeated:
            raise ValueError(f"names {repeated[0]!r} twice")
        return ",".join(addresses)

    @field_validator("redis_sentinel_master")
    @classmethod
    def _master_name(cls, name: str | None) -> str | None:
        if name is not None and not SENTINEL_MASTER_PATTERN.match(name):
            raise ValueError(f"{name!r} must match {SENTINEL_MASTER_PATTERN.pattern}")
        return name

    @field_validator("model_roots")
    @classmethod
    def _absolute_roots(cls, roots: tuple[str, ...]) -> tuple[str, ...]:
        """Roots are absolute folders (normalised); ``/`` would allow every path."""
        normalised = tuple(os.path.normpath(root) for root in roots)
        for root in normalised:
            if not os.path.isabs(root) or root == "/":
                raise ValueError(f"{root!r} must be an absolute folder other than /")
        return normalised

    @property
    def max_message_bytes(self) -> int:
        """Largest broker message a worker takes: the largest document limit, base64-encoded
        (4/3), plus :data:`MESSAGE_OVERHEAD_BYTES` for Celery's headers."""
        largest = max(self.max_request_bytes, self.max_event_bytes, self.max_snapshot_bytes)
        return -(-largest * 4 // 3) + MESSAGE_OVERHEAD_BYTES

    @property
    def sentinel_addresses(self) -> tuple[tuple[str, int], ...]:
        """The Sentinels as ``(host, port)`` pairs (empty: no Sentinel, ``redis_url``'s host)."""
        if self.redis_sentinels is None:
            return ()
        return tuple(parse_sentinel_address(part) for part in self.redis_sentinels.split(","))

    @property
    def replicas_required(self) -> int:
        """Replicas a write must reach before it is acknowledged (:mod:`tasks.state.replication`):
        ``min_replicas_acked``, else 1 through Sentinel (a failover must not lose what was
        acknowledged) and 0 on a plain Redis (there is no replica to wait for)."""
        if self.min_replicas_acked is not None:
            return self.min_replicas_acked
        return 1 if self.redis_sentinels else 0

    @property
    def chain_path(self) -> Path:
        """Absolute path of the chain configuration."""
        path = Path(self.chain_file)
        return path if path.is_absolute() else config_dir() / path

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the environment, then ``service.json`` (unknown names refused)."""
        names = frozenset(settings_cls.model_fields)
        refuse_unknown_environment(os.environ, names)
        sources: list[PydanticBaseSettingsSource] = [init_settings, EnvSettingsSource(settings_cls)]
        json_file = config_dir() / "service.json"
        if json_file.is_file():
            sources.append(InitSettingsSource(settings_cls, init_kwargs=read_service_json(json_file, names)))
        return tuple(sources)


def parse_sentinel_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as ``(host, port)``.

    Raises:
        ValueError: not host:port, or a port outside 1..65535 (the message quotes the address).
    """
    found = SENTINEL_ADDRESS.match(address)
    if found is None:
        raise ValueError(f"{address!r} is not host:port")
    port = int(found["port"])
    if not 1 <= port <= 65535:
        raise ValueError(f"{address!r}: port {port} is outside 1..65535")
    return found["ipv6"] or found["host"], port


def _closest(name: str, names: frozenset[str]) -> str:
    match = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def refuse_unknown_environment(environ: Mapping[str, str], names: frozenset[str]) -> None:
    """Refuse a ``GPUSCHED_*`` environment variable that names no setting (a typo).

    Raises:
        SettingsError: naming the first unknown variable (in sorted order) and the closest setting.
    """
    known = {f"{ENV_PREFIX}{name}".upper() for name in names} | NON_SETTING_ENV
    unknown = sorted(
        key for key in environ if key.upper().startswith(ENV_PREFIX) and key.upper() not in known
    )
    if unknown:
        guess = _closest(unknown[0].upper(), frozenset(f"{ENV_PREFIX}{n}".upper() for n in names))
        raise SettingsError(f"unknown setting in the environment: {unknown[0]}{guess}")


def read_service_json(path: Path, names: frozenset[str]) -> dict[str, Any]:
    """The settings of ``service.json``: a JSON object whose keys are all settings.

    Raises:
        SettingsError: unreadable, not JSON, not an object, or an unknown key (named).
    """
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise SettingsError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    except json.JSONDecodeError as error:
        raise SettingsError(f"{path}: invalid JSON at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise SettingsError(f"{path}: nested too deeply") from None
    if not isinstance(document, dict):
        raise SettingsError(f"{path}: expected a JSON object of settings")
    unknown = sorted(str(key) for key in document if key not in names)
    if unknown:
        raise SettingsError(f"unknown setting in {path}: {unknown[0]!r}{_closest(unknown[0], names)}")
    return document


def describe_invalid(error: ValidationError) -> str:
    """One line for invalid settings: ``invalid setting <name>: <why>`` for the first error.

    A broken rule between settings (:class:`RuleBroken`) names the first setting it involves.
    """
    first = error.errors(include_url=False)[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, RuleBroken):
        return f"invalid setting {cause.setting}: {cause.message}"
    where = ".".join(str(part) for part in first["loc"]) or "settings"
    return f"invalid setting {where}: {str(first['msg']).removeprefix('Value error, ')}"


#: How pydantic-settings names the field whose environment value is not JSON.
_SOURCE_FIELD = re.compile(r'field "([^"]+)"')


def describe_source_error(error: SourceError) -> str:
    """One line for a complex setting (a list: ``model_roots``) whose environment value is not JSON.

    pydantic-settings reads such a field from the environment as JSON only, and
    names it in its own message (``error parsing value for field "model_roots"
    from source "EnvSettingsSource"``).
    """
    found = _SOURCE_FIELD.search(str(error))
    if found is None or found.group(1) not in Settings.model_fields:
        return f"invalid setting: {str(error).splitlines()[0]}"
    name = found.group(1)
    variable = f"{ENV_PREFIX}{name.upper()}"
    if get_origin(Settings.model_fields[name].annotation) in (tuple, list):
        return f"invalid setting {name}: {variable} must be a JSON list, e.g. {variable}='[\"/models\"]'"
    return f"invalid setting {name}: {variable} must be JSON"


def load_settings() -> Settings:
    """Read the settings from the environment and ``service.json``.

    Raises:
        SettingsError: one line naming the unknown or invalid setting.
    """
    try:
        return Settings()
    except ValidationError as error:
        raise SettingsError(describe_invalid(error)) from None
    except SourceError as error:  # a complex value (model_roots) that is not JSON
        raise SettingsError(describe_source_error(error)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read once; call :func:`reset_settings` after changing env).

    Raises:
        SettingsError: one line naming the unknown or invalid setting.
    """
    return load_settings()


def reset_settings() -> None:
    """Forget the cached settings (tests and the demo change ``GPUSCHED_*`` at run time)."""
    get_settings.cache_clear()
