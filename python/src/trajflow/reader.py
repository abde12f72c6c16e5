"""Follow an output directory and hand a trainer batches, each row exactly once.

    reader = TrajectoryReader("out/", cursor="ckpt/cursor.json", batch_units=8, unit="group")
    for batch in reader.batches(follow=True):
        loss = train_step(batch.to_verl())
        reader.commit(batch)            # after the optimizer step

- Only committed files are read, in a deterministic order (files.py); dead letters never.
- A batch holds whole *units*: rows (``unit="row"``), a session's rows (``"session"``), or a GRPO group,
  the rows trajflow wrote together for one uid (``"group"``): a unit is never split across batches.
  Its size is counted in rows, tokens or units: it closes once the count reaches the target.
- Sharding across data-parallel ranks is by uid (a stable CRC-32), so a group always goes to one rank and
  the ranks' shards are disjoint and together complete.
- Staleness at read time: with ``max_policy_lag``, a unit with a row older than ``policy_version -
  max_policy_lag`` is skipped (counted in the batch's stats), against the trainer's current version.
- Exactly once: a batch's plan is written next to the cursor before the batch is returned (pending), and
  the cursor moves only on ``commit``. A trainer killed before committing receives the same batch again;
  one restored from an older checkpoint (``load_state_dict``) replays from there.
"""
from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Tuple, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from .cursor import Cursor, CursorStore, Pending, Plan
from .files import DataFile, Lister, lane_of

Units = List[Tuple[int, int, str]]  # (first row, end row, uid) of each unit of a file


@dataclass
class Batch:
    """Rows to train on, with where they came from and the cursor to commit after the step."""

    table: pa.Table
    plan: Plan
    after: Cursor
    seq: int
    stats: Dict[str, int] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    @property
    def keys(self) -> List[str]:
        return self.table.column("key").to_pylist()

    def to_verl(self, **kwargs):
        from .tensors import to_verl

        return to_verl(self.table, **kwargs)

    def to_packed(self, **kwargs):
        from .tensors import to_packed

        return to_packed(self.table, **kwargs)


def shard_of(uid: str, world_size: int) -> int:
    """The data-parallel rank a uid belongs to: stable across processes and runs."""
    return zlib.crc32(uid.encode("utf-8")) % world_size


class TrajectoryReader:
    def __init__(
        self,
        root: str,
        *,
        filesystem: Optional[pafs.FileSystem] = None,
        cursor: Union[str, CursorStore, None] = None,
        batch_rows: Optional[int] = None,
        batch_tokens: Optional[int] = None,
        batch_units: Optional[int] = None,
        unit: str = "session",
        rank: int = 0,
        world_size: int = 1,
        policy_version: Union[int, Callable[[], Optional[int]], None] = None,
        max_policy_lag: Optional[int] = None,
        rediscover_s: float = 30.0,
    ):
        sizes = [s for s in (batch_rows, batch_tokens, batch_units) if s is not None]
        if len(sizes) != 1 or sizes[0] <= 0:
            raise ValueError("give exactly one positive batch size: batch_rows, batch_tokens or batch_units")
        if unit not in ("row", "session", "group"):
            raise ValueError(f"unit must be row, session or group, not {unit!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        if max_policy_lag is not None and policy_version is None:
            raise ValueError("max_policy_lag needs policy_version (an int, or a function returning it)")
        self.root = root
        # rediscover_s: on S3, how often the whole prefix is listed to find new lanes (files.py).
        self.lister = Lister(root, filesystem, rediscover_s)
        self.fs, self.base = self.lister.fs, self.lister.base
        self.store = CursorStore(cursor) if isinstance(cursor, str) else cursor
        self.batch_rows, self.batch_tokens, self.batch_units = batch_rows, batch_tokens, batch_units
        self.unit = unit
        self.rank, self.world_size = rank, world_size
        self.policy_version = policy_version
        self.max_policy_lag = max_policy_lag
        committed, pending = (Cursor(), None) if self.store is None else self.store.load()
        self._committed: Cursor = committed
        # Batches handed out and not committed yet, oldest first; after a restart, the one the store kept.
        self._pending: List[Pending] = [] if pending is None else [pending]
        self._redeliver: List[Pending] = list(self._pending)
        self._cache: Dict[str, Tuple[pa.Table, Units, Optional[int]]] = {}

    # --- the cursor ------------------------------------------------------------------------------

    @property
    def cursor(self) -> Cursor:
        """The committed cursor."""
        return self._committed

    def state_dict(self) -> Dict:
        """The committed cursor, for the trainer's checkpoint."""
        return {"trajflow_cursor": self._committed.to_json()}

    def load_state_dict(self, state: Dict) -> None:
        """Resumes from a checkpoint's cursor: batches after it are delivered again.

        When it is the cursor the store holds, the batch pending there is delivered again exactly; from an
        older checkpoint, the batches after it are planned anew.
        """
        cursor = Cursor.from_json(state["trajflow_cursor"])
        if cursor == self._committed:
            return
        self._committed = cursor
        self._pending = []
        self._redeliver = []
        if self.store is not None:
            self.store.save(self._committed, None)

    def commit(self, batch: Batch) -> None:
        """The trainer is done with ``batch`` (after its optimizer step): it is never delivered again."""
        if not self._pending or self._pending[0].after != batch.after:
            raise ValueError("commit batches in the order they were delivered, each once")
        self._pending.pop(0)
        self._committed = batch.after
        if self.store is not None:
            self.store.save(self._committed, self._pending[0] if self._pending else None)

    # --- batches ---------------------------------------------------------------------------------

    def batches(
        self, follow: bool = False, poll_interval: float = 0.1, idle_timeout: Optional[float] = None
    ) -> Iterator[Batch]:
        """Batches until the directory has no more (``follow``: waits for files, until ``idle_timeout``)."""
        while True:
            batch = self.next_batch(follow=follow, poll_interval=poll_interval, timeout=idle_timeout)
            if batch is None:
                return
            yield batch

    def next_batch(
        self, follow: bool = False, poll_interval: float = 0.1, timeout: Optional[float] = None
    ) -> Optional[Batch]:
        """The next batch; None when there is none (without ``follow``: a last partial batch first)."""
        if self._redeliver:
            p = self._redeliver.pop(0)
            return self._materialize(p, self._committed.batches + 1)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            head = self._pending[-1].after if self._pending else self._committed
            plan = self._plan(head, final=not follow)
            if plan is not None:
                # The store keeps the oldest uncommitted batch: a trainer that reads ahead gets that one
                # again exactly after a restart, and the later ones planned anew (never skipped, never
                # twice, but possibly composed differently).
                self._pending.append(plan)
                if self.store is not None and len(self._pending) == 1:
                    self.store.save(self._committed, plan)
                return self._materialize(plan, head.batches + 1)
            if not follow or (deadline is not None and time.monotonic() >= deadline):
                return None
            time.sleep(poll_interval)

    # --- planning --------------------------------------------------------------------------------

    def _load(self, f: str) -> Tuple[pa.Table, Units, Optional[int]]:
        hit = self._cache.get(f)
        if hit is not None:
            return hit
        path = f"{self.base}/{f}"
        if f.endswith(".parquet"):
            with self.fs.open_input_file(path) as source:
                parquet = pq.ParquetFile(source)
                table = parquet.read()
                # trajflow's keys are in the footer's key-value metadata (not the embedded Arrow schema).
                meta = parquet.metadata.metadata or {}
        else:
            with self.fs.open_input_file(path) as source:
                arrow = ipc.open_file(source)
                table = arrow.read_all()
                meta = arrow.schema.metadata or {}
        uids = table.column("uid").to_pylist()
        sessions = table.column("session_id").to_pylist() if self.unit == "session" else None
        units: Units = []
        start = 0
        for i in range(1, len(uids) + 1):
            if (
                i == len(uids)
                or self.unit == "row"
                or uids[i] != uids[start]
                or (sessions is not None and sessions[i] != sessions[start])
            ):
                units.append((start, i, uids[start]))
                start = i
        low = meta.get(b"trajflow.low_water")
        # The newest files stay cached: a batch usually continues where the last one stopped.
        if len(self._cache) >= 4:
            self._cache.pop(next(iter(self._cache)))
        self._cache[f] = (table, units, None if low is None else int(low))
        return self._cache[f]

    def _current_policy(self) -> Optional[int]:
        v = self.policy_version
        return v() if callable(v) else v

    def _plan(self, head: Cursor, final: bool) -> Optional[Pending]:
        marks = dict(head.marks)
        done = dict(head.done)
        listed = self.lister.list(marks)
        _raise_marks(listed, done, marks)
        files = [f.path for f in listed if f.path not in done and not _below_mark(f.path, marks)]
        if head.current is not None and head.current in files:
            files.remove(head.current)
            files.insert(0, head.current)
        plan: Plan = []
        stats = {"rows": 0, "tokens": 0, "units": 0, "stale_units": 0, "other_shards_units": 0}
        policy = self._current_policy() if self.max_policy_lag is not None else None
        for f in files:
            table, units, low = self._load(f)
            row = head.row if f == head.current else 0
            tokens = None
            if self.batch_tokens is not None:
                tokens = pc.add(pc.list_value_length(table.column("prompt_ids")), pc.list_value_length(table.column("response_ids"))).to_pylist()
            versions = table.column("weight_version_min").to_pylist() if policy is not None else None
            for start, end, uid in units:
                if start < row:
                    continue
                if self.world_size > 1 and shard_of(uid, self.world_size) != self.rank:
                    stats["other_shards_units"] += 1
                elif policy is not None and any(v is not None and v < policy - self.max_policy_lag for v in versions[start:end]):
                    stats["stale_units"] += 1
                else:
                    if plan and plan[-1][0] == f and plan[-1][2] == start:
                        plan[-1] = (f, plan[-1][1], end)
                    else:
                        plan.append((f, start, end))
                    stats["rows"] += end - start
                    stats["units"] += 1
                    stats["tokens"] += sum(tokens[start:end]) if tokens is not None else 0
                if self._full(stats):
                    if end == table.num_rows:
                        done[f] = low
                        after = Cursor(done, None, 0, head.batches + 1, marks)
                    else:
                        after = Cursor(done, f, end, head.batches + 1, marks)
                    return Pending(plan, after, stats)
            done[f] = low
        if final and plan:
            return Pending(plan, Cursor(done, None, 0, head.batches + 1, marks), stats)
        return None

    def _full(self, stats: Dict[str, int]) -> bool:
        if self.batch_rows is not None:
            return stats["rows"] >= self.batch_rows
        if self.batch_tokens is not None:
            return stats["tokens"] >= self.batch_tokens
        return stats["units"] >= self.batch_units

    def _materialize(self, p: Pending, seq: int) -> Batch:
        parts = [self._load(f)[0].slice(start, end - start) for f, start, end in p.plan]
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        return Batch(table.combine_chunks(), p.plan, p.after, seq, dict(p.stats))


def _raise_marks(listed: List[DataFile], done: Dict[str, Optional[int]], marks: Dict[str, int]) -> None:
    """Moves lanes' marks up past what is read, and forgets the names below them.

    A file read in an earlier round, with low water ``w``: every file of its lane positioned below ``w``
    was committed before it (files.py), so this listing, made after that file was seen, shows them all.
    Below both ``w`` and the lowest unread file of the lane listed now, everything is read: the mark can
    move there.
    """
    unread: Dict[str, int] = {}
    for f in listed:
        lane = lane_of(f.path)
        if lane is not None and f.path not in done:
            unread[lane[0]] = min(unread.get(lane[0], lane[1]), lane[1])
    for name, low in done.items():
        lane = lane_of(name)
        if low is None or lane is None:
            continue
        candidate = min(low, unread.get(lane[0], low))
        if candidate > marks.get(lane[0], 0):
            marks[lane[0]] = candidate
    for name in [n for n in done if _below_mark(n, marks)]:
        del done[name]


def _below_mark(name: str, marks: Dict[str, int]) -> bool:
    lane = lane_of(name)
    return lane is not None and lane[1] < marks.get(lane[0], 0)
