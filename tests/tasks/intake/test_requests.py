"""Validating a request at the edge: its id, its canonical form, its rejection."""

from __future__ import annotations

import json

from builders import RTX_4090, model, uniform_worker

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
