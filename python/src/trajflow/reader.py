"""Follow an output directory and hand a trainer batches, each row exactly once.

    reader = TrajectoryReader("out/", cursor="ckpt/trajflow-journal.json", batch_units=8, unit="group")
    reader.load_state_dict(checkpoint.get("data"))   # None (no checkpoint yet): from the beginning
    for batch in reader.batches(follow=True):
        loss = train_step(batch.to_verl())
        reader.commit(batch)            # after the optimizer step
        if step % 100 == 0:
            save_checkpoint({"model": ..., "data": reader.state_dict()})

- Only committed files are read, in a deterministic order (files.py); dead letters never.
- A batch holds whole *units*: rows (``unit="row"``), a session's rows (``"session"``), or a GRPO group,
  the rows trajflow wrote together for one uid (``"group"``): a unit is never split across batches.
  Its size is counted in rows, tokens or units: it closes once the count reaches the target.
- Across data-parallel ranks (``rank``, ``world_size``), step by step by default (``sync="step"``): rank 0
  plans the job's global batch for each step and broadcasts it (collective.py); every rank takes its part,
  whole units balanced by tokens (balance.py). Every rank gets a batch at every step, or none does. The
  older ``sync="uid"`` shards by uid (a stable CRC-32) with no talk between ranks: disjoint and complete,
  but the ranks' numbers of batches differ, so an SPMD trainer following a live output can hang.
- Staleness at read time: with ``max_policy_lag``, a unit with a row older than ``policy_version -
  max_policy_lag`` is skipped (counted in the batch's stats), against the trainer's current version.
- Exactly once, with the trainer's checkpoint as the truth: reading resumes after the cursor the
  checkpoint holds (``state_dict()`` / ``load_state_dict``), from the beginning without one, whatever the
  cursor file says (``resume="file"`` continues from the file's last commit instead). Every batch's plan is
  journaled in the cursor file before the batch is returned (cursor.py), so the batches after the
  checkpoint are delivered again exactly, the same rows in the same batches, whatever the kill point
  (delivered, committed, checkpointed) and the checkpoint interval.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from . import balance
from .batch import Batch, shard_of
from .collective import Broadcast, default_broadcast
from .cursor import Cursor, CursorStore, Journal, Pending, Plan, below_mark, raise_marks
from .datafile import Loaded, load_units, read_data_file
from .files import Lister

__all__ = ["Batch", "TrajectoryReader", "shard_of"]


class TrajectoryReader:
    """Batches of an output directory (or S3 prefix) for a trainer, each row exactly once.

    Args:
        root: the output directory, or a pyarrow filesystem URI (``s3://bucket/prefix``).
        filesystem: a pyarrow filesystem to read ``root`` through (default: from the URI, or local).
        cursor: the cursor file (a path or URI, or a ``CursorStore``): the journal of the batches handed
            out, so that a trainer restarted from its checkpoint gets the batches after it again exactly,
            and the last committed cursor. None keeps them in memory only (batches after a checkpoint are
            then planned anew: every row still once). With ``sync="step"`` only rank 0 reads and writes
            it: give every rank the same arguments.
        resume: where reading starts until ``load_state_dict`` says otherwise: ``"checkpoint"`` (default)
            at the beginning of the output, as a trainer without a checkpoint must, whatever the cursor
            file holds; ``"file"`` after the cursor file's last commit, for a consumer that keeps no model
            state (an evaluator, an exporter) and commits where its work is durable.
        journal_batches: at most this many batches are kept in the journal (older committed ones are
            forgotten first). The journal keeps every batch after the second-to-last ``state_dict()``
            call (or the cursor resumed from), so a trainer that checkpoints more rarely than this many
            batches, or whose checkpoint is older than that, gets the batches after it planned anew.
        batch_rows, batch_tokens, batch_units: exactly one; a batch closes once it holds this many rows,
            tokens (prompt + response) or units. With ``sync="step"`` this is the size of the job's
            global batch for a step, shared by the ranks; with ``sync="uid"``, of each rank's batch.
        unit: what is never split: ``"row"``, ``"session"`` (default) or ``"group"`` (a GRPO group).
        rank, world_size: this process's data-parallel rank and the number of ranks.
        sync: how ranks share the data (docs/trainers.md): ``"step"`` (default) gives every rank its
            part of the same global batch at every step, whole units balanced by tokens, agreed through
            ``collective``; ``"uid"`` shards by uid (CRC-32 modulo ``world_size``) without any talk
            between ranks, so ranks get different numbers of batches.
        collective: ``sync="step"`` with ``world_size > 1``: a broadcast from rank 0
            (``trajflow.collective.torch_broadcast(group)``); default: torch.distributed's default group,
            which must be initialised with this ``rank`` and ``world_size``.
        sync_interval: ``sync="step"``: while rank 0 waits for data, every this many seconds it tells the
            other ranks it still waits (one broadcast each), so no collective lasts long enough to reach
            torch.distributed's timeout, whatever the wait.
        max_tokens_per_micro_batch: split each batch (this rank's part) into micro-batches of at most
            this many tokens, balanced, as few as the balanced split allows, never splitting a row (a
            longer row is a micro-batch of its own): ``batch.micro_batches``. With ``sync="step"`` every
            rank gets the same number, the most any rank needs.
        policy_version, max_policy_lag: skip units with a row older than ``policy_version -
            max_policy_lag`` (an int, or a function read at each batch; on rank 0 only with
            ``sync="step"``).
        rediscover_s: on S3, how often the whole prefix is listed to find new lanes (files.py).
    """

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
        sync: str = "step",
        collective: Optional[Broadcast] = None,
        sync_interval: float = 1.0,
        max_tokens_per_micro_batch: Optional[int] = None,
        policy_version: Union[int, Callable[[], Optional[int]], None] = None,
        max_policy_lag: Optional[int] = None,
        rediscover_s: float = 30.0,
        resume: str = "checkpoint",
        journal_batches: int = 1000,
    ):
        sizes = [s for s in (batch_rows, batch_tokens, batch_units) if s is not None]
        if len(sizes) != 1 or sizes[0] <= 0:
            raise ValueError("give exactly one positive batch size: batch_rows, batch_tokens or batch_units")
        if unit not in ("row", "session", "group"):
            raise ValueError(f"unit must be row, session or group, not {unit!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        if sync not in ("step", "uid"):
            raise ValueError(f"sync must be step or uid, not {sync!r}")
        if max_policy_lag is not None and policy_version is None:
            raise ValueError("max_policy_lag needs policy_version (an int, or a function returning it)")
        if max_tokens_per_micro_batch is not None and max_tokens_per_micro_batch <= 0:
            raise ValueError("max_tokens_per_micro_batch must be positive")
        if resume not in ("checkpoint", "file"):
            raise ValueError(f"resume must be checkpoint or file, not {resume!r}")
        if journal_batches < 1:
            raise ValueError("journal_batches must be at least 1")
        self.root = root
        self.lister = Lister(root, filesystem, rediscover_s)
        self.fs, self.base = self.lister.fs, self.lister.base
        self.store = CursorStore(cursor) if isinstance(cursor, str) else cursor
        self.batch_rows, self.batch_tokens, self.batch_units = batch_rows, batch_tokens, batch_units
        self.unit = unit
        self.rank, self.world_size = rank, world_size
        self.sync = sync
        self.sync_interval = sync_interval
        self.max_tokens_per_micro_batch = max_tokens_per_micro_batch
        self._broadcast: Optional[Broadcast] = None
        # A single rank reads as it always did: plans of merged ranges, no per-unit tokens (a later
        # restart on several ranks splits such a pending batch by unit, _unitized).
        self._step = sync == "step" and world_size > 1
        if self._step:
            self._broadcast = collective if collective is not None else default_broadcast(rank, world_size)
            if rank != 0:
                # One cursor for the job, kept by rank 0: the others learn each step's batch, and the
                # committed cursor, from its broadcasts. Two writers of one file could only disagree.
                self.store = None
        self.policy_version = policy_version
        self.max_policy_lag = max_policy_lag
        self.resume = resume
        self.journal_batches = journal_batches
        stored, journal = (Cursor(), Journal()) if self.store is None else self.store.load()
        # The cursor file's last commit (where resume="file" starts) and its journal.
        self._stored: Cursor = stored
        self._journal: Journal = journal
        self._cache: Dict[str, Loaded] = {}
        self._committed: Cursor = Cursor()
        # Batches handed out and not committed yet, oldest first.
        self._pending: List[Pending] = []
        # Journaled batches after the cursor resumed from, to hand out again before planning new ones.
        self._redeliver: List[Pending] = []
        # The batch counts of the cursors that may be in a durable checkpoint: the one resumed from, then
        # the last state_dict() calls. The journal keeps what follows the older of the last two.
        self._checkpoints: List[int] = [0]
        self._resume(stored if resume == "file" else Cursor())

    # --- the cursor ------------------------------------------------------------------------------

    @property
    def cursor(self) -> Cursor:
        """The committed cursor."""
        return self._committed

    def state_dict(self) -> Dict:
        """The committed cursor, for the trainer's checkpoint (the same on every rank with sync="step").

        Call it when you checkpoint (not for logging): the journal keeps the batches after the cursor of
        the second-to-last call, so that a restart from the last checkpoint, or from the one before it
        when the last one's write died with the process, gets its batches again exactly."""
        b = self._committed.batches
        if self._checkpoints[-1] != b:
            self._checkpoints = [self._checkpoints[-1], b]
        return {"trajflow_cursor": self._committed.to_json()}

    def load_state_dict(self, state: Optional[Dict]) -> None:
        """Resumes after a checkpoint's cursor: the batches handed out after it are delivered again, and
        nothing before it is.

        ``None`` (no checkpoint yet, as at step 0) starts from the beginning of the output, or with
        ``resume="file"`` after the cursor file's last commit: pass ``checkpoint.get("data")`` without
        an ``if``. The batches after the cursor come again exactly as they were first delivered when the
        journal holds them (it holds those since the checkpoint before the last, or since the cursor
        resumed from), else they are planned anew. With sync="step", call it on every rank (rank 0's
        counts).
        """
        if state is None:
            self._resume(self._stored if self.resume == "file" else Cursor())
            return
        if not isinstance(state, dict) or "trajflow_cursor" not in state:
            raise ValueError(
                "load_state_dict takes what state_dict() returned ({'trajflow_cursor': ...}) or None for no "
                f"checkpoint, not {type(state).__name__}"
            )
        self._resume(Cursor.from_json(state["trajflow_cursor"]))

    def _resume(self, cursor: Cursor) -> None:
        """Reading goes on after ``cursor``: first the journal's batches after it, exactly as they were
        delivered; past them (or when the journal does not hold ``cursor``), batches planned anew."""
        self._committed = cursor
        self._pending = []
        again = self._journal.since(cursor)
        self._redeliver = [] if again is None else again
        self._checkpoints = [cursor.batches]

    def _record(self, head: Cursor, p: Pending) -> None:
        """Journals a batch planned from ``head`` before it is handed out (a journal that does not end at
        ``head``, after a resume from outside it, starts again there)."""
        if self.store is None:
            return
        j = self._journal
        if (j.batches[-1].after if j.batches else j.base) != head:
            self._journal = Journal(head, [])
        self._journal.batches.append(p)
        self._save()

    def _save(self) -> None:
        floor = self._checkpoints[-2] if len(self._checkpoints) > 1 else self._checkpoints[0]
        batches = self._journal.batches
        excess = len(batches) - self.journal_batches
        if excess > 0:
            floor = max(floor, min(batches[excess - 1].after.batches, self._committed.batches))
        self._journal.drop_through(floor)
        self.store.save(self._committed, self._journal)

    def commit(self, batch: Batch) -> None:
        """The trainer is done with ``batch`` (after its optimizer step): it is never delivered again.

        With sync="step" every rank commits its part of the step; rank 0 writes the job's cursor."""
        if not self._pending or self._pending[0].after != batch.after:
            raise ValueError("commit batches in the order they were delivered, each once")
        self._pending.pop(0)
        self._committed = batch.after
        if self.store is not None:
            self._save()

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
        """The next batch; None when there is none (without ``follow``: a last partial batch first).

        ``follow``: wait for files until a full batch is there, looking every ``poll_interval`` seconds,
        at most ``timeout`` seconds (None: for ever). With sync="step" every rank must call it at every
        step; rank 0's ``follow`` and ``timeout`` decide, and every rank returns a batch or every rank
        returns None.
        """
        if self._broadcast is not None:
            return self._next_step(follow, poll_interval, timeout)
        entered = time.monotonic()
        if self._redeliver:
            p = self._unitized(self._redeliver.pop(0))
            self._pending.append(p)
            return self._materialize(p, p.after.batches, 0.0, entered)
        deadline = None if timeout is None else entered + timeout
        while True:
            head = self._pending[-1].after if self._pending else self._committed
            plan = self._plan(head, final=not follow)
            if plan is not None:
                # Journaled before it is handed out: a trainer killed after this, at any point, gets it
                # again exactly when it restarts from a checkpoint before it.
                self._pending.append(plan)
                self._record(head, plan)
                return self._materialize(plan, plan.after.batches, time.monotonic() - entered, entered)
            if not follow or (deadline is not None and time.monotonic() >= deadline):
                return None
            time.sleep(poll_interval)

    def _next_step(self, follow: bool, poll_interval: float, timeout: Optional[float]) -> Optional[Batch]:
        """One step of a step-synchronized job: rank 0 decides, everyone hears the same decision.

        Rank 0 alone lists the files and plans (the others would see the committed files at other
        moments, and a file landing late can sort before ones already seen, in another Kafka partition or
        below a lane's last file: no listing-derived rule is safe without agreeing on the listing). It
        sends one message per step, "batch" (the global plan with each unit's tokens) or "end" (no
        input left, or its deadline passed), after any number of "wait" messages. Every rank derives its
        part from the plan alone, so the split needs no more talk, and a restart with another world size
        splits the same pending batch anew.
        """
        entered = time.monotonic()
        if self.rank != 0:
            while True:
                msg = self._broadcast(None)
                if msg["kind"] != "wait":
                    break
            if msg["kind"] == "error":
                raise RuntimeError(f"rank 0 could not plan the next step: {msg['error']}")
            if not self._pending:
                # Mirror rank 0's committed cursor, for state_dict() in per-rank checkpoints.
                self._committed = Cursor.from_json(msg["committed"])
            if msg["kind"] == "end":
                return None
            p = Pending.from_json(msg["pending"])
            self._pending.append(p)
            return self._materialize(p, msg["seq"], msg["waited"], entered)
        deadline = None if timeout is None else entered + timeout
        told = entered
        while True:
            try:
                p, seq = self._step_plan(follow)
            except Exception as e:
                # The others are waiting in the broadcast: tell them, so the job fails now everywhere
                # instead of at the collective's timeout.
                self._broadcast({"kind": "error", "error": f"{type(e).__name__}: {e}"})
                raise
            now = time.monotonic()
            msg = {"committed": self._committed.to_json(), "waited": now - entered}
            if p is not None:
                msg.update(kind="batch", pending=p.to_json(), seq=seq)
            elif not follow or (deadline is not None and now >= deadline):
                msg.update(kind="end")
            elif now - told >= self.sync_interval:
                msg.update(kind="wait")
                told = now
            else:
                time.sleep(min(poll_interval, max(0.0, told + self.sync_interval - now)))
                continue
            self._broadcast(msg)
            if msg["kind"] == "end":
                return None
            if msg["kind"] == "batch":
                return self._materialize(p, seq, msg["waited"], entered)

    def _step_plan(self, follow: bool) -> Tuple[Optional[Pending], int]:
        """Rank 0: a journaled batch after the cursor resumed from, else the next one if the files hold it."""
        if self._redeliver:
            p = self._unitized(self._redeliver.pop(0))
            self._pending.append(p)
            return p, p.after.batches
        head = self._pending[-1].after if self._pending else self._committed
        p = self._plan(head, final=not follow)
        if p is not None:
            self._pending.append(p)
            self._record(head, p)
        return p, head.batches + 1

    # --- planning --------------------------------------------------------------------------------

    def _load(self, f: str) -> Loaded:
        hit = self._cache.get(f)
        if hit is not None:
            return hit
        table, meta = read_data_file(self.fs, f"{self.base}/{f}")
        loaded = load_units(table, meta, self.unit)
        # The newest files stay cached: a batch usually continues where the last one stopped.
        if len(self._cache) >= 4:
            self._cache.pop(next(iter(self._cache)))
        self._cache[f] = loaded
        return loaded

    def _current_policy(self) -> Optional[int]:
        v = self.policy_version
        return v() if callable(v) else v

    def _plan(self, head: Cursor, final: bool) -> Optional[Pending]:
        marks = dict(head.marks)
        done = dict(head.done)
        listed = self.lister.list(marks)
        raise_marks(listed, done, marks)
        files = [f.path for f in listed if f.path not in done and not below_mark(f.path, marks)]
        if head.current is not None and head.current in files:
            files.remove(head.current)
            files.insert(0, head.current)
        step = self._step
        plan: Plan = []
        # sync="step": one entry per unit with its rows' tokens, from which each rank takes its part.
        unit_tokens: Optional[List[List[int]]] = [] if step else None
        stats = {"rows": 0, "tokens": 0, "units": 0, "stale_units": 0, "other_shards_units": 0}
        policy = self._current_policy() if self.max_policy_lag is not None else None
        for f in files:
            table, units, low, tokens = self._load(f)
            row = head.row if f == head.current else 0
            versions = table.column("weight_version_min").to_pylist() if policy is not None else None
            for start, end, uid in units:
                if start < row:
                    continue
                if not step and self.world_size > 1 and shard_of(uid, self.world_size) != self.rank:
                    stats["other_shards_units"] += 1
                elif policy is not None and any(v is not None and v < policy - self.max_policy_lag for v in versions[start:end]):
                    stats["stale_units"] += 1
                else:
                    if unit_tokens is not None:
                        plan.append((f, start, end))
                        unit_tokens.append(tokens[start:end])
                    elif plan and plan[-1][0] == f and plan[-1][2] == start:
                        plan[-1] = (f, plan[-1][1], end)
                    else:
                        plan.append((f, start, end))
                    stats["rows"] += end - start
                    stats["units"] += 1
                    stats["tokens"] += sum(tokens[start:end])
                if self._full(stats):
                    if end == table.num_rows:
                        done[f] = low
                        after = Cursor(done, None, 0, head.batches + 1, marks)
                    else:
                        after = Cursor(done, f, end, head.batches + 1, marks)
                    return Pending(plan, after, stats, unit_tokens)
            done[f] = low
        if final and plan:
            return Pending(plan, Cursor(done, None, 0, head.batches + 1, marks), stats, unit_tokens)
        return None

    def _unitized(self, p: Pending) -> Pending:
        """A pending batch kept by a single-rank or sync="uid" reader (one range may hold several units,
        and no tokens), as one entry per unit with its tokens: the same rows, split across the ranks."""
        if not self._step or p.tokens is not None:
            return p
        plan: Plan = []
        tokens: List[List[int]] = []
        for f, first, last in p.plan:
            _, units, _, row_tokens = self._load(f)
            for start, end, _ in units:
                if start < last and end > first:
                    plan.append((f, max(start, first), min(end, last)))
                    tokens.append(row_tokens[max(start, first) : min(end, last)])
        return Pending(plan, p.after, p.stats, tokens)

    def _full(self, stats: Dict[str, int]) -> bool:
        if self.batch_rows is not None:
            return stats["rows"] >= self.batch_rows
        if self.batch_tokens is not None:
            return stats["tokens"] >= self.batch_tokens
        return stats["units"] >= self.batch_units

    def _materialize(self, p: Pending, seq: int, waited: float, entered: float) -> Batch:
        stats = dict(p.stats)
        rank_tokens: List[int] = []
        bound = 0
        if self._step:
            unit_tokens = [sum(t) for t in p.tokens]
            ranks = balance.assign(unit_tokens, self.world_size)
            rank_tokens = balance.loads(unit_tokens, ranks, self.world_size)
            bound = balance.lower_bound(unit_tokens, self.world_size)
            mine = [i for i, r in enumerate(ranks) if r == self.rank]
            ranges = [p.plan[i] for i in mine]
            stats.update(
                {f"global_{k}": stats.get(k, 0) for k in ("rows", "tokens", "units")},
                rows=sum(len(p.tokens[i]) for i in mine),
                tokens=rank_tokens[self.rank],
                units=len(mine),
            )
        else:
            ranks, ranges = [], p.plan
        if ranges:
            parts = [self._load(f)[0].slice(start, end - start) for f, start, end in ranges]
            table = (pa.concat_tables(parts) if len(parts) > 1 else parts[0]).combine_chunks()
        else:
            # This rank's part of the step is empty (fewer units than ranks): same schema, no rows.
            table = self._load(p.plan[0][0])[0].slice(0, 0)
        batch = Batch(table, p.plan, p.after, seq, stats, waited, 0.0, rank_tokens, bound)
        if self.max_tokens_per_micro_batch is not None:
            batch.micro_batch_rows = self._micro_batch_rows(p, ranks, table)
            batch.micro_batches = [table.take(pa.array(rows, pa.int64())) for rows in batch.micro_batch_rows]
            stats["micro_batches"] = len(batch.micro_batches)
        batch.blocked_s = time.monotonic() - entered
        return batch

    def _micro_batch_rows(self, p: Pending, ranks: List[int], table: pa.Table) -> List[List[int]]:
        limit = self.max_tokens_per_micro_batch
        if self._step:
            # Every rank's rows are known from the plan: all ranks agree on the largest count needed,
            # since FSDP and DDP's gradient accumulation take a collective per micro-batch.
            per_rank: List[List[int]] = [[] for _ in range(self.world_size)]
            for i, r in enumerate(ranks):
                per_rank[r].extend(p.tokens[i])
            count = max(balance.micro_batch_count(t, limit) for t in per_rank)
            mine = per_rank[self.rank]
        else:
            mine = pc.add(
                pc.list_value_length(table.column("prompt_ids")), pc.list_value_length(table.column("response_ids"))
            ).to_pylist()
            count = balance.micro_batch_count(mine, limit)
        return balance.micro_batches(mine, count)
