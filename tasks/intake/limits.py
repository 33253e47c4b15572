"""The service's bounds on what it takes in: sizes, nesting and Unicode.

The core bounds what it decides on (ids and bytes to 64 bits, free-form values
to 64 levels, the strings a result carries to valid Unicode). The service
stores and forwards more than the core reads — a request's unknown fields, a
whole snapshot, an event — so it bounds every document it takes in before
anything is written:

* **size**: the stored request, a cluster event and a snapshot each have a
  configurable limit (``max_request_bytes``, ``max_event_bytes``,
  ``max_snapshot_bytes``), measured on the compact JSON the service stores;
* **nesting**: no value nests more than :data:`MAX_JSON_DEPTH` levels (the
  core's own bound), so no JSON encoder, hash or pickle recurses without end;
* **Unicode**: every string, keys included, is valid Unicode (JSON allows a
  lone surrogate such as ``"\\ud800"``, which cannot be written as UTF-8).

Each check names the offending field (and the limit) in an :class:`InvalidField`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from scheduler_core import first_problem, render_text

#: Deepest nesting accepted in any document (the core's bound on free-form values);
#: real requests, snapshots and events nest fewer than ten levels.
MAX_JSON_DEPTH = 64


class InvalidField(ValueError):
    """Input that validates field by field but is inconsistent; ``field`` names where.

    Both texts may quote input (a field named after a key), so both are rendered
    (:func:`scheduler_core.render_text`): an ``InvalidField`` always encodes.
    """

    def __init__(self, field: str, message: str) -> None:
        field, message = render_text(field), render_text(message)
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class _LimitSettings(Protocol):
    @property
    def max_request_bytes(self) -> int: ...
    @property
    def max_event_bytes(self) -> int: ...
    @property
    def max_snapshot_bytes(self) -> int: ...
    @property
    def model_roots(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class IntakeLimits:
    """The configurable bounds (see ``docs/service.md``, *Limits*).

    Attributes:
        max_request_bytes: stored request JSON (without inline workers/instances).
        max_event_bytes: one cluster event other than a snapshot.
        max_snapshot_bytes: one snapshot (``cluster apply`` or a ``snapshot`` event).
        model_roots: folders under which ``local_path`` may be read (none: never).
        check_local_paths: refuse a ``local_path`` outside ``model_roots``; off only for
            a recovery restoring bookings already decided, which reads no folder (the
            deciding worker checked its own roots; a later move is checked again).
    """

    max_request_bytes: int = 1 << 20
    max_event_bytes: int = 1 << 20
    max_snapshot_bytes: int = 64 << 20
    model_roots: tuple[str, ...] = ()
    check_local_paths: bool = True

    @classmethod
    def of(cls, settings: _LimitSettings) -> IntakeLimits:
        """The limits a deployment's settings configure."""
        return cls(settings.max_request_bytes, settings.max_event_bytes,
                   settings.max_snapshot_bytes, tuple(settings.model_roots))


def check_size(text: str, limit: int, *, field: str, setting: str) -> None:
    """Refuse ``text`` (compact JSON) longer than ``limit`` UTF-8 bytes.

    Raises:
        InvalidField: naming ``field``, the size and the ``setting`` that bounds it.
    """
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidField(field, f"is {size} bytes of JSON, above the {setting} limit of {limit} bytes")


def check_document(value: Any, *, root: str = "") -> None:
    """Refuse a document nested deeper than :data:`MAX_JSON_DEPTH` or holding invalid Unicode
    (the core's one checker, :func:`scheduler_core.first_problem`).

    Raises:
        InvalidField: naming the first offending value (document order), relative to ``root``.
    """
    problem = first_problem(value, MAX_JSON_DEPTH, root=root)
    if problem is not None:
        raise InvalidField(problem.field, problem.message)


def nesting_path(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The dotted path of the first value nested more than ``limit`` levels, None if none is.

    A container at the root is level 1; ``limit`` levels of containers are allowed
    (the core's ``too_deep`` rule). Iterative: any depth is safe to inspect.
    """
    problem = first_problem(value, limit, unicode=False)
    return None if problem is None else problem.field
