"""Validating a request at the edge: its id, its canonical form, its rejection."""

from __future__ import annotations

import json

from builders import RTX_4090, model, uniform_worker

from scheduler_core import schedule
from tasks.intake.requests import normalize


def test_non_object_requests_are_rejected_with_a_digest_id() -> None:
    normalized = normalize(["not", "a", "request"])
    assert normalized.rejection is not None and normalized.request_id.startswith("req-")
    assert normalized.rejection.status == "rejected"


def test_ids_are_generated_from_content_and_inline_cluster_rows_are_ignored() -> None:
    raw = {"model": model(), "workers": [uniform_worker(1, "w", 1, RTX_4090)]}
    first, second = normalize(raw), normalize(dict(raw))
    assert first.request_id == second.request_id
    assert "workers" not in json.loads(first.request_json)


def _valid() -> dict[str, object]:
    return {"request_id": "r-1", "model": model()}


def test_the_service_bounds_what_it_stores_and_names_the_field() -> None:
    from tasks.intake.limits import IntakeLimits

    big = {**_valid(), "notes": "x" * 5000}
    refused = normalize(big, IntakeLimits(max_request_bytes=4096))
    assert refused.rejection is not None and refused.rejection.error is not None
    assert refused.rejection.error.field == "request"
    assert "above the max_request_bytes limit of 4096 bytes" in refused.rejection.error.message
    assert len(refused.request_json) < 200  # a stub is stored, not the request
    assert normalize(big).rejection is None  # the default limit is 1 MiB


def test_deep_nesting_is_refused_on_the_field_the_core_would_name() -> None:
    deep: object = 0
    for _ in range(2000):  # deeper than any JSON encoder could recurse
        deep = [deep]
    in_config = _valid()
    in_config["model"]["hf_config"] = {"x": deep}  # type: ignore[index]
    for raw, field in ((in_config, "model.hf_config"), ({**_valid(), "extra": deep}, "extra")):
        normalized = normalize(raw)
        assert normalized.rejection is not None and normalized.rejection.error is not None
        assert (normalized.rejection.error.field, normalized.rejection.error.message) == (
            field, "nests more than 64 levels deep")
        assert normalized.request_id == "r-1"
    bare = normalize(deep)
    assert bare.rejection is not None and bare.rejection.error is not None
    assert bare.request_id == schedule(deep).request_id and bare.request_id.startswith("req-")
    assert bare.rejection.error.field == "request"


def _deep(depth: int = 100) -> dict[str, object]:
    value: dict[str, object] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


def test_deep_requests_without_id_each_get_their_digest_id_and_field() -> None:
    """They all used to share ``req-unhashable``: the second was a ``conflict`` with the
    first's stub and its own field was never reported."""
    in_config = {"model": {**model(), "hf_config": {**model()["hf_config"], "x": _deep()}}}
    in_env = {"model": {**model(), "env": {"A": _deep()}}}
    in_extra = {"model": model(), "extra": _deep(2000)}
    seen: dict[str, str] = {}
    for raw, field in ((in_config, "model.hf_config"), (in_env, "model.env"), (in_extra, "extra")):
        normalized = normalize(raw)
        assert normalized.rejection is not None and normalized.rejection.error is not None
        assert (normalized.rejection.error.field, normalized.rejection.error.message) == (
            field, "nests more than 64 levels deep")
        assert normalized.request_id == schedule(raw).request_id  # the core's id for it
        assert normalize(raw).request_json == normalized.request_json  # the same stub again
        seen[normalized.request_id] = field
    assert len(seen) == 3 and all(len(request_id) == 28 for request_id in seen)


def test_lone_surrogates_anywhere_are_rejected_with_their_path() -> None:
    raw = _valid()
    raw["model"]["env"] = {"A": "\ud800"}  # type: ignore[index]
    normalized = normalize(raw)
    assert normalized.rejection is not None and normalized.rejection.error is not None
    assert normalized.rejection.error.field == "model.env.A"
    normalized.rejection.model_dump_json().encode("utf-8")  # the result is writable
    normalized.request_json.encode("utf-8")


def test_request_ids_outside_the_key_alphabet_are_rejected() -> None:
    normalized = normalize({**_valid(), "request_id": "a;b"})
    assert normalized.request_id == "a;b" and normalized.rejection is not None
    assert normalized.rejection.error is not None and normalized.rejection.error.field == "request_id"


def test_a_request_id_the_core_does_not_take_is_rejected_as_the_core_rejects_it() -> None:
    """The core derives ``req-…`` for such an id and rejects the request naming ``request_id``
    (``gpusched schedule``); the service did the same derivation but dropped the given id and
    accepted the request, so a control plane waiting on its own id never saw a result."""
    from scheduler_core import schedule

    for given, message in [
        ("x" * 201, "String should have at most 200 characters"),
        (42, "Input should be a valid string"),
        ("", "String should have at least 1 character"),
    ]:
        raw = {**_valid(), "request_id": given}
        normalized = normalize(raw)
        core = schedule(raw)
        assert normalized.request_id == core.request_id and normalized.request_id.startswith("req-")
        error = normalized.rejection.error if normalized.rejection is not None else None
        assert error is not None and (error.field, error.message) == ("request_id", message)
        assert normalized.rejection is not None
        assert normalized.rejection.model_dump() == core.model_dump()
    assert normalize({**_valid(), "request_id": "x" * 200}).rejection is None  # the longest id taken
    assert normalize({**_valid(), "request_id": None}).rejection is None  # none given: derived


def test_local_paths_are_read_only_under_model_roots_and_say_nothing_about_the_disk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tasks.intake.limits import IntakeLimits

    root = tmp_path / "models"
    (root / "qwen").mkdir(parents=True)
    (tmp_path / "secret").write_text("x")
    limits = IntakeLimits(model_roots=(str(root),))

    def error(path: str, lim: IntakeLimits = limits) -> tuple[str | None, str] | None:
        raw = _valid()
        raw["model"]["local_path"] = path  # type: ignore[index]
        result = normalize(raw, lim).rejection
        return None if result is None or result.error is None else (result.error.field, result.error.message)

    assert error(str(root / "qwen")) is None
    assert error(str(root / "missing")) is None  # under a root: the core reads (and reports) it
    outside = [str(tmp_path / "secret"), str(tmp_path / "nothing"), "/etc", "relative/path",
               f"{root}/../secret", f"{root}x/qwen"]
    messages = {error(path) for path in outside}
    assert messages == {("model.local_path", "is not inside a model root of this service (model_roots)")}
    assert error(str(root / "qwen"), IntakeLimits()) == (
        "model.local_path", "this service reads no local model folders (model_roots is empty)")
    lora = _valid()
    lora["model"]["lora_list"] = [{"local_path": "/etc"}]  # type: ignore[index]
    rejected = normalize(lora, limits).rejection
    assert rejected is not None and rejected.error is not None
    assert rejected.error.field == "model.lora_list.0.local_path"
