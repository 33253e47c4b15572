"""Identifiers that become keys or Lua-parsed lists: refused outside their alphabets, naming the field."""

from __future__ import annotations

import pytest

from tasks.intake.limits import InvalidField
from tasks.intake.names import (
    GPU_TYPE,
    REQUEST_ID,
    WORKER_NAME,
    check_instance_row,
    check_name,
    check_worker_row,
)


@pytest.mark.parametrize("value", ["cuda", "rocm", "cann", "musa", "npu.v2", "a_b-c", "x" * 64])
def test_gpustack_gpu_types_pass(value: str) -> None:
    check_name(value, GPU_TYPE, "type")


@pytest.mark.parametrize("value", ["x;2:cuda", "a=b", "a:b", "", "x" * 65, "cu da", "cuda\n", "ç"])
def test_gpu_types_with_separators_are_refused(value: str) -> None:
    with pytest.raises(InvalidField) as raised:
        check_name(value, GPU_TYPE, "workers.0.status.gpu_devices.1.type")
    assert raised.value.field == "workers.0.status.gpu_devices.1.type"
    assert value not in raised.value.message or not value  # the value is never echoed


def test_worker_names_take_host_names() -> None:
    for name in ("h100-a", "node-0001", "gpu01.example.com", "GPU_Box_7", "a" * 253):
        check_name(name, WORKER_NAME, "name")
    for name in ("a:b", "a b", "a;b", "", "a" * 254, "\ud800"):
        with pytest.raises(InvalidField):
            check_name(name, WORKER_NAME, "name")


def test_request_ids_take_uuids_names_digests_and_reschedules() -> None:
    for rid in ("3f2c9a1e-5b7d-4c1a-9f00-0123456789ab", "demo-qwen7b", "req-5b559f5135e022ef44cbea95",
                "team/a:b@c+d", "demo-qwen7b~1"):
        check_name(rid, REQUEST_ID, "request_id")
    for rid in ("a;b", "a=b", "a|b", "a b", "x" * 201, "a#1", "{x}"):
        with pytest.raises(InvalidField):
            check_name(rid, REQUEST_ID, "request_id")


def test_rows_name_the_offending_string() -> None:
    with pytest.raises(InvalidField) as worker:
        check_worker_row("w1", ["cuda", "x;y"], "workers.3")
    assert worker.value.field == "workers.3.status.gpu_devices.1.type"
    check_worker_row("w1", [None, None], "worker")  # a GPU may have no type
    with pytest.raises(InvalidField) as instance:
        check_instance_row("w1", "cuda", [{"worker_name": "w2", "gpu_type": "a=1"}], "model_instances.0")
    assert instance.value.field == "model_instances.0.distributed_servers.subordinate_workers.0.gpu_type"
