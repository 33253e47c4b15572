"""The data generation: a wiped, replaced or rolled-back Redis is told from the one the service wrote."""

from __future__ import annotations

import json
from pathlib import Path

from service_builders import uniform_cluster

from tasks.state.context import build_runtime
from tasks.state.generation import DataGeneration, DataLost, GenerationMemory, process_memory
from tasks.testing import Harness


def _other_process(h: Harness, memory: GenerationMemory | None = None) -> DataGeneration:
    """The same Redis seen by another process (its own memory)."""
    runtime = build_runtime(h.settings, lambda *_: None, lambda _: None, client=h.rt.client,
                            chain=h.rt.chain, memory=memory)
    return runtime.generation


def test_the_first_check_writes_the_generation_once_and_everyone_adopts_it(h: Harness) -> None:
    first = json.loads(h.rt.client.get(h.rt.keys.generation) or "{}")
    assert h.rt.generation.remembered == first["id"]
    other = _other_process(h)
    status = other.check()
    assert (status.verdict, status.generation) == ("ok", first["id"])
    assert other.remembered == first["id"]
    assert json.loads(h.rt.client.get(h.rt.keys.generation) or "{}") == first  # written once


def test_a_wiped_redis_is_a_loss_marked_once_then_halted_for_everyone(h: Harness) -> None:
    h.rt.client.flushall()
    status = h.rt.generation.check()
    assert status.verdict == "wiped" and not status.ok
    marker = json.loads(h.rt.client.get(h.rt.keys.data_lost) or "{}")
    assert marker["verdict"] == "wiped" and marker["remembered_generation"] == h.rt.generation.remembered
    (lost,) = h.events(["sched.data.lost"])
    assert lost.data == marker
    newcomer = _other_process(h)  # a process that knows nothing still sees the marker
    assert newcomer.check().verdict == "halted"
    assert h.rt.generation.check().verdict == "halted"
    assert len(h.events(["sched.data.lost"])) == 1
    assert h.rt.client.get(h.rt.keys.generation) is None  # nobody re-created it


def test_a_generation_written_again_without_a_recovery_is_a_replacement(h: Harness) -> None:
    h.rt.client.flushall()
    fresh = _other_process(h)
    assert fresh.check().verdict == "ok"  # it knew nothing: it writes a new generation
    replaced = h.rt.generation.check()
    assert replaced.verdict == "replaced" and "without a recovery" in replaced.detail


def test_a_cluster_version_that_goes_backwards_is_a_rollback(h: Harness) -> None:
    h.apply(uniform_cluster())
    h.apply(uniform_cluster(3))
    assert h.rt.generation.check().version == 2
    h.rt.client.set(h.rt.keys.version, 1)  # an older AOF: one change lost
    status = h.rt.generation.check()
    assert status.verdict == "rolled_back"
    assert status.detail.startswith("Redis went back in time: cluster version 1 after 2 was read")


def test_a_recovery_is_adopted_by_who_knew_a_superseded_generation_or_saw_the_loss(h: Harness) -> None:
    old = h.rt.generation.remembered
    bystander = _other_process(h)
    bystander.check()
    h.rt.client.flushall()
    assert h.rt.generation.check().verdict == "wiped"
    witness = _other_process(h)
    assert witness.check().verdict == "halted"  # knew nothing, but saw the loss
    record = {"id": "g2", "recovery": True, "supersedes": [old]}
    h.rt.client.set(h.rt.keys.generation, json.dumps(record))
    h.rt.client.delete(h.rt.keys.data_lost)
    for generation in (h.rt.generation, bystander, witness):
        assert generation.check().verdict == "recovered"
        assert generation.remembered == "g2" and generation.check().verdict == "ok"
    stranger = _other_process(h, GenerationMemory())
    stranger.memory.remember("g-unrelated")
    assert stranger.check().verdict == "replaced"  # a recovery that does not supersede what it knew


def test_ensure_ok_raises_with_the_recovery_pointer(h: Harness) -> None:
    h.rt.client.flushall()
    try:
        h.rt.generation.ensure_ok()
    except DataLost as error:
        assert error.status.verdict == "wiped"
        assert "see docs/service.md, Recovery" in str(error)
    else:
        raise AssertionError("a wiped Redis must raise")


def test_a_probe_does_not_write_the_first_generation(h: Harness) -> None:
    h.rt.client.delete(h.rt.keys.generation)
    probe = _other_process(h)
    assert probe.check(create=False).verdict == "new"
    assert h.rt.client.get(h.rt.keys.generation) is None


def test_the_file_remembers_across_restarts_and_processes_share_their_memory(
    h: Harness, tmp_path: Path,
) -> None:
    path = tmp_path / "generation.json"
    worker = _other_process(h, GenerationMemory(path))
    assert worker.check().verdict == "ok"
    restarted = _other_process(h, GenerationMemory(path))  # a new process, same file
    assert restarted.remembered == h.rt.generation.remembered
    h.rt.client.flushall()
    assert restarted.check().verdict == "wiped"
    shared = process_memory("redis://x", "gpusched:{t}", None)
    assert process_memory("redis://x", "gpusched:{t}", None) is shared
    assert process_memory("redis://x", "gpusched:{u}", None) is not shared


def test_a_thread_that_did_not_adopt_the_recovery_does_not_take_its_lower_versions_for_a_rollback(
    h: Harness,
) -> None:
    """Threads of one worker process share the generation id (one memory) but each keeps the
    highest version it read: after a recovery adopted by one thread, another thread sees the
    recovered generation as known and must not compare the new, lower versions with the
    highest it read under the lost one (it did, and halted the service ~30 s after a recovery)."""
    h.apply(uniform_cluster())
    h.apply(uniform_cluster(3))
    shared = GenerationMemory()
    decider, retention = _other_process(h, shared), _other_process(h, shared)
    assert decider.check().version == retention.check().version == 2
    old = shared.generation
    h.rt.client.flushall()
    assert decider.check().verdict == "wiped"
    record = {"id": "g2", "recovery": True, "supersedes": [old]}
    h.rt.client.set(h.rt.keys.generation, json.dumps(record))
    h.rt.client.set(h.rt.keys.version, 1)  # the recovery's own apply: version 1 < 2
    h.rt.client.delete(h.rt.keys.data_lost)
    assert decider.check().verdict == "recovered"
    status = retention.check()  # the memory already knows g2: plainly ok
    assert (status.verdict, status.version) == ("ok", 1)
    h.rt.client.set(h.rt.keys.version, 0)  # and a rollback under g2 is still seen, by both
    assert retention.check().verdict == "rolled_back"
