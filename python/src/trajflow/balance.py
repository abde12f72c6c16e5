"""Splitting a step's units across ranks, and a rank's rows into micro-batches, by tokens.

Every function here is a pure function of its arguments, with deterministic tie-breaks: every rank of a
job computes the same split from the same global batch, without talking to the others.

- ``assign``: whole units (GRPO groups, sessions or rows) to ranks so the ranks' token counts are as
  equal as the units allow. LPT (longest processing time first: biggest unit to the least loaded rank),
  then moves and swaps out of the most loaded rank while they lower it. LPT alone is within 4/3 of the
  best split; the moves and swaps close most of the rest on the small instances a step holds.
- ``lower_bound``: no split can do better than the mean or than the biggest unit; ``imbalance`` reports
  against it, so a figure near 0 means the split is (close to) the best one.
- ``micro_batch_count``, ``micro_batches``: a rank's rows into micro-batches under a token limit, balanced
  (LPT again), never splitting a row (a row over the limit is a micro-batch of its own): as few as the
  balanced split allows, starting from the total over the limit, which no split can beat.
"""
from __future__ import annotations

from typing import List, Sequence


def assign(tokens: Sequence[int], world_size: int) -> List[int]:
    """The rank of each unit (``tokens[i]`` is unit i's token count), balancing the ranks' sums."""
    if world_size <= 1:
        return [0] * len(tokens)
    ranks = [0] * len(tokens)
    loads = [0] * world_size
    # Biggest first; equal sizes in their order in the batch, so every rank sorts alike.
    for i in sorted(range(len(tokens)), key=lambda i: (-tokens[i], i)):
        r = min(range(world_size), key=lambda r: (loads[r], r))
        ranks[i] = r
        loads[r] += tokens[i]
    _improve(tokens, ranks, loads)
    return ranks


def _improve(tokens: Sequence[int], ranks: List[int], loads: List[int], budget: int = 200_000) -> None:
    """Moves one unit, or swaps two, between the most loaded rank and another while that lowers the
    larger of the two loads: each change strictly lowers the sorted loads, so this ends.

    ``budget`` caps the pairs looked at (a fraction of a second of Python): a step of many units is left
    about as LPT made it, which is then already close: the most loaded rank exceeds the mean by less than
    the last unit LPT gave it, and with many units the last ones placed are the smallest."""
    world = len(loads)
    while budget > 0:
        top = max(range(world), key=lambda r: (loads[r], -r))
        mine = [i for i in range(len(tokens)) if ranks[i] == top]
        best = None  # (new max of the pair, other rank, unit leaving top, unit entering top or -1)
        for other in range(world):
            if other == top:
                continue
            theirs = [j for j in range(len(tokens)) if ranks[j] == other]
            budget -= len(mine) * (len(theirs) + 1)
            for i in mine:
                for j in [-1] + theirs:
                    delta = tokens[i] - (tokens[j] if j >= 0 else 0)
                    if delta <= 0:
                        continue
                    pair = max(loads[top] - delta, loads[other] + delta)
                    if pair < loads[top] and (best is None or pair < best[0]):
                        best = (pair, other, i, j)
        if best is None:
            return
        _, other, i, j = best
        delta = tokens[i] - (tokens[j] if j >= 0 else 0)
        ranks[i] = other
        if j >= 0:
            ranks[j] = top
        loads[top] -= delta
        loads[other] += delta


def loads(tokens: Sequence[int], ranks: Sequence[int], world_size: int) -> List[int]:
    """Each rank's token count under an assignment."""
    out = [0] * world_size
    for t, r in zip(tokens, ranks):
        out[r] += t
    return out


def lower_bound(tokens: Sequence[int], world_size: int) -> int:
    """A load no split of these units across ``world_size`` ranks can beat: the mean, or the biggest unit."""
    if not tokens:
        return 0
    return max(-(-sum(tokens) // world_size), max(tokens))


def imbalance(rank_tokens: Sequence[int], bound: int) -> float:
    """How far the most loaded rank is above ``bound`` (0.05: 5 % more tokens than the best split could have)."""
    if bound <= 0:
        return 0.0
    return max(rank_tokens) / bound - 1.0


def micro_batch_count(tokens: Sequence[int], limit: int) -> int:
    """How many micro-batches ``micro_batches`` needs so that each holds at most ``limit`` tokens (or one
    row): the fewest for which its balanced split fits, from ``ceil(sum / limit)`` up."""
    if not tokens:
        return 0
    m = max(1, -(-sum(tokens) // limit))
    while not _fits(tokens, _lpt(tokens, m), limit):
        m += 1
    return m


def micro_batches(tokens: Sequence[int], count: int) -> List[List[int]]:
    """The row indices of each of ``count`` micro-batches, balanced by tokens, in row order within each."""
    if count <= 0:
        return []
    bins = _lpt(tokens, count)
    return [sorted(i for i in range(len(tokens)) if bins[i] == b) for b in range(count)]


def _lpt(tokens: Sequence[int], count: int) -> List[int]:
    bins = [0] * len(tokens)
    load = [0] * count
    for i in sorted(range(len(tokens)), key=lambda i: (-tokens[i], i)):
        b = min(range(count), key=lambda b: (load[b], b))
        bins[i] = b
        load[b] += tokens[i]
    return bins


def _fits(tokens: Sequence[int], bins: Sequence[int], limit: int) -> bool:
    load: dict = {}
    rows: dict = {}
    for t, b in zip(tokens, bins):
        load[b] = load.get(b, 0) + t
        rows[b] = rows.get(b, 0) + 1
    # A row longer than the limit is never split: alone in its micro-batch, it fits by definition.
    return all(load[b] <= limit or rows[b] == 1 for b in load)
