"""The partition's decide lease: one active decider at a time, handed over without polling.

A lease is ``SET <lease> <token> NX PX <ttl>`` (it expires on its own if its
holder dies) released by ``release_lease.lua``, which deletes it only for its
own token and pushes one wake token. A decider that did not get the lease
blocks on the wake list (``BLPOP``) and tries again when woken — one round
trip after the release instead of up to a polling period later — and at
least every :data:`WAKE_POLL_S`, which covers a lease that expired and a
wake token another waiter took. Both steps fit in a :class:`~tasks.state.scripts.Batch`:
the acquiring ``SET`` goes first in the decider's first round trip, the
release goes with the reservation.

Every acquisition attempt also reads the lease back (``GET``, same round
trip): redis-py re-sends a whole pipeline whose reply was lost (a connection
reset, Redis restarted from its AOF), and the repeated ``SET NX`` then fails
against the decider's own token — the token read back says it holds the
lease. An attempt whose reply was never read may have taken the lease, so
:attr:`DecideLease.may_hold` stays true until a release was sent.
"""

from __future__ import annotations

import time
import uuid

import redis

from tasks.base.keys import Keys
from tasks.base.settings import Settings
from tasks.state.scripts import Batch, Pending, ScriptCall

#: Longest block on the wake list before trying the lease again (an expired lease
#: pushes no wake token; 50 ms is well below the 5 s default wait).
WAKE_POLL_S = 0.05


class Acquisition:
    """The replies of one queued acquisition attempt, available once the batch executed."""

    __slots__ = ("_lease", "_owner", "_took")

    def __init__(self, lease: DecideLease, took: Pending[bool], owner: Pending[str | None]) -> None:
        self._lease, self._took, self._owner = lease, took, owner

    @property
    def value(self) -> bool:
        """Whether the lease is ours (also sets :attr:`DecideLease.held`)."""
        return self._lease.settle(self._took.value, self._owner.value)


class DecideLease:
    """One attempt to hold the decide lease (a fresh token per decision)."""

    __slots__ = ("_client", "_keys", "_ttl_ms", "_unsure", "_wait_s", "held", "token")

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings) -> None:
        self._client = client
        self._keys = keys
        self._ttl_ms = int(settings.decide_lock_ttl_s * 1000)
        self._wait_s = settings.decide_lock_wait_s
        self.token = uuid.uuid4().hex
        self.held = False
        self._unsure = False

    @property
    def may_hold(self) -> bool:
        """Held, or an acquisition was sent whose reply was not read (release to be sure)."""
        return self.held or self._unsure

    def try_acquire(self, batch: Batch) -> Acquisition:
        """Queue one acquisition attempt (first in ``batch``: not re-sent after a NOSCRIPT).

        :attr:`held` reflects it once the batch executed and the value was read.
        """
        self._unsure = True
        took = batch.command(bool, "SET", self._keys.decide_lock, self.token, "NX", "PX", self._ttl_ms)
        owner = batch.command(_text, "GET", self._keys.decide_lock)
        return Acquisition(self, took, owner)

    def settle(self, took: bool, owner: str | None) -> bool:
        """Record an acquisition attempt's replies; returns whether the lease is ours."""
        self.held = took or owner == self.token
        self._unsure = False
        return self.held

    def released(self) -> None:
        """A release of this token was executed (the lease is not ours any more)."""
        self.held = self._unsure = False

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the lease is ours or ``timeout_s`` (default ``decide_lock_wait_s``)
        passed; returns whether held."""
        deadline = time.monotonic() + (self._wait_s if timeout_s is None else timeout_s)
        while not self.held:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._client.blpop([self._keys.decide_lock_wake], timeout=min(remaining, WAKE_POLL_S))
            self._unsure = True
            pipe = self._client.pipeline(transaction=False)
            pipe.set(self._keys.decide_lock, self.token, nx=True, px=self._ttl_ms)
            pipe.get(self._keys.decide_lock)
            took, owner = pipe.execute()
            self.settle(bool(took), _text(owner))
        return True

    def release_call(self) -> ScriptCall[bool]:
        """The release (a no-op when the lease expired or passed to another holder)."""
        keys = [self._keys.decide_lock, self._keys.decide_lock_wake]
        return ScriptCall("release_lease", keys, [self.token, self._ttl_ms], bool)


def _text(reply: object) -> str | None:
    return None if reply is None else str(reply)
