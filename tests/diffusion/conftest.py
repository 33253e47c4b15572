"""Shared builders for the diffusion auto-tuner tests.

``make_request`` returns a Contract 2 request dict; ``run`` tunes one.
Defaults: CUDA, 80 GiB total and free on devices 0-7, no env, Qwen-Image.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from scheduler_core.diffusion import TuneResult, tune

RequestBuilder = Callable[..., dict[str, Any]]


def build_request(
    pipeline_config_class: str = "QwenImagePipelineConfig",
    *,
    explicit: Mapping[str, Any] | None = None,
    kind: str = "cuda",
    total: float | None = 80.0,
    free: float | Mapping[int, float] | None = None,
    device_name: str | None = None,
    cache_dit: bool = False,
    ltx2_env: str | None = None,
    pipeline: Mapping[str, Any] | None = None,
    deployment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A request dict; ``free`` is one value for devices 0-7 or a per-device map."""
    if free is None:
        free = total if total is not None else 0.0
    by_device = (
        {str(d): float(v) for d, v in free.items()}
        if isinstance(free, Mapping)
        else {str(d): float(free) for d in range(8)}
    )
    return {
        "explicit_args": dict(explicit or {}),
        "platform": {
            "kind": kind,
            "device_total_memory_gib": total,
            "available_memory_gib_by_device": by_device,
            "device_name": device_name,
        },
        "env": {
            "SGLANG_CACHE_DIT_ENABLED": cache_dit,
            "SGLANG_LTX2_TWO_STAGE_DEVICE_MODE": ltx2_env,
        },
        "pipeline": {"pipeline_config_class": pipeline_config_class, **(pipeline or {})},
        "deployment_config": None if deployment is None else dict(deployment),
    }


@pytest.fixture
def make_request() -> RequestBuilder:
    """The request-dict builder."""
    return build_request


@pytest.fixture
def run() -> Callable[..., TuneResult]:
    """Build a request with ``build_request``'s arguments and tune it."""

    def _run(*args: Any, **kwargs: Any) -> TuneResult:
        return tune(build_request(*args, **kwargs))

    return _run
