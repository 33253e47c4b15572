"""Acknowledged writes on fakeredis: the mark, the stored position, what readers and the generation see.

``WAIT`` itself needs a real replica (``tests/service/test_service_replication.py``);
here the mark and the position are written the way
:meth:`tasks.state.replication.Replication.acknowledge` writes them once ``WAIT``
confirmed the mark.
"""

from __future__ import annotations

import json

from service_builders import uniform_cluster

from tasks.state.streams import ensure_group, read_group
from tasks.testing import Harness, isolated_settings


def _replicated() -> Harness:
    return Harness(settings=isolated_settings(min_replicas_acked=1))


def test_a_mark_records_each_streams_last_entry_the_version_and_the_generation() -> None:
    h = _replicated()
    h.apply(uniform_cluster())
    position = h.acknowledge()
    k = h.rt.keys
    (last_event, _), = h.rt.client.xrevrange(k.events, count=1)
    assert position.streams == {k.results: "0-0", k.events: last_event, k.deadletter: "0-0"}
    assert position.version == 1 and position.replicas == 1
    assert position.generation == json.loads(h.rt.client.get(k.generation) or "{}")["id"]
    assert position.covers(k.events, last_event) and not position.covers(k.results, "1-0")
    assert h.rt.partition.call(h.rt.replication.mark_call(only_if_new=True)) is None  # nothing new
    h.apply(uniform_cluster(3))
    assert h.rt.partition.call(h.rt.replication.mark_call(only_if_new=True)) is not None


def test_an_earlier_marks_position_never_replaces_a_later_one() -> None:
    h = _replicated()
    earlier = h.rt.partition.call(h.rt.replication.mark_call())
    h.apply(uniform_cluster())
    later = h.rt.partition.call(h.rt.replication.mark_call())
    assert earlier is not None and later is not None
    assert h.rt.partition.call(h.rt.replication.advance_call(*later, 1))
    assert not h.rt.partition.call(h.rt.replication.advance_call(*earlier, 1))  # arrived late
    stored = h.rt.replication.position()
    assert stored is not None and stored.seq == later[0] and stored.version == 1


def test_a_consumer_group_is_handed_only_acknowledged_entries() -> None:
    h = _replicated()
    k = h.rt.keys
    ensure_group(h.rt.client, k.results, "cp")
    first = [h.rt.client.xadd(k.results, {"request_id": f"r{i}"}) for i in range(3)]
    assert read_group(h.rt.client, k.results, "cp", "cp-1", acknowledged=k.acked) == []  # none yet
    h.acknowledge()
    late = h.rt.client.xadd(k.results, {"request_id": "late"})  # on the master, not acknowledged
    handed = read_group(h.rt.client, k.results, "cp", "cp-1", count=2, acknowledged=k.acked)
    handed += read_group(h.rt.client, k.results, "cp", "cp-2", count=10, acknowledged=k.acked)
    assert [entry_id for entry_id, _ in handed] == first
    assert handed[2][1] == {"request_id": "r2"}
    h.acknowledge()
    assert read_group(h.rt.client, k.results, "cp", "cp-1", acknowledged=k.acked) == [
        (late, {"request_id": "late"})
    ]


def test_a_version_no_replica_acknowledged_may_vanish_without_a_rollback() -> None:
    """A failover to a replica that missed the last cluster change is not a data loss: nobody was
    told about that change. Read versions used to count (a false rollback halted everything)."""
    h = _replicated()
    h.apply(uniform_cluster())
    h.acknowledge()  # version 1 reached a replica
    assert h.rt.generation.check().ok
    h.apply(uniform_cluster(3))  # version 2: on the master only
    assert h.rt.generation.check().version == 2
    h.rt.client.set(h.rt.keys.version, 1)  # the promoted replica: without version 2
    assert h.rt.generation.check().verdict == "ok"
    h.rt.client.set(h.rt.keys.version, 0)  # below what a replica acknowledged: a loss
    status = h.rt.generation.check()
    assert status.verdict == "rolled_back" and "cluster version 0 after 1" in status.detail


def test_a_generation_is_remembered_once_a_replica_acknowledged_it() -> None:
    h = _replicated()
    written = json.loads(h.rt.client.get(h.rt.keys.generation) or "{}")["id"]
    assert h.rt.generation.remembered is None  # written on boot, not acknowledged yet
    h.rt.client.delete(h.rt.keys.generation)  # a failover took it away: not a wipe
    assert h.rt.generation.check().ok
    created = json.loads(h.rt.client.get(h.rt.keys.generation) or "{}")["id"]
    assert created != written
    h.acknowledge()
    assert h.rt.generation.check().ok and h.rt.generation.remembered == created
    h.rt.client.delete(h.rt.keys.generation)
    assert h.rt.generation.check().verdict == "wiped"  # an acknowledged generation is gone: a loss
