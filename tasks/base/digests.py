"""The digests that make a decision reproducible: request, result, inputs.

A decision event records the digest of the request it read, of the result it
produced and of everything it depended on; the scripts that book, park and
publish act only for the recorded result digest, and ``gpusched replay``
compares the replayed result's digest with the recorded one.
"""

from __future__ import annotations

import hashlib

from scheduler_core import ScheduleResult


def sha256_hex(text: str) -> str:
    """Hex sha256 of a text (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def result_digest(result: ScheduleResult) -> tuple[str, str]:
    """The result's JSON (field order, as published) and its sha256."""
    text = result.model_dump_json()
    return text, sha256_hex(text)


def inputs_digest(request_digest: str, version: int, chain_digest: str) -> str:
    """Digest of everything a decision depends on (request, cluster version, chain)."""
    return sha256_hex(f"{request_digest}:{version}:{chain_digest}")
