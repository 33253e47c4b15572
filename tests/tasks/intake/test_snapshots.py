"""Snapshots: bounded, rows validated, names and GPU types in their key alphabets, duplicates named."""

from __future__ import annotations

import json

import pytest
from builders import RTX_4090, instance, uniform_worker
from service_builders import cluster_of, worker_row

from tasks.intake.snapshots import InvalidField, check_snapshot_size, parse_snapshot, stored_snapshot
from tasks.testing import Harness


def _field(document: dict[str, object]) -> str:
    with pytest.raises(InvalidField) as raised:
        parse_snapshot(document)
    return raised.value.field


def test_a_gpu_type_that_could_cross_a_ledger_entry_is_refused() -> None:
    row = uniform_worker(1, "w1", 2, RTX_4090)
    row["status"]["gpu_devices"][1]["type"] = "x;2:cuda"
    assert _field(cluster_of(worker_row(2, "w2"), row)) == "workers.1.status.gpu_devices.1.type"


def test_worker_names_and_instance_rows_are_checked() -> None:
    assert _field(cluster_of(worker_row(1, "no:colons"))) == "workers.0.name"
    assert _field(cluster_of(worker_row(1, "bad\ud800"))) == "workers.0.name"
    rows = instance(1, 1, {0: 1 << 30}, gpu_type="a=1")
    document = {**cluster_of(worker_row(1, "w1")), "model_instances": [rows]}
    assert _field(document) == "model_instances.0.gpu_type"


def test_nothing_is_written_for_a_refused_snapshot() -> None:
    h = Harness()
    row = worker_row(1, "w1")
    row["status"]["gpu_devices"][0]["type"] = "cuda;1:cuda"
    summary = h.event({"kind": "snapshot", **cluster_of(row)})
    assert (summary["status"], summary["field"]) == ("rejected", "workers.0.status.gpu_devices.0.type")
    assert h.rt.cluster.version() == 0 and h.rt.cluster.ledger() == ({}, {})


def test_snapshot_size_names_the_limit() -> None:
    document = cluster_of(*(worker_row(w, f"w{w}") for w in range(1, 20)))
    check_snapshot_size(document, 1 << 20)
    with pytest.raises(InvalidField) as raised:
        check_snapshot_size(document, 4096)
    assert raised.value.field == "snapshot"
    assert "max_snapshot_bytes limit of 4096 bytes" in raised.value.message


def test_a_stored_snapshot_loads_the_rows_the_applied_one_parsed() -> None:
    """A worker's mirror loads the stored document without the checks it passed when applied
    (the bounds walk was 70 % of the load at 2,000 workers): the same rows, keyed alike."""
    rows = [instance(n, 1 + n % 2, {n % 2: 1 << 30}) for n in range(3)]
    document = {**cluster_of(worker_row(1, "w1", 2), worker_row(2, "w2", 2)), "model_instances": rows}
    h = Harness()
    applied = h.apply(document)
    loaded = h.rt.cluster.snapshot_rows(applied["digest"])
    parsed = parse_snapshot(document)
    assert [w.model_dump() for w in loaded.workers] == [w.model_dump() for w in parsed.workers]
    assert [(key, row.model_dump()) for key, row in loaded.instances] == \
        [(key, row.model_dump()) for key, row in parsed.instances]
    assert stored_snapshot(h.rt.client.get(h.rt.keys.snapshot(applied["digest"]))) == loaded


def test_an_instance_is_keyed_by_its_row_as_validated() -> None:
    """An id sent as 7.0 or "8" validates to 7 or 8: the instance is ``id:7`` when the snapshot
    is applied, when a mirror loads it back and when ``instance_deleted`` names id 7 (it was
    ``id:7.0`` when applied and ``id:7`` when loaded: a delete by id freed nothing, and the
    mirrors and the store kept the instance under different keys)."""
    rows = [
        {**instance(1, 1, {0: 1 << 30}), "id": 7.0},
        {**instance(2, 1, {1: 1 << 30}), "id": "8"},
        {**instance(3, 2, {0: 1 << 30}), "id": None, "name": "by-name"},
        {**instance(4, 2, {1: 1 << 30}), "id": None, "name": ""},
    ]
    document = {**cluster_of(worker_row(1, "w1", 2), worker_row(2, "w2", 2)), "model_instances": rows}
    keys = ["id:7", "id:8", "name:by-name", "pos:3"]
    assert [key for key, _ in parse_snapshot(document).instances] == keys
    h = Harness()
    applied = h.apply(document)
    assert sorted(h.rt.cluster.claims()) == sorted(keys)
    assert [key for key, _ in h.rt.cluster.snapshot_rows(applied["digest"]).instances] == keys
    h.event({"kind": "instance_deleted", "instance_id": 7})
    assert sorted(h.rt.cluster.claims()) == sorted(keys[1:])


def test_a_stored_snapshot_validated_from_its_text_is_the_parsed_one() -> None:
    """JSON text validated by pydantic's JSON parser gives the rows ``json.loads`` and
    validation give: ints, byte counts past 2**53, floats to the last digit, escapes."""
    rows = [
        {**instance(n, 1 + n % 3, {n % 2: (1 << 53) + 2 * n + 1}), "id": n,
         "name": f"r\u00e9-{n}\t\"q\"", "computed_resource_claim": {
             "vram": {str(n % 2): (1 << 53) + 2 * n + 1}, "vram_utilization": 0.1 + n / 7,
             "ram": 10**18 + n}}
        for n in range(40)
    ]
    workers = [worker_row(w, f"w{w}", 2) for w in range(1, 4)]
    workers[0]["status"]["gpu_devices"][0]["memory"] = {"total": (1 << 62) + 1, "used": 3,
                                                        "utilization_rate": 1e-308}
    document = {**cluster_of(*workers), "model_instances": rows}
    text = json.dumps(document)
    assert stored_snapshot(text) == parse_snapshot(json.loads(text))
