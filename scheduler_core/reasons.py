"""Why a request was not placed, and which cluster changes can change that.

Every filter and strategy reports its failures with a :class:`Reason` from this
closed set, and declares which :class:`ClusterChange` kinds can clear each of
its reasons (kube-scheduler's ``EventsToRegister``). A service that parks
unplaced requests derives its wake rules from those declarations
(:func:`scheduler_core.framework.wake_table`) instead of keeping its own copy.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Stable reason codes, recorded on events and on parked requests."""

    #: Worker filters (the filter that left no worker).
    CLUSTER_MISMATCH = "cluster_mismatch"
    GPU_SELECTOR_MISMATCH = "gpu_selector_mismatch"
    LABEL_MISMATCH = "label_mismatch"
    WORKER_NOT_READY = "worker_not_ready"
    #: Strategies.
    INSUFFICIENT_VRAM = "insufficient_vram"
    TP_NOT_DIVISIBLE = "tp_not_divisible"
    NO_WORKER_COMBINATION = "no_worker_combination"
    HETEROGENEOUS_GPUS = "heterogeneous_gpus"
    OVERCOMMIT = "overcommit"
    OVERCOMMIT_NOT_ALLOWED = "overcommit_not_allowed"
    #: ``policy: precise`` strategies.
    WEIGHTS_DO_NOT_FIT = "weights_do_not_fit"
    KV_FLOOR_NOT_MET = "kv_floor_not_met"
    KV_TOKENS_BELOW_MINIMUM = "kv_tokens_below_minimum"
    NO_BALANCED_GPU_SET = "no_balanced_gpu_set"
    NO_NODE_SHAPE = "no_node_shape"
    #: No strategy said why (nothing fitted and no event carried a reason).
    NO_CANDIDATE = "no_candidate"
    #: The service's own: a placement kept losing the race for its GPUs.
    CONFLICT_RETRIES_EXHAUSTED = "conflict_retries_exhausted"


class ClusterChange(StrEnum):
    """Kinds of cluster change a parked request may be waiting for."""

    #: A whole new snapshot: everything may have changed.
    SNAPSHOT = "snapshot"
    WORKER_ADDED = "worker_added"
    WORKER_READY = "worker_ready"
    LABELS_CHANGED = "labels_changed"
    CLUSTER_CHANGED = "cluster_changed"
    RENAMED = "renamed"
    CAPACITY_INCREASED = "capacity_increased"
    CAPACITY_FREED = "capacity_freed"


#: Changes that can bring more usable GPU memory to a request: a new or newly
#: eligible worker, a worker with more memory, or memory released by an instance.
MORE_CAPACITY = frozenset(
    {
        ClusterChange.WORKER_ADDED,
        ClusterChange.WORKER_READY,
        ClusterChange.LABELS_CHANGED,
        ClusterChange.CLUSTER_CHANGED,
        ClusterChange.RENAMED,
        ClusterChange.CAPACITY_INCREASED,
        ClusterChange.CAPACITY_FREED,
    }
)
