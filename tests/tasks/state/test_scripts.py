"""The Lua scripts: headers document every KEY and ARGV, bodies bind them first, callers match."""

from __future__ import annotations

import re
from typing import Any

import pytest
from builders import RTX_4090, model, uniform_worker
from service_builders import small_request, uniform_cluster

from tasks.audit.checkpoints import take_checkpoint
from tasks.audit.retention import expire_parked
from tasks.flows.notices import announce_suspension, resume_if_recovered
from tasks.flows.recovery import export_state, recover
from tasks.runtime.standby import DeciderGate, Presence
from tasks.state.scripts import (
    SCRIPT_DIR,
    SCRIPT_NAMES,
    Batch,
    ScriptCall,
    Scripts,
    loaded_source,
    script_source,
)
from tasks.state.streams import ensure_group, read_group
from tasks.testing import Harness


def test_no_script_trims_the_audit_stream() -> None:
    """Every trimming XADD in the loaded scripts targets a stream documented as trimmed."""
    trimmed = re.compile(r"redis\.call\('XADD',\s*([\w.\[\]]+),\s*'(?:MAXLEN|MINID)'")
    for name in SCRIPT_NAMES:
        keys = _documented_keys(script_source(name))
        bound = _bindings(script_source(name), "KEYS")
        for target in trimmed.findall(loaded_source(name)):
            index = re.fullmatch(r"KEYS\[(\d+)\]", target)
            position = int(index.group(1)) if index else bound.get(target)
            documented = keys[position] if position is not None else [target]
            assert documented and not any("events" in key for key in documented), (name, target)
            assert any(stream in key for key in documented for stream in ("results", "changes")), (
                name,
                target,
            )


def test_each_script_header_documents_every_key_and_argument() -> None:
    assert sorted(p.stem for p in SCRIPT_DIR.glob("*.lua")) == sorted((*SCRIPT_NAMES, "lib"))
    for name in SCRIPT_NAMES:
        source = script_source(name)
        header = "\n".join(line for line in source.splitlines() if line.startswith("--"))
        body = "\n".join(line for line in source.splitlines() if not line.startswith("--"))
        assert header.startswith(f"-- {name}.lua"), name
        for used in set(re.findall(r"KEYS\[(\d+)\]", body)):
            assert re.search(rf"KEYS\[{used}\]", header), f"{name}: KEYS[{used}] undocumented"
        for used in set(re.findall(r"ARGV\[(\d+)\]", body)):
            documented = re.search(rf"ARGV\[{used}\]", header) or _in_range(header, int(used))
            assert documented, f"{name}: ARGV[{used}] undocumented"
    library = (SCRIPT_DIR / "lib.lua").read_text()
    assert not re.search(
        r"KEYS\[", "\n".join(line for line in library.splitlines() if not line.startswith("--"))
    )


_BINDING = re.compile(
    r"local (\w+) = (?:tonumber\()?(KEYS|ARGV)\[(\d+)\]\)?(?: == '1')?"
    r"|local (\w+) = (\d+)  -- (KEYS|ARGV)\[(\d+)\.\.\].*"
)


def _body_lines(source: str) -> list[str]:
    return [line for line in source.splitlines() if not line.startswith("--")]


def _bindings(source: str, kind: str) -> dict[str, int]:
    """Local name → index, from the binding block at the top of a script body."""
    bound: dict[str, int] = {}
    for line in _body_lines(source):
        found = _BINDING.fullmatch(line)
        if found is None:
            if line.strip():
                break
            continue
        name, used, index = (found.group(1, 2, 3) if found.group(1) else found.group(4, 6, 7))
        assert found.group(1) or found.group(5) == index, f"{line!r}: the start index is not {index}"
        if used == kind:
            bound[name] = int(index)
    return bound


def test_each_script_binds_its_keys_and_arguments_to_named_locals_first() -> None:
    """``KEYS[n]``/``ARGV[n]`` appear only in the binding block; every documented one is bound.

    The event envelope ``ARGV[1..3]`` is bound once, in ``lib.lua``.
    """
    library = _body_lines((SCRIPT_DIR / "lib.lua").read_text())
    envelope = {1, 2, 3}
    assert set(_bindings("\n".join(library), "ARGV").values()) == envelope
    for name in SCRIPT_NAMES:
        source = script_source(name)
        lines = _body_lines(source)
        block = next(i for i, line in enumerate(lines) if line.strip() and not _BINDING.fullmatch(line))
        after = "\n".join(lines[block:])
        assert not re.search(r"(KEYS|ARGV)\[\d+\]", after), f"{name}: KEYS/ARGV read past the bindings"
        header = "\n".join(line for line in source.splitlines() if line.startswith("--"))
        for kind, skipped in (("KEYS", set()), ("ARGV", envelope)):
            documented = {int(i) for i in re.findall(rf"{kind}\[(\d+)\]", header)} - skipped
            open_start = min((int(i) for i in _open_starts(header, kind)), default=None)
            fixed = {i for i in documented if open_start is None or i <= open_start}
            assert fixed <= set(_bindings(source, kind).values()), f"{name}: an unbound {kind}"


def _in_range(header: str, index: int) -> bool:
    """``ARGV[6..]`` / ``ARGV[6], ARGV[7], ...`` document open-ended argument lists."""
    return any(index >= int(start) for start in _open_starts(header, "ARGV"))


def _open_starts(header: str, kind: str) -> list[str]:
    return re.findall(rf"{kind}\[(\d+)(?:\.\.\]|\](?:\.\.|,\s*{kind}))", header)


def _documented_keys(source: str) -> dict[int, list[str]]:
    """KEYS index → the key names its header line documents (``<...>`` = any text)."""
    documented: dict[int, list[str]] = {}
    for line in source.splitlines():
        found = re.match(r"-- KEYS\[(\d+)\]\s+(.*)", line)
        if found:
            documented[int(found.group(1))] = re.findall(r"gpusched[^\s,()]*", found.group(2))
    return documented


def _key_pattern(documented: str) -> str:
    return ".+".join(re.escape(part) for part in re.split(r"<[^>]+>", documented))


def _exercise_every_script(h: Harness) -> None:
    h.apply({"workers": [uniform_worker(1, "a", 1, RTX_4090), uniform_worker(2, "b", 1, RTX_4090)],
             "model_instances": []})
    h.submit({"request_id": "bad", "model": {"backend": "vLLM"}})
    claim = {"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * (1 << 30))}
    for rid in ("r1", "r2", "r3"):
        h.submit({"request_id": rid, "model": model(env=claim)})
    h.pump()
    h.event({"kind": "worker_state", "worker_id": 2, "state": "unreachable"})
    h.event({"kind": "instance_deleted", "instance_key": "req:r1"})
    h.event({"kind": "worker_removed", "worker_id": 2})
    h.rt.deliveries.dead_letter(
        request_id="r3",
        task_name="gpusched.decide",
        task_id="t",
        reason="task_error",
        detail="x",
        deliveries=3,
        args_json="[]",
        rejected_json="{}",
        seq=1,
    )
    h.submit({"request_id": "late", "model": model(env=claim)})
    h.submit({"request_id": "withdrawn", "model": model(env=claim)})
    h.event({"kind": "request_cancelled", "request_id": "withdrawn"})
    h.queue.clear()
    h.rt.delays.schedule_timer("grace:1", 0)
    h.clock.advance(h.settings.stuck_after_s + 61)
    h.drain()
    h.pump()
    announce_suspension(h.rt, h.rt.mirror.sync().worker_list(), suspended=True)
    assert resume_if_recovered(h.rt)  # the one worker left is ready
    for rid in ("w1", "w2"):  # more than one GPU holds: w2 waits parked
        h.submit({"request_id": rid, "model": model(env=claim)})
    h.pump()
    take_checkpoint(h.rt.partition)
    h.clock.advance(h.settings.parked_ttl_s + 1)
    assert expire_parked(h.rt)
    assert recover(h.rt, export_state(h.rt))["bookings"] >= 1  # restore_booking
    marked = h.rt.partition.call(h.rt.replication.mark_call())  # what acknowledge() sends with WAIT
    assert marked is not None
    presence = Presence(h.rt.partition.scripts, h.rt.keys, ttl_s=3.0, gate=DeciderGate())
    assert presence.refresh()  # decider_standby: take the presence, then hand it back
    presence.hand_back()
    assert h.rt.partition.call(h.rt.replication.advance_call(*marked, 1))
    ensure_group(h.rt.client, h.rt.keys.results, "control-plane")
    assert read_group(h.rt.client, h.rt.keys.results, "control-plane", "cp-1", acknowledged=h.rt.keys.acked)


def test_every_script_caller_passes_the_keys_and_arguments_its_header_documents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, list[str], list[Any]]] = []
    real, real_batched = Scripts.run, Batch.script

    def recording(self: Scripts, name: str, keys: list[str], args: list[Any]) -> Any:
        calls.append((name, list(keys), list(args)))
        return real(self, name, keys, args)

    def batched(self: Batch, call: ScriptCall[Any]) -> Any:
        calls.append((call.name, list(call.keys), list(call.args)))
        return real_batched(self, call)

    monkeypatch.setattr(Scripts, "run", recording)
    monkeypatch.setattr(Batch, "script", batched)
    _exercise_every_script(Harness())
    assert {name for name, _, _ in calls} == set(SCRIPT_NAMES)
    for name, keys, args in calls:
        source = script_source(name)
        header = "\n".join(line for line in source.splitlines() if line.startswith("--"))
        documented = _documented_keys(source)
        open_keys = [int(start) for start in _open_starts(header, "KEYS")]
        if open_keys:
            assert len(keys) >= min(open_keys) - 1, name
        else:
            assert len(keys) == max(documented), (name, len(keys), max(documented))
        for index, names in documented.items():
            if names:
                pattern = "|".join(_key_pattern(key) for key in names)
                assert re.fullmatch(pattern, keys[index - 1]), (name, index, keys[index - 1], names)
        argv = [int(i) for i in re.findall(r"ARGV\[(\d+)\]", header)]
        open_args = [int(start) for start in _open_starts(header, "ARGV")]
        if open_args:
            assert len(args) >= min(open_args) - 1, name
        else:
            assert len(args) == max(argv), (name, len(args), max(argv))


def test_batches_survive_a_flushed_script_cache() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("a"))
    h.pump()
    h.rt.client.script_flush()  # e.g. Redis restarted: every EVALSHA answers NOSCRIPT
    h.submit(small_request("b"))
    assert h.pump() == 1
    assert sorted(r["request_id"] for r in h.results()) == ["a", "b"]
