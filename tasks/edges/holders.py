"""What holds each GPU: the claims ledger inverted (``cluster show --holders``, the console's map).

The ledger keeps, per instance, the bytes it claims on each GPU
(``gpusched:ledger:claims``, instance key → ``[[gpu key, bytes], ...]``) and,
per instance, who put it there (``gpusched:cluster:instance_meta``: the
control plane's snapshot, or a gpusched booking and its request). Inverting
the claims gives, per GPU, its holders with their bytes — kubectl's
"Non-terminated Pods" per node, GPUStack's instances per GPU. A holder is
named by its instance key: ``req:<request id>`` for a gpusched booking,
``id:<n>`` / ``name:<name>`` / ``pos:<n>`` for a control-plane instance
(its GPUStack id or name).

Two ``HGETALL`` reads in one transaction; no instance row is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tasks.state.context import Runtime
from tasks.state.ledger import decode_amounts


@dataclass(frozen=True, slots=True)
class Holder:
    """One instance's claim on one GPU.

    Attributes:
        instance: the instance key (``req:<id>``, ``id:<n>``, ``name:<name>``, ``pos:<n>``).
        source: ``gpusched`` (booked by the service) or ``snapshot`` (the control plane's).
        request_id: the request that booked it (gpusched bookings), else None.
        bytes: the bytes it claims on this GPU.
        pinned: booked from a manual GPU selection (never moved).
    """

    instance: str
    source: str
    request_id: str | None
    bytes: int
    pinned: bool = False

    @property
    def label(self) -> str:
        """How an operator names it: the request id of a booking, else the control plane's key."""
        return self.request_id or self.instance

    def to_dict(self) -> dict[str, Any]:
        """JSON shape (``cluster show --holders --json``, the console)."""
        return {"instance": self.instance, "source": self.source, "request_id": self.request_id,
                "bytes": self.bytes, "pinned": self.pinned}


def gpu_holders(rt: Runtime) -> dict[str, list[Holder]]:
    """Holders per GPU key, largest claim first (then by instance key: a stable order)."""
    pipe = rt.client.pipeline(transaction=True)
    pipe.hgetall(rt.keys.claims)
    pipe.hgetall(rt.keys.instance_meta)
    claims, metas = pipe.execute()
    holders: dict[str, list[Holder]] = {}
    for instance, encoded in claims.items():
        meta = _meta(metas.get(instance))
        for gpu, amount in decode_amounts(encoded).items():
            if amount > 0:
                source = str(meta.get("src") or "snapshot")
                holder = Holder(instance, source, meta.get("rid"), amount, bool(meta.get("pin")))
                holders.setdefault(gpu, []).append(holder)
    for listed in holders.values():
        listed.sort(key=lambda holder: (-holder.bytes, holder.instance))
    return holders


def _meta(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}
