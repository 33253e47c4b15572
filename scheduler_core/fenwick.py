"""Fenwick trees of run lengths: where a run starts among runs joined, and which run holds
the n-th item, in O(log n), kept up to date one length change at a time.

A tree is a plain list, 1-based (``tree[0]`` unused), over ``n`` lengths. The
kept ranking (:mod:`scheduler_core.ranking`) and the joined candidates of a stage
(:class:`scheduler_core.outcomes.JoinedRuns`) hold one per sequence of runs.
"""

from __future__ import annotations

from collections.abc import Sequence


def build(lengths: Sequence[int]) -> list[int]:
    """The tree over ``lengths``, in one pass."""
    tree = [0, *lengths]
    size = len(tree)
    for node in range(1, size):
        parent = node + (node & -node)
        if parent < size:
            tree[parent] += tree[node]
    return tree


def add(tree: list[int], slot: int, delta: int) -> None:
    """The length at ``slot`` (0-based) grew by ``delta`` (negative: shrank)."""
    node = slot + 1
    size = len(tree)
    while node < size:
        tree[node] += delta
        node += node & -node


def prefix(tree: list[int], slot: int) -> int:
    """The sum of the lengths before ``slot`` (0-based)."""
    total, node = 0, slot
    while node > 0:
        total += tree[node]
        node -= node & -node
    return total


def locate(tree: list[int], index: int) -> tuple[int, int]:
    """The slot (0-based) whose run holds the ``index``-th item of the runs joined, and the
    item's position in that run (``0 <= index <`` the total)."""
    size = len(tree) - 1
    node, left = 0, index
    step = 1 << size.bit_length()
    while step:
        ahead = node + step
        if ahead <= size and tree[ahead] <= left:
            node, left = ahead, left - tree[ahead]
        step >>= 1
    return node, left
