"""With ``decider_standby`` on, a worker node keeps (or waits for) the partition's decider presence.

On boot the node tries to take the presence at once (the consumer's gate holds the decision
queues back until then: :data:`tasks.runtime.standby.GATE`), then refreshes it three times
per ``decider_presence_ttl_s`` on a thread of its main process — so a long decision in the
pool does not let it lapse; on a warm shutdown it hands the presence back. With the setting
off this does nothing and every node takes every queue. See :mod:`tasks.runtime.standby`.
"""

from __future__ import annotations

from tasks.base.logging import get_logger
from tasks.runtime.middleware.base import Middleware, RuntimeFactory
from tasks.runtime.periodic import PeriodicThread
from tasks.runtime.standby import Presence
from tasks.state.outages import TRANSIENT_ERRORS

log = get_logger(__name__)

#: Presence refreshes per TTL.
REFRESHES_PER_TTL = 3


class DeciderStandby(Middleware):
    """Runs this node's :class:`~tasks.runtime.standby.Presence` from boot to shutdown."""

    def __init__(self) -> None:
        self._thread: PeriodicThread | None = None
        self._presence: Presence | None = None

    def after_worker_boot(self, node: str, runtime: RuntimeFactory) -> None:
        """Take the presence if free, then refresh it periodically (only with the setting on)."""
        rt = runtime()
        if not rt.settings.decider_standby:
            return
        ttl_s = rt.settings.decider_presence_ttl_s
        presence = self._presence = Presence(rt.partition.scripts, rt.keys, ttl_s)
        try:
            presence.refresh()
        except TRANSIENT_ERRORS as error:  # the thread tries again; the node stands by meanwhile
            log.warning("decider_presence_unreachable", error=repr(error))
        self._thread = PeriodicThread("gpusched-decider", ttl_s / REFRESHES_PER_TTL, presence.refresh)
        self._thread.start()

    def before_worker_shutdown(self, node: str, runtime: RuntimeFactory) -> None:
        """Stop refreshing and hand the presence back (an outage leaves it to expire)."""
        if self._thread is not None:
            self._thread.stop()
        if self._presence is not None:
            try:
                self._presence.hand_back()
            except TRANSIENT_ERRORS:
                log.warning("decider_presence_not_handed_back", node=self._presence.me)
