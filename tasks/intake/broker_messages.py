"""A raw broker message, checked before kombu or Celery parse it.

Anyone who can reach the broker can push anything on a queue
(``LPUSH gpusched.requests 'this is not json'``). kombu's Redis transport
parses what it pops with its JSON decoder and turns it into a message, and a
Celery worker's parent decodes the body and pickles the task for its pool
child; an exception at either step used to stop the consumer ("Unrecoverable
error") with the popped message lost, and a body nested ~900 levels deep
exhausted the recursion limit while being pickled. :func:`inspect_message`
checks, on the raw bytes, everything those steps rely on, in the order they
rely on it, with bounded work:

1. size: at most ``max_bytes`` (the largest document limit, base64-encoded,
   plus room for headers: :attr:`tasks.base.settings.Settings.max_message_bytes`);
2. UTF-8 text, nested at most :data:`ENVELOPE_DEPTH` levels (counted on the
   text, without parsing), and JSON for kombu's own decoder
   (:func:`kombu.utils.json.loads`, type markers included);
3. the envelope kombu reads: an object with ``properties.delivery_tag``, a
   string ``body`` in ``base64`` encoding, ``content-type``
   ``application/json`` (the only content the workers accept), Celery
   protocol 2 headers naming a task of this service and its ``id``, every
   header Celery's parent interprets of the type Celery's message protocol
   gives it (:class:`CeleryHeaders`: a ``timelimit`` that is not a pair once
   left a worker's pool wedged), and time limits no longer than the worker's own;
4. the body: base64, UTF-8, nested at most :data:`BODY_DEPTH` levels,
   JSON for kombu's serializer registry (:func:`kombu.serialization.loads`),
   shaped ``[args, kwargs, embed]`` with no callbacks, errbacks, chain or chord
   (the service's tasks take none).

A message that fails gets a :class:`Verdict` (reason code, one-line detail,
a bounded excerpt) instead of being parsed; the worker dead-letters it
(:mod:`tasks.runtime.broker_door`). A ``gpusched.decide`` message whose raw
request nests too deeply also names the request and the field, so the
request gets a ``rejected`` result like any other invalid request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kombu.serialization import loads as kombu_body_loads
from kombu.utils.json import loads as kombu_json_loads
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler_core import render_text, request_field
from tasks.intake.limits import MAX_JSON_DEPTH
from tasks.intake.names import REQUEST_ID

#: The only content type the workers accept (``accept_content``).
JSON_CONTENT = "application/json"
#: Deepest envelope: Celery's headers nest a few levels; the body is one string.
ENVELOPE_DEPTH = 16
#: Deepest body: ``[args, kwargs, embed]`` and the args list hold a request of at most
#: :data:`MAX_JSON_DEPTH` levels, which the intake judges and rejects itself.
BODY_DEPTH = MAX_JSON_DEPTH + 2
#: Bytes of the raw message kept in a dead letter.
EXCERPT_BYTES = 512

#: One JSON string (escapes included) or one bracket: enough to count nesting without parsing.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)

# Reason codes (the ``reason`` field of the dead letter).
TOO_LARGE = "too_large"
NOT_UTF8 = "not_utf8"
TOO_DEEP = "too_deep"
INVALID_JSON = "invalid_json"
MALFORMED_ENVELOPE = "malformed_envelope"
CONTENT_TYPE = "content_type"
UNKNOWN_MESSAGE = "unknown_message"
UNKNOWN_TASK = "unknown_task"
INVALID_BODY = "invalid_body"


class CeleryHeaders(BaseModel):
    """The protocol 2 headers Celery's worker reads, with the protocol's types (others pass)."""

    model_config = ConfigDict(strict=True, extra="allow")

    task: str = Field(min_length=1, max_length=200)
    id: str = Field(min_length=1, max_length=200)
    lang: str | None = None
    root_id: str | None = None
    parent_id: str | None = None
    group: str | None = None
    group_index: int | None = None
    shadow: str | None = None
    eta: str | None = None
    expires: str | None = None
    retries: int | None = Field(default=None, ge=0)
    timelimit: list[float | None] | None = Field(default=None, min_length=2, max_length=2)
    argsrepr: str | None = None
    kwargsrepr: str | None = None
    origin: str | None = None
    ignore_result: bool | None = None
    replaced_task_nesting: int | None = Field(default=None, ge=0)
    stamped_headers: list[str] | None = None
    stamps: dict[str, Any] | None = None


class CeleryProperties(BaseModel):
    """The envelope properties kombu and Celery read."""

    model_config = ConfigDict(strict=True, extra="allow")

    delivery_tag: str = Field(min_length=1, max_length=200)
    body_encoding: str
    correlation_id: str | None = None
    reply_to: str | None = None
    priority: int | None = Field(default=None, ge=0, le=255)
    delivery_info: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class DeepRequest:
    """The raw request of a ``gpusched.decide`` message refused for its nesting.

    Attributes:
        request_id: its id (the given one, else ``req-`` + the digest of its text).
        field: the field that nests too deeply (``model.hf_config``, or a top-level field).
    """

    request_id: str
    field: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a raw message is refused.

    Attributes:
        reason: a reason code (:data:`TOO_LARGE`, :data:`NOT_UTF8`, ...).
        detail: one line for operators, naming the limit when one was exceeded.
        excerpt: the first :data:`EXCERPT_BYTES` bytes, as text (bytes that are
            not UTF-8 appear as ``\\xNN``).
        size: the message's length in bytes.
        task, task_id: the Celery task name and id, when the headers could be read.
        request: the request a too-deep ``gpusched.decide`` message carries.
    """

    reason: str
    detail: str
    excerpt: str
    size: int
    task: str = ""
    task_id: str = ""
    request: DeepRequest | None = None


def excerpt_of(raw: bytes | str) -> str:
    """The first :data:`EXCERPT_BYTES` bytes of a message, as printable text."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return data[:EXCERPT_BYTES].decode("utf-8", "backslashreplace")


def inspect_message(
    raw: bytes,
    *,
    max_bytes: int,
    tasks: frozenset[str],
    intake_task: str,
    max_time_limit: float,
    max_delay: float | None = None,
    now: datetime | None = None,
) -> Verdict | None:
    """Check one raw broker message (see the module docstring); None when kombu and Celery
    can take it.

    Args:
        raw: the bytes popped from the queue.
        max_bytes: the largest message accepted.
        tasks: the task names this service runs.
        intake_task: the task whose first argument may be a raw request (``gpusched.decide``).
        max_time_limit: the worker's hard time limit; a message may not ask for more.
        max_delay: the furthest ``eta`` a message may carry, in seconds from ``now``
            (None: any). A worker holds an ETA message unacknowledged until it is due, and
            the broker hands it out again once it outlives the visibility timeout.
        now: the time ``eta`` is compared with (default: the current UTC time).
    """
    size = len(raw)

    def refuse(reason: str, detail: str, **extra: Any) -> Verdict:
        # the detail and the header fields quote the message: rendered to be written anywhere
        return Verdict(reason, render_text(detail), excerpt_of(raw), size, **extra)

    if size > max_bytes:
        return refuse(TOO_LARGE, f"message is {size} bytes, above the limit of {max_bytes} bytes "
                                 "(max_message_bytes: the largest document limit, base64, plus headers)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return refuse(NOT_UTF8, f"message is not UTF-8 text (byte {error.start})")
    if depth_exceeds(text, ENVELOPE_DEPTH):
        return refuse(TOO_DEEP, f"envelope nests more than {ENVELOPE_DEPTH} levels deep")
    try:
        envelope = kombu_json_loads(text)  # type: ignore[no-untyped-call]
    except Exception as error:  # whatever kombu's decoder raises, kombu would raise too
        return refuse(INVALID_JSON, f"message is not JSON: {_one_line(error)}")
    named = _task_of(envelope)
    problem = _envelope_problem(envelope, tasks, max_time_limit) or _delay_problem(envelope, max_delay, now)
    if problem is not None:
        return refuse(*problem, **named)
    body_problem = _body_problem(envelope, named["task"] == intake_task)
    if body_problem is not None:
        reason, detail, request = body_problem
        return refuse(reason, detail, request=request, **named)
    return None


def _task_of(envelope: Any) -> dict[str, str]:
    """The task name and id of an envelope, as far as its headers say ("" where not)."""
    headers = envelope.get("headers") if isinstance(envelope, dict) else None
    headers = headers if isinstance(headers, dict) else {}
    task, task_id = headers.get("task"), headers.get("id")
    return {"task": render_text(task[:200]) if isinstance(task, str) else "",
            "task_id": render_text(task_id[:200]) if isinstance(task_id, str) else ""}


def _envelope_problem(envelope: Any, tasks: frozenset[str], max_time_limit: float) -> tuple[str, str] | None:
    """What kombu's message and Celery's task handler would fail on, before the body."""
    if not isinstance(envelope, dict):
        return MALFORMED_ENVELOPE, "message is not a JSON object"
    return _kombu_problem(envelope) or _celery_problem(envelope, tasks, max_time_limit)


def _kombu_problem(envelope: dict[str, Any]) -> tuple[str, str] | None:
    """What kombu's message needs: properties with a delivery tag, a base64 body, JSON content."""
    properties = envelope.get("properties")
    if not isinstance(properties, dict) or not isinstance(properties.get("delivery_tag"), str):
        return MALFORMED_ENVELOPE, "message has no properties.delivery_tag"
    try:
        CeleryProperties.model_validate(properties)
    except ValidationError as error:
        return MALFORMED_ENVELOPE, f"message properties: {_first_error(error)}"
    if properties.get("body_encoding") != "base64" or not isinstance(envelope.get("body"), str):
        return MALFORMED_ENVELOPE, "message body is not a base64 string"
    content_type = envelope.get("content-type")
    if content_type != JSON_CONTENT:
        return CONTENT_TYPE, f"content type {str(content_type)[:80]!r} is not {JSON_CONTENT}"
    if envelope.get("content-encoding") not in ("utf-8", None):
        return CONTENT_TYPE, f"content encoding {str(envelope.get('content-encoding'))[:80]!r} is not utf-8"
    return None


def _celery_problem(
    envelope: dict[str, Any], tasks: frozenset[str], max_time_limit: float
) -> tuple[str, str] | None:
    """What Celery's parent reads: protocol 2 headers naming one of our tasks, typed as the protocol says."""
    headers = envelope.get("headers")
    if not isinstance(headers, dict) or not isinstance(headers.get("task"), str):
        return UNKNOWN_MESSAGE, "message is not a Celery protocol 2 task (no headers.task)"
    if headers["task"] not in tasks:
        return UNKNOWN_TASK, f"task {headers['task'][:120]!r} is not one of {', '.join(sorted(tasks))}"
    try:
        parsed = CeleryHeaders.model_validate(headers)
    except ValidationError as error:
        return UNKNOWN_MESSAGE, f"message headers: {_first_error(error)}"
    for limit in parsed.timelimit or ():
        if limit is not None and not 0 < limit <= max_time_limit:
            return UNKNOWN_MESSAGE, f"message headers: timelimit must be in (0, {max_time_limit:g}] seconds"
    return None


def _delay_problem(
    envelope: dict[str, Any], max_delay: float | None, now: datetime | None
) -> tuple[str, str] | None:
    """An ``eta`` further ahead than ``max_delay`` (one that does not parse is Celery's to refuse)."""
    eta = envelope["headers"].get("eta")
    if max_delay is None or eta is None:
        return None
    try:
        due = datetime.fromisoformat(eta)
    except ValueError:
        return None
    if due.tzinfo is None:  # Celery reads a naive ETA as UTC
        due = due.replace(tzinfo=UTC)
    ahead = (due - (now or datetime.now(UTC))).total_seconds()
    if ahead > max_delay:
        return UNKNOWN_MESSAGE, (f"message headers: eta is {ahead:.0f} s ahead, more than {max_delay:g} s "
                                 "(visibility_timeout_s / 2: a message held longer is delivered twice)")
    return None


def _first_error(error: ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}"


def _body_problem(envelope: dict[str, Any], intake: bool) -> tuple[str, str, DeepRequest | None] | None:
    try:
        body = base64.b64decode(envelope["body"], validate=True)
        text = body.decode("utf-8")
    except (binascii.Error, ValueError):
        return INVALID_BODY, "body is not base64 of UTF-8 text", None
    if depth_exceeds(text, BODY_DEPTH):
        request = deep_request(text) if intake else None
        where = f" (field {request.field})" if request else ""
        return TOO_DEEP, f"body nests more than {BODY_DEPTH} levels deep{where}", request
    try:
        decoded = kombu_body_loads(  # type: ignore[no-untyped-call]
            body, JSON_CONTENT, envelope.get("content-encoding") or "utf-8", accept={JSON_CONTENT}
        )
    except Exception as error:  # whatever the serializer raises, Celery's parent would raise too
        return INVALID_BODY, f"body is not JSON: {_one_line(error)}", None
    if not (isinstance(decoded, list) and len(decoded) == 3 and isinstance(decoded[0], list)
            and isinstance(decoded[1], dict) and isinstance(decoded[2], dict | None)):
        return INVALID_BODY, "body is not a Celery protocol 2 body [args, kwargs, embed]", None
    if any((decoded[2] or {}).get(key) for key in ("callbacks", "errbacks", "chain", "chord")):
        return INVALID_BODY, "body carries callbacks, errbacks, a chain or a chord (none are accepted)", None
    return None


def depth_exceeds(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests more than ``limit`` levels of arrays/objects (no parsing)."""
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False


def deep_request(body: str) -> DeepRequest | None:
    """The raw request (``args[0]``) of a too-deep ``gpusched.decide`` body, and its deep field.

    The body is read with every value nested past :data:`BODY_DEPTH` replaced by a
    marker string, so parsing is bounded; the marker's path names the field.
    None when the body is not ``[[request, ...], ...]`` even so. A request without a
    usable id gets ``req-`` and 24 hex digits of the sha256 of its text as sent
    (:func:`request_text`): reading it whole is what its depth forbids, so this is not
    the canonical digest, but the same message gives the same id and different
    requests different ids (never one shared id, which made every such request
    after the first a ``conflict``).
    """
    marker = f"gpusched-pruned-{uuid.uuid4().hex}"
    try:
        decoded = json.loads(_pruned(body, BODY_DEPTH, json.dumps(marker)))
    except ValueError:
        return None
    args = decoded[0] if isinstance(decoded, list) and decoded else None
    request = args[0] if isinstance(args, list) and args else None
    if not isinstance(request, Mapping):
        return None
    given = request.get("request_id")
    usable = isinstance(given, str) and given != marker and REQUEST_ID.fullmatch(given)
    field = request_field(_path_of(request, marker) or ())  # the core's one field rule
    if usable and isinstance(given, str):
        return DeepRequest(given, field)
    digest = hashlib.sha256(request_text(body).encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return DeepRequest(f"req-{digest}", field)


def request_text(body: str) -> str:
    """The JSON text of ``args[0]`` in a ``[[request, ...], ...]`` body, as sent (no parsing).

    The whole body when ``args[0]`` is not an object or array (the caller has already
    read the body as that shape).
    """
    depth = 0
    start: int | None = None
    for match in _TOKENS.finditer(body):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth == 3 and start is None:
                start = match.start()
        elif token in ("]", "}"):
            depth -= 1
            if depth == 2 and start is not None:
                return body[start:match.end()]
    return body


def _pruned(text: str, limit: int, replacement: str) -> str:
    """``text`` with every array/object that opens below ``limit`` levels replaced."""
    pieces: list[str] = []
    depth = 0
    cut_from: int | None = None
    kept_until = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth == limit + 1 and cut_from is None:
                cut_from = match.start()
        elif token in ("]", "}"):
            if depth == limit + 1 and cut_from is not None:
                pieces += [text[kept_until:cut_from], replacement]
                kept_until, cut_from = match.end(), None
            depth -= 1
    pieces.append(text[kept_until:])
    return "".join(pieces)


def _path_of(value: Any, marker: str) -> list[Any] | None:
    """The keys and indexes leading to the first ``marker`` (document order), None if absent."""
    pending: list[tuple[Any, list[Any]]] = [(value, [])]
    while pending:
        item, path = pending.pop()
        if item == marker:
            return path
        if isinstance(item, Mapping):
            children = [(v, [*path, k]) for k, v in item.items()]
        elif isinstance(item, list):
            children = [(v, [*path, i]) for i, v in enumerate(item)]
        else:
            continue
        pending.extend(reversed(children))
    return None


def _one_line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:200]}" if text else type(error).__name__
