"""Raw broker messages: what kombu and Celery can take passes, anything else gets a reason."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest
from service.raw_messages import envelope, nested, nested_text

from tasks.intake.broker_messages import (
    BODY_DEPTH,
    EXCERPT_BYTES,
    DeepRequest,
    depth_exceeds,
    excerpt_of,
    inspect_message,
    request_text,
)

TASKS = frozenset({"gpusched.decide", "gpusched.resume"})


def _inspect(raw: bytes, max_bytes: int = 1 << 20):  # type: ignore[no-untyped-def]
    return inspect_message(raw, max_bytes=max_bytes, tasks=TASKS, intake_task="gpusched.decide",
                           max_time_limit=120)


def _request(rid: str, **model: object) -> dict[str, object]:
    return {"request_id": rid, "model": {"name": "m", "backend": "SGLang", **model}}


def test_a_message_celery_sends_passes() -> None:
    assert _inspect(envelope(args=[_request("r1")])) is None
    assert _inspect(envelope("gpusched.decide", ["r1", 0, 0])) is None
    assert _inspect(envelope(args=[_request("r1")], headers={"timelimit": [60, 120]})) is None


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"this is not json", "invalid_json"),
        (b"\xff\xfe", "not_utf8"),
        (b"[1, 2]", "malformed_envelope"),
        (b'{"__type__": "uuid", "__value__": {"x": 1}}', "invalid_json"),  # kombu's type marker raises
        (nested_text(17).encode(), "too_deep"),
        (envelope(content_type="text/plain"), "content_type"),
        (envelope(task="celery.chord_unlock"), "unknown_task"),
        (envelope(drop_headers=True), "unknown_message"),
        (envelope(headers={"id": 7}), "unknown_message"),
        (envelope(headers={"timelimit": [None, 121]}), "unknown_message"),  # above the worker's own
        (envelope(headers={"timelimit": [0, None]}), "unknown_message"),
        (envelope(body="not base64!"), "invalid_body"),
        (envelope(body_text="[1, 2, 3]"), "invalid_body"),
        (envelope(body_text='[[], {}, {"chain": [{"task": "x"}]}]'), "invalid_body"),
        (envelope(body_text='[[{"__type__": "nope", "__value__": 1}], {}, {}]'), "invalid_body"),
    ],
)
def test_what_kombu_or_celery_would_choke_on_gets_a_reason(raw: bytes, reason: str) -> None:
    verdict = _inspect(raw)
    assert verdict is not None and verdict.reason == reason
    assert verdict.size == len(raw) and "\n" not in verdict.detail


def test_size_is_checked_before_anything_is_parsed() -> None:
    verdict = _inspect(b"[" * 100, max_bytes=99)
    assert verdict is not None and verdict.reason == "too_large"
    assert verdict.detail.startswith("message is 100 bytes, above the limit of 99 bytes")


def test_depth_is_counted_on_the_text_ignoring_brackets_inside_strings() -> None:
    assert not depth_exceeds(json.dumps({"a": "[[[[[[" * 10, "b": [[1]]}), 3)
    assert depth_exceeds(json.dumps({"a": [[[1]]]}), 3)
    assert not depth_exceeds(json.dumps({"a": "\\\"[[[[["}), 1)  # an escaped quote does not end the string


def test_a_deep_intake_request_names_its_id_and_field() -> None:
    deep = _request("deep-1", hf_config={"rope": nested(BODY_DEPTH)})
    verdict = _inspect(envelope(args=[deep]))
    assert verdict is not None and verdict.reason == "too_deep"
    assert verdict.request == DeepRequest("deep-1", "model.hf_config")
    assert verdict.task == "gpusched.decide" and verdict.task_id
    anonymous = {"model": {"name": "m"}, "extra": nested(200)}
    unnamed = _inspect(envelope(args=[anonymous]))
    assert unnamed is not None and unnamed.request == DeepRequest(_text_id(anonymous), "extra")
    # a request id outside the alphabet is not trusted: the id of its text instead
    bad = {**_request("a;b"), "x": nested(200)}
    bad_id = _inspect(envelope(args=[bad]))
    assert bad_id is not None and bad_id.request == DeepRequest(_text_id(bad), "x")
    # the same depth on another task is refused without a request
    other = _inspect(envelope("gpusched.resume", [nested(200)]))
    assert other is not None and other.reason == "too_deep" and other.request is None


def _text_id(request: dict[str, object]) -> str:
    """``req-`` + sha256 of the request's JSON text as ``envelope`` writes it (json.dumps)."""
    return "req-" + hashlib.sha256(json.dumps(request).encode()).hexdigest()[:24]


def test_deep_requests_without_an_id_get_ids_of_their_own() -> None:
    """They all shared ``req-unhashable``: every one after the first was a conflict."""
    ids = set()
    requests = (
        {"model": {"name": "m", "hf_config": nested(200)}},
        {"model": {"name": "m", "env": nested(200)}},
        {"model": {"name": "m"}, "extra": nested(200)},
        {"model": {"name": "m"}, "extra": nested(201)},
    )
    for request in requests:
        verdict = _inspect(envelope(args=[request, 7]))
        assert verdict is not None and verdict.request is not None
        again = _inspect(envelope(args=[request, 8]))  # other args, same request: the same id
        assert again is not None and again.request == verdict.request
        ids.add(verdict.request.request_id)
    assert len(ids) == 4
    assert request_text('[[{"a":"]}"}, 1], {}, {}]') == '{"a":"]}"}'


def test_excerpts_are_bounded_and_printable() -> None:
    assert excerpt_of(b"abc") == "abc"
    assert excerpt_of(b"\xff" * 10_000) == "\\xff" * EXCERPT_BYTES
    assert len(excerpt_of("é" * 10_000).encode()) <= EXCERPT_BYTES


NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("eta", "refused"),
    [
        ("2026-12-01T12:02:30+00:00", False),  # exactly the limit (150 s) ahead
        ("2026-12-01T12:02:31+00:00", True),
        ("2026-12-01T12:02:31", True),  # naive: read as UTC, as Celery does
        ("2026-12-01T13:02:30+01:00", False),  # the same instant as the limit, another zone
        ("2026-11-30T12:00:00+00:00", False),  # past due: run at once
        ("not a date", False),  # Celery's own refusal (invalid_task, dead-lettered by the consumer)
    ],
)
def test_an_eta_further_ahead_than_the_limit_is_refused(eta: str, refused: bool) -> None:
    raw = envelope(args=[_request("r1")], headers={"eta": eta})
    verdict = inspect_message(raw, max_bytes=1 << 20, tasks=TASKS, intake_task="gpusched.decide",
                              max_time_limit=120, max_delay=150, now=NOW)
    assert (verdict is not None) == refused
    if verdict is not None:
        assert verdict.reason == "unknown_message"
        assert verdict.detail.startswith("message headers: eta is 151 s ahead, more than 150 s")
    assert _inspect(raw) is None  # without a limit (the default) any eta passes
