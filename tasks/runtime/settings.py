"""Service settings: ``configs/service.json`` defaults, ``GPUSCHED_*`` environment overrides.

Precedence (highest first): keyword arguments, ``GPUSCHED_<FIELD>`` environment
variables, the JSON file, the defaults below. The JSON file is
``$GPUSCHED_CONFIG_DIR/service.json`` when that variable is set, else the
repository's ``configs/service.json``.

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

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

#: Environment variable naming the folder that holds ``service.json`` and ``chain.json``.
CONFIG_DIR_ENV = "GPUSCHED_CONFIG_DIR"
#: Cluster ids become Redis hash tags and queue names: keep them to a safe alphabet.
CLUSTER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def config_dir() -> Path:
    """The configuration folder (``$GPUSCHED_CONFIG_DIR`` or the repository's ``configs/``)."""
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "configs"


class Settings(BaseSettings):
    """Everything a worker, the client and the CLI need to talk to one deployment."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", extra="ignore", frozen=True)

    redis_url: str = "redis://localhost:6379/0"
    redis_username: str | None = Field(
        default=None, description="Redis ACL user (when the URL names none): the process's role"
    )
    redis_password: SecretStr | None = Field(
        default=None, description="its password (when the URL holds none); never logged"
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
    decide_lock_wait_s: float = Field(default=5.0, ge=0)
    decide_lock_ttl_s: float = Field(default=10.0, gt=0)
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

    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: str = "INFO"
    chain_file: str = "chain.json"
    worker_concurrency: int = Field(default=1, ge=1)

    metrics_port: int = Field(default=9464, ge=0, le=65535,
                              description="each worker node's /metrics and /healthz; 0 = off")
    metrics_host: str = Field(default="0.0.0.0", description="address the metrics port binds")
    health_stale_after_s: float = Field(
        default=30.0, gt=0, description="a heartbeat or drainer pass older than this is unhealthy"
    )

    @model_validator(mode="after")
    def _timing_rules(self) -> Settings:
        if self.cluster is not None and not CLUSTER_ID_PATTERN.match(self.cluster):
            raise ValueError(f"cluster id {self.cluster!r} must match {CLUSTER_ID_PATTERN.pattern}")
        if self.task_time_limit_s >= self.visibility_timeout_s:
            raise ValueError("task_time_limit_s must stay below visibility_timeout_s")
        if self.task_soft_time_limit_s >= self.task_time_limit_s:
            raise ValueError("task_soft_time_limit_s must stay below task_time_limit_s")
        if self.max_countdown_s > self.visibility_timeout_s / 2:
            raise ValueError("max_countdown_s must be at most visibility_timeout_s / 2")
        if self.stuck_after_s <= self.visibility_timeout_s:
            raise ValueError("stuck_after_s must exceed visibility_timeout_s (the broker redelivers first)")
        return self

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
        """Keyword arguments, then the environment, then ``service.json``."""
        json_file = config_dir() / "service.json"
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if json_file.is_file():
            sources.append(JsonConfigSettingsSource(settings_cls, json_file=json_file))
        return tuple(sources)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read once; call :func:`reset_settings` after changing env)."""
    return Settings()


def reset_settings() -> None:
    """Forget the cached settings (tests and the demo change ``GPUSCHED_*`` at run time)."""
    get_settings.cache_clear()
