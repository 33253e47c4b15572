"""The core's immutable view of a worker and its GPUs.

A :class:`WorkerView` holds exactly what placement reads of a GPUStack
``Worker`` row. A strategy may hold a copy restricted to some GPUs
(:meth:`WorkerView.of_type`, :meth:`WorkerView.with_gpus`); every copy owns its
GPU tuple, so no copy can corrupt another (unlike GPUStack's shallow copies in
``policies/utils.py: group_workers_by_gpu_type``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain
from types import MappingProxyType
from typing import NamedTuple

from scheduler_core._schemas import Gpu, Worker
from scheduler_core.limits import encodable

__all__ = [
    "DuplicateGpu",
    "Gpu",
    "InvalidText",
    "WorkerView",
    "all_gpus",
    "build_view",
    "checked_views",
    "worker_view",
]


class WorkerView(NamedTuple):
    """An immutable worker with the GPUs a strategy may consider.

    A named tuple: one per worker is built for every cold decision (10,000 at the
    largest size) and tuple construction is several times cheaper than a frozen
    dataclass's. Compared by identity where it matters (the memo); never hashed
    (``labels`` is a mapping).
    """

    id: int
    name: str
    ip: str | None
    ifname: str | None
    cluster_id: int | None
    labels: Mapping[str, str]
    state: str
    reserved_ram: int
    reserved_vram: int
    ram_total: int
    is_unified_memory: bool
    gpus: tuple[Gpu, ...]

    def of_type(self, gpu_type: str | None) -> WorkerView:
        """This worker restricted to its GPUs of ``gpu_type`` (itself when all GPUs are of it)."""
        gpus = self.gpus
        if all(g.type == gpu_type for g in gpus):
            return self
        return self._replace(gpus=tuple(g for g in gpus if g.type == gpu_type))

    def with_gpus(self, gpus: Iterable[Gpu]) -> WorkerView:
        """A copy holding exactly ``gpus``."""
        return self._replace(gpus=tuple(gpus))


class DuplicateGpu(ValueError):
    """A worker reports two GPUs with the same (type, index): ``number`` is the second's position."""

    def __init__(self, worker: str, number: int, gpu_type: str | None, index: int) -> None:
        super().__init__(f"worker {worker!r} reports two {gpu_type} GPUs with index {index}")
        self.number = number


class InvalidText(ValueError):
    """A string of the row is not valid Unicode (a lone surrogate); ``where`` is its path in the row."""

    def __init__(self, where: str) -> None:
        super().__init__("is not valid Unicode (it holds a lone surrogate)")
        self.where = where


def worker_view(worker: Worker) -> WorkerView:
    """The :class:`WorkerView` of a validated worker row (a caller may keep it: rows are frozen).

    Raises:
        DuplicateGpu: two GPUs share a (type, index), which identifies a GPU on its worker.
        InvalidText: a string placement writes out is not valid Unicode.
    """
    view = build_view(worker)
    _check_gpu_identity(view)
    _check_text(view)
    return view


def _check_text(view: WorkerView) -> None:
    """The strings a result can carry (name, addresses, GPU types and names) must be valid Unicode."""
    texts = [view.name, view.ip or "", view.ifname or ""]
    texts += [(gpu.type or "") + (gpu.name or "") for gpu in view.gpus]
    if "".join(texts).isascii():  # the common case, checked at C speed
        return
    for where, text in (("name", view.name), ("ip", view.ip), ("ifname", view.ifname)):
        if text is not None and not encodable(text):
            raise InvalidText(where)
    for number, gpu in enumerate(view.gpus):
        for key, text in (("type", gpu.type), ("name", gpu.name)):
            if text is not None and not encodable(text):
                raise InvalidText(f"status.gpu_devices.{number}.{key}")


def _check_gpu_identity(view: WorkerView) -> None:
    if len({gpu.index for gpu in view.gpus}) == len(view.gpus):  # the common case: no index repeats
        return
    indexed = [(gpu.type, gpu.index) for gpu in view.gpus if gpu.index is not None]
    if len(set(indexed)) == len(indexed):
        return
    seen: set[tuple[str | None, int]] = set()
    for number, gpu in enumerate(view.gpus):
        if gpu.index is None:
            continue
        if (gpu.type, gpu.index) in seen:
            raise DuplicateGpu(view.name, number, gpu.type, gpu.index)
        seen.add((gpu.type, gpu.index))


def build_view(worker: Worker) -> WorkerView:
    """A new :class:`WorkerView` of the row, unchecked and not memoised."""
    status = worker.status or {}
    reserved = worker.system_reserved
    memory = status.get("memory") or {}
    # tuple.__new__ skips the named tuple's Python-level __new__ (the fields are in order).
    return _new_view(WorkerView, (
        worker.id,
        worker.name,
        worker.ip,
        worker.ifname,
        worker.cluster_id,
        MappingProxyType(worker.labels),  # the row is frozen and never handed out to change
        worker.state,
        reserved.ram if reserved else 0,
        reserved.vram if reserved else 0,
        memory.get("total") or 0,
        bool(memory.get("is_unified_memory")),
        status.get("gpu_devices") or (),  # validated into Gpu tuples already
    ))


_new_view = tuple.__new__
_GPU_TYPE = operator.attrgetter("type")
_GPU_NAME = operator.attrgetter("name")
_VIEW_ID = operator.attrgetter("id")
_VIEW_NAME = operator.attrgetter("name")
_VIEW_GPUS = operator.attrgetter("gpus")


def checked_views(workers: Sequence[Worker]) -> list[WorkerView] | None:
    """:func:`worker_view` of every row, when no row fails a check; None otherwise.

    The checks :func:`worker_view` makes per row, made once over the cluster at C
    speed (a cold decision builds every view): worker ids and names unique, no
    (type, index) repeated on a worker, every string ASCII. None says some check
    did not pass (a repeat, or a string that may still be valid non-ASCII
    Unicode): the caller then checks row by row, which names the first failure.
    """
    views = list(map(build_view, workers))
    count = len(views)
    if len(set(map(_VIEW_ID, views))) != count or len(set(map(_VIEW_NAME, views))) != count:
        return None
    if not all(map(_unique_indexes, map(_VIEW_GPUS, views))):
        return None
    gpus = list(all_gpus(views))
    texts = chain(
        map(_VIEW_NAME, views),
        filter(None, map(_VIEW_IP, views)),
        filter(None, map(_VIEW_IFNAME, views)),
        filter(None, map(_GPU_TYPE, gpus)),
        filter(None, map(_GPU_NAME, gpus)),
    )
    return views if "".join(texts).isascii() else None


def all_gpus(views: Iterable[WorkerView]) -> Iterator[Gpu]:
    """Every GPU of the views, worker by worker in order (walked at C speed)."""
    return chain.from_iterable(map(_VIEW_GPUS, views))


_VIEW_IP = operator.attrgetter("ip")
_VIEW_IFNAME = operator.attrgetter("ifname")
_GPU_INDEX = operator.attrgetter("index")


def _unique_indexes(gpus: tuple[Gpu, ...]) -> bool:
    """No GPU index repeats on the worker (whatever the types: the common case)."""
    return len(set(map(_GPU_INDEX, gpus))) == len(gpus)
