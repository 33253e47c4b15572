"""The partition's decide lease: one active decider at a time, handed over without polling.

A lease is ``SET <lease> <token> NX PX <ttl>`` (it expires on its own if its
holder dies) released by ``release_lease.lua``, which deletes it only for its
own token and pushes one wake token. A decider that did not get the lease
blocks on the wake list (``BLPOP``) and tries again when woken — one round
trip after the release instead of up to a polling period later — and at
least every :data:`WAKE_POLL_S`, which covers a lease that expired and a
wake token another waiter took. Both steps fit in a :class:`~tasks.scripts.Batch`:
the acquiring ``SET`` goes first in the decider's first round trip, the
release goes with the reservation.
"""

from __future__ import annotations

import time
import uuid

import redis

from tasks.keys import Keys
from tasks.scripts import Batch, Pending, ScriptCall
from tasks.settings import Settings

#: Longest block on the wake list before trying the lease again (an expired lease
#: pushes no wake token; 50 ms is well below the 5 s default wait).
WAKE_POLL_S = 0.05


class DecideLease:
    """One attempt to hold the decide lease (a fresh token per decision)."""

    __slots__ = ("_client", "_keys", "_ttl_ms", "_wait_s", "held", "token")

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings) -> None:
        self._client = client
        self._keys = keys
        self._ttl_ms = int(settings.decide_lock_ttl_s * 1000)
        self._wait_s = settings.decide_lock_wait_s
        self.token = uuid.uuid4().hex
        self.held = False

    def try_acquire(self, batch: Batch) -> Pending[bool]:
        """Queue one acquisition attempt (first in ``batch``: it is not safe to repeat).

        :attr:`held` reflects it once the batch executed and the reply was read.
        """
        return batch.command(self._took, "SET", self._keys.decide_lock, self.token, "NX", "PX", self._ttl_ms)

    def _took(self, reply: object) -> bool:
        self.held = bool(reply)
        return self.held

    def wait(self) -> bool:
        """Block until the lease is ours or ``decide_lock_wait_s`` passed; returns whether held."""
        deadline = time.monotonic() + self._wait_s
        while not self.held:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._client.blpop([self._keys.decide_lock_wake], timeout=min(remaining, WAKE_POLL_S))
            self.held = bool(
                self._client.set(self._keys.decide_lock, self.token, nx=True, px=self._ttl_ms)
            )
        return True

    def release_call(self) -> ScriptCall[bool]:
        """The release (a no-op when the lease expired or passed to another holder)."""
        keys = [self._keys.decide_lock, self._keys.decide_lock_wake]
        return ScriptCall("release_lease", keys, [self.token, self._ttl_ms], bool)
