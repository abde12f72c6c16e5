"""A batch a reader hands out: its rows, where they came from, and the cursor to commit after the step."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import pyarrow as pa

from . import balance
from .cursor import Cursor, Plan


@dataclass
class Batch:
    """Rows to train on, with where they came from and the cursor to commit after the step."""

    table: pa.Table
    plan: Plan
    after: Cursor
    seq: int
    stats: Dict[str, int] = field(default_factory=dict)
    # Seconds this step waited for data to land (rank 0's wait, the same figure on every rank with
    # sync="step"), and seconds this rank spent in next_batch (the data wait plus waiting for rank 0).
    waited_s: float = 0.0
    blocked_s: float = 0.0
    # sync="step": every rank's tokens this step, and the least the most loaded rank could have had
    # (balance.lower_bound); imbalance = max(rank_tokens) / bound - 1.
    rank_tokens: List[int] = field(default_factory=list)
    bound: int = 0
    # With max_tokens_per_micro_batch: this rank's rows split by tokens, never splitting a row. With
    # sync="step" every rank has the same number of them (some may be empty), as FSDP needs.
    # micro_batch_rows: the rows of each, as indices into ``table`` (to pick per-row arrays computed on
    # the whole batch, such as grpo_advantages).
    micro_batches: Optional[List[pa.Table]] = None
    micro_batch_rows: Optional[List[List[int]]] = None

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    @property
    def keys(self) -> List[str]:
        return self.table.column("key").to_pylist()

    @property
    def imbalance(self) -> float:
        """sync="step": how many more tokens the most loaded rank has than the best split could give it
        (0.04: 4 % above ``bound``); 0.0 otherwise."""
        return balance.imbalance(self.rank_tokens, self.bound) if self.rank_tokens else 0.0

    def to_verl(self, **kwargs):
        from .tensors import to_verl

        return to_verl(self.table, **kwargs)

    def to_packed(self, **kwargs):
        from .tensors import to_packed

        return to_packed(self.table, **kwargs)


def shard_of(uid: str, world_size: int) -> int:
    """The data-parallel rank a uid belongs to: stable across processes and runs."""
    return zlib.crc32(uid.encode("utf-8")) % world_size
