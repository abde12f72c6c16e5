"""Many ranks, one job: every rank gets its part of every step, balanced by tokens, each row once.

In-process tests drive the ranks of one job in turn through a queued broadcast (rank 0 first, as the
collective would order them); the last test runs 4 real processes with torch.distributed (gloo)
following a live output, kills them all and resumes on 2.
"""
import copy
import itertools
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from trajflow import TrajectoryReader
from trajflow import balance

from conftest import grouped_replay, need_module, trajflow, write_events

LOOP = str(Path(__file__).with_name("spmd_loop.py"))


class LocalJob:
    """The ranks of one job in one process: what rank 0 broadcasts is queued for each other rank, which
    takes it when it calls. A rank calling with nothing queued would hang in a real job: here it raises."""

    def __init__(self, world):
        self.world = world
        self.queues = [deque() for _ in range(world)]
        self.sent = []

    def collective(self, rank):
        def broadcast(obj):
            if rank == 0:
                self.sent.append(obj["kind"])
                for q in self.queues[1:]:
                    q.append(copy.deepcopy(obj))  # as pickled through a real collective
                return obj
            return self.queues[rank].popleft()

        return broadcast

    def readers(self, out, **kwargs):
        return [
            TrajectoryReader(str(out), rank=r, world_size=self.world, collective=self.collective(r), **kwargs)
            for r in range(self.world)
        ]


def step(readers, **kwargs):
    """One step on every rank, rank 0 first: each rank's batch, or None from all of them."""
    batches = [r.next_batch(**kwargs) for r in readers]
    assert all(b is None for b in batches) or all(b is not None for b in batches), "ranks disagree on the step"
    return None if batches[0] is None else batches


def all_keys(out):
    return sorted(ds.dataset(str(out), format="parquet", exclude_invalid_files=True).to_table().column("key").to_pylist())


def best_split(tokens, world):
    """The least possible load of the most loaded rank (exhaustive, with the usual symmetry cuts)."""
    order = sorted(tokens, reverse=True)
    if len(order) <= world:
        return max(order, default=0)
    best = [sum(order) + 1]
    loads = [0] * world

    def place(i):
        if i == len(order):
            best[0] = min(best[0], max(loads))
            return
        seen = set()
        for r in range(world):
            if loads[r] in seen or loads[r] + order[i] >= best[0]:
                continue
            seen.add(loads[r])
            loads[r] += order[i]
            place(i + 1)
            loads[r] -= order[i]

    place(0)
    return best[0]


def group_tokens(keys_by_rank, tokens_of):
    """Tokens of each GRPO group of a step, from the rows the ranks received."""
    groups = {}
    for keys in keys_by_rank:
        for k in keys:
            uid = k.rsplit("_", 2)[0]
            groups[uid] = groups.get(uid, 0) + tokens_of[k]
    return list(groups.values())


def tokens_by_key(out):
    t = ds.dataset(str(out), format="parquet", exclude_invalid_files=True).to_table()
    import pyarrow.compute as pc

    n = pc.add(pc.list_value_length(t.column("prompt_ids")), pc.list_value_length(t.column("response_ids")))
    return dict(zip(t.column("key").to_pylist(), n.to_pylist()))


@pytest.fixture(scope="module")
def output_400(tmp_path_factory):
    """400 GRPO groups of 4 (the figure in issue 38: 5 groups per batch, 3 ranks)."""
    return grouped_replay(tmp_path_factory.mktemp("g400"), uids=400, rows_per_file=40)


def test_uid_shards_take_unequal_steps_and_step_sync_equal_ones(output_400):
    everything = all_keys(output_400)
    # Before: sharded by uid, the ranks take different numbers of steps (a follower would hang in the
    # gradient all-reduce of the steps the others never reach).
    steps = []
    for rank in range(3):
        reader = TrajectoryReader(str(output_400), batch_units=5, unit="group", rank=rank, world_size=3, sync="uid")
        n = 0
        for b in reader.batches():
            n += 1
            reader.commit(b)
        steps.append(n)
    assert steps == [29, 24, 28]
    # After: the same 400 groups, 5 per step across the 3 ranks: 80 steps on each rank, every row once.
    job = LocalJob(3)
    readers = job.readers(output_400, batch_units=5, unit="group")
    seen = [[] for _ in range(3)]
    seqs = 0
    excess = []
    while (batches := step(readers)) is not None:
        seqs += 1
        assert {b.seq for b in batches} == {seqs}
        # Whole groups: each uid's 4 rollouts on one rank.
        for r, b in enumerate(batches):
            uids = b.table.column("uid").to_pylist()
            assert all(uids.count(u) == 4 for u in set(uids))
            assert b.rank_tokens == batches[0].rank_tokens and b.stats["tokens"] == b.rank_tokens[r]
        assert sum(b.stats["units"] for b in batches) == 5
        for r, b in enumerate(batches):
            seen[r].extend(b.keys)
            readers[r].commit(b)
        excess.append(batches[0].imbalance)
    assert seqs == 80
    assert set(job.sent) == {"batch", "end"} and job.sent.count("batch") == 80
    flat = [k for keys in seen for k in keys]
    assert sorted(flat) == everything and len(flat) == len(set(flat))
    # Five groups on three ranks: one rank has one group, the others two; the split is reported.
    assert all(e >= 0 for e in excess)


def test_balanced_split_is_within_ten_percent_of_the_best():
    # Equal units go round the ranks in their order: every rank breaks ties alike.
    assert balance.assign([5] * 7, 3) == [0, 1, 2, 0, 1, 2, 0]
    rng = random.Random(38)
    for case in range(60):
        world = rng.choice([2, 3, 4])
        n = rng.randrange(world, 11)
        tokens = [rng.randrange(50, 2000) for _ in range(n)]
        ranks = balance.assign(tokens, world)
        got = max(balance.loads(tokens, ranks, world))
        best = best_split(tokens, world)
        assert got >= best >= balance.lower_bound(tokens, world)
        assert got <= 1.1 * best, (case, tokens, world, got, best)


def test_micro_batches_keep_under_the_limit_and_are_as_many_on_every_rank(output_400):
    job = LocalJob(3)
    readers = job.readers(output_400, batch_units=7, unit="group", max_tokens_per_micro_batch=300)
    for _ in range(5):
        batches = step(readers)
        counts = {len(b.micro_batches) for b in batches}
        assert len(counts) == 1, "ranks disagree on the number of micro-batches"
        for b in batches:
            tokens = dict(zip(b.keys, (len(p) + len(r) for p, r in zip(
                b.table.column("prompt_ids").to_pylist(), b.table.column("response_ids").to_pylist()))))
            keys = [k for m in b.micro_batches for k in m.column("key").to_pylist()]
            assert sorted(keys) == sorted(b.keys), "a row was lost or split"
            assert keys == [b.keys[i] for rows in b.micro_batch_rows for i in rows]
            for m in b.micro_batches:
                assert sum(tokens[k] for k in m.column("key").to_pylist()) <= 300 or m.num_rows == 1
        # The count is the fewest that fits the most loaded rank.
        need = max(balance.micro_batch_count(_row_tokens(b), 300) for b in batches)
        assert counts == {need}
        for r, b in enumerate(batches):
            readers[r].commit(b)
    # One rank (no collective): the same split of its batch.
    alone = TrajectoryReader(str(output_400), batch_units=7, unit="group", max_tokens_per_micro_batch=300)
    b = alone.next_batch()
    assert len(b.micro_batches) == balance.micro_batch_count(_row_tokens(b), 300)
    assert sorted(k for m in b.micro_batches for k in m.column("key").to_pylist()) == sorted(b.keys)


def _row_tokens(batch):
    return [len(p) + len(r) for p, r in zip(batch.table.column("prompt_ids").to_pylist(), batch.table.column("response_ids").to_pylist())]


def test_a_pending_step_is_redelivered_the_same_to_a_job_of_another_size(output_400, tmp_path):
    cursor = str(tmp_path / "cursor.json")
    four = LocalJob(4).readers(output_400, cursor=cursor, batch_units=8, unit="group")
    first = step(four)
    for r, b in zip(four, first):
        r.commit(b)
    checkpoint = four[0].state_dict()
    second = step(four)  # every rank dies during this step
    two = LocalJob(2).readers(output_400, cursor=cursor, batch_units=8, unit="group")
    for r in two:
        r.load_state_dict(checkpoint)
    again = step(two)
    assert [b.seq for b in again] == [2, 2]
    assert sorted(k for b in again for k in b.keys) == sorted(k for b in second for k in b.keys)
    assert sum(b.stats["units"] for b in again) == 8
    rest = [k for b in again for k in b.keys]
    for r, b in zip(two, again):
        r.commit(b)
    while (batches := step(two)) is not None:
        for r, b in zip(two, batches):
            rest.extend(b.keys)
            r.commit(b)
    got = [k for b in first for k in b.keys] + rest
    assert sorted(got) == all_keys(output_400) and len(got) == len(set(got))


def test_a_step_waits_for_data_on_every_rank_and_reports_the_wait(tmp_path):
    events = write_events(tmp_path / "events.jsonl", uids=6, group_size=2)
    staged = tmp_path / "staged"
    trajflow("replay", str(events), "--out", str(staged), "--group", "--rows-per-file", "4", "--reward-grace-ms", "0")
    out = tmp_path / "out"
    out.mkdir()
    files = sorted(staged.glob("part-*.parquet"))
    assert len(files) == 3
    job = LocalJob(3)
    readers = job.readers(out, batch_units=6, unit="group", sync_interval=0.05)

    def publish():
        # Once rank 0 has told the others it waits, the files land (committed by rename, as trajflow does).
        deadline = time.monotonic() + 30
        while "wait" not in job.sent and time.monotonic() < deadline:
            time.sleep(0.005)
        for f in files:
            f.rename(out / f.name)

    t = threading.Thread(target=publish)
    t.start()
    batches = step(readers, follow=True, poll_interval=0.01, timeout=30)
    t.join()
    assert job.sent[-1] == "batch" and job.sent.count("wait") >= 1
    assert len({b.waited_s for b in batches}) == 1 and batches[0].waited_s >= 0.05
    assert sorted(k for b in batches for k in b.keys) == all_keys(out)
    for r, b in zip(readers, batches):
        r.commit(b)
    # Nothing more lands: rank 0's deadline ends the job for every rank, after telling them it waited.
    sent = len(job.sent)
    assert step(readers, follow=True, poll_interval=0.01, timeout=0.2) is None
    assert job.sent[sent:][-1] == "end" and all(q == deque() for q in job.queues)


def test_a_file_rank_0_cannot_read_fails_every_rank_at_once(grouped_output):
    (grouped_output / "part-99999.parquet").write_bytes(b"not parquet")
    job = LocalJob(3)
    readers = job.readers(grouped_output, batch_units=100, unit="group")
    with pytest.raises(Exception):
        readers[0].next_batch()
    for r in readers[1:]:
        with pytest.raises(RuntimeError, match="rank 0 could not plan the next step"):
            r.next_batch()


def test_step_sync_needs_a_way_for_the_ranks_to_agree(grouped_output):
    with pytest.raises(ValueError, match="sync='uid'"):
        TrajectoryReader(str(grouped_output), batch_units=2, rank=1, world_size=2)
    with pytest.raises(ValueError):
        TrajectoryReader(str(grouped_output), batch_units=2, sync="rank")


# --- four processes with torch.distributed -------------------------------------------------------------


def start_ranks(out, ckpt, world, *extra):
    init = ckpt / f"init-{world}-{time.monotonic_ns()}"
    return [
        subprocess.Popen([sys.executable, LOOP, str(out), str(ckpt), str(r), str(world), str(init), *extra],
                         stderr=subprocess.PIPE, text=True)
        for r in range(world)
    ]


def wait_for(condition, procs, what, limit=60):
    deadline = time.monotonic() + limit
    while not condition():
        failed = [p for p in procs if p.poll() not in (None, 0)]
        assert not failed, f"a rank failed while waiting for {what}: {failed[0].stderr.read()}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def rank_log(ckpt, world, rank):
    path = ckpt / f"rank-{world}-{rank}.log"
    # Whole lines only: the rank may be writing the next one.
    return [json.loads(line) for line in path.read_text().split("\n")[:-1]] if path.exists() else []


@pytest.mark.parametrize("pause_at", ["committed:2", "delivered:5"])
def test_four_ranks_follow_a_live_output_then_two_resume_after_all_are_killed(tmp_path, pause_at):
    need_module("torch.distributed", "the SPMD loop needs torch (pip install 'trajflow[torch]')")
    events = write_events(tmp_path / "events.jsonl", uids=64, group_size=4, seed=3)
    staged = tmp_path / "staged"
    trajflow("replay", str(events), "--out", str(staged), "--group", "--rows-per-file", "16", "--reward-grace-ms", "0")
    files = sorted(staged.glob("part-*.parquet"))
    assert len(files) == 16
    out = tmp_path / "out"
    out.mkdir()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    point, kill_at = pause_at.split(":")
    kill_at = int(kill_at)
    # Checkpoints every 3 steps: the job resumes at the step after its last checkpoint (none before step
    # 3: from the start), and every step after it comes again, the same global batches.
    resumed_at = 1 if kill_at <= 3 else 4

    # All killed while rank 0 stands at the named point of step kill_at (it waits there until killed: the
    # kill lands there however slow the machine).
    four = start_ranks(out, ckpt, 4, "--follow", "--idle", "60", "--batch-units", "8", "--micro-tokens", "200",
                       "--checkpoint-every", "3", "--pause-at", pause_at)
    stop = threading.Event()

    def publish():
        # The writer: files committed (renamed into place) one by one while the ranks read. trajflow's
        # sinks commit exactly so; a replay cannot itself write as it goes (it reads whole files, not a
        # pipe), so it writes to a staging directory first.
        for f in files:
            if stop.wait(0.25):
                return
            f.rename(out / f.name)

    try:
        wait_for(lambda: all((ckpt / f"ready-4-{r}").exists() for r in range(4)), four, "4 ranks to start")
        writer = threading.Thread(target=publish)
        writer.start()
        wait_for(lambda: (ckpt / "paused").exists(), four, f"rank 0 at {pause_at}")
        for p in four:
            p.send_signal(signal.SIGKILL)
        for p in four:
            p.wait(timeout=30)
        two = start_ranks(out, ckpt, 2, "--follow", "--idle", "4", "--batch-units", "8", "--micro-tokens", "200",
                          "--checkpoint-every", "3")
        writer.join()
        for p in two:
            assert p.wait(timeout=90) == 0, p.stderr.read()
    finally:
        stop.set()
        for p in [*four, *locals().get("two", [])]:
            if p.poll() is None:
                p.kill()
                p.wait()

    tokens_of = tokens_by_key(out)
    model = json.loads((ckpt / "model.json").read_text())
    trained = model["trained"]
    assert sorted(trained) == all_keys(out) and len(trained) == 256, "a row was lost or trained twice"
    assert model["steps"] == 8

    report = []
    delivered = {}
    for world in (4, 2):
        logs = [rank_log(ckpt, world, r) for r in range(world)]
        # Equal steps: every rank received the same steps (a kill may cut a rank's log one step short of
        # another's in the killed job, never in the one that finished).
        lengths = {len(log) for log in logs}
        if world == 2:
            assert len(lengths) == 1
        n = min(lengths)
        assert n >= 1
        for i in range(n):
            entries = [log[i] for log in logs]
            assert len({e["seq"] for e in entries}) == 1
            seq = entries[0]["seq"]
            keys = [e["keys"] for e in entries]
            flat = [k for ks in keys for k in ks]
            assert len(flat) == len(set(flat)), f"step {seq}: two ranks got the same row"
            # The all-reduce saw every rank's tokens, and they are the step's.
            assert {e["reduced"] for e in entries} == {sum(e["tokens"] for e in entries)} == {entries[0]["global_tokens"]}
            assert [e["tokens"] for e in entries] == entries[0]["rank_tokens"]
            # Balanced within 10 % of the best split of the step's whole groups.
            groups = group_tokens(keys, tokens_of)
            assert len(groups) == 8
            best = best_split(groups, world)
            assert max(e["tokens"] for e in entries) <= 1.1 * best, (seq, groups, entries[0]["rank_tokens"], best)
            assert len({len(e["micro"]) for e in entries}) == 1
            # A step delivered again after the kill is the same global batch, split for 2 ranks.
            if seq in delivered:
                assert sorted(flat) == delivered[seq], f"step {seq} changed after the restart"
            delivered[seq] = sorted(flat)
            report.append((world, seq, entries[0]["rank_tokens"], best, round(entries[0]["waited_s"], 3)))
    # Rank 0 had logged kill_at steps when the kill came; another rank may not have logged the last yet
    # (the logs checked above are cut to the shortest), so the killed job shows kill_at - 1 at least.
    assert len([r for r in report if r[0] == 4]) >= kill_at - 1
    # The kill landed in step kill_at: rank 0 logged it last (the other ranks may not have logged it yet
    # on a loaded host, so rank 0's own log says), and the restarted job began right after the checkpoint
    # and delivered the steps since again, the same global batches: rank 0's parts among the two ranks'.
    killed = rank_log(ckpt, 4, 0)
    assert killed[-1]["seq"] == kill_at, "no kill landed in the step"
    assert [e["seq"] for e in rank_log(ckpt, 2, 0)] == list(range(resumed_at, 9))
    for e in killed[resumed_at - 1 :]:
        assert set(e["keys"]) <= set(delivered[e["seq"]]), f"step {e['seq']} changed after the restart"
    assert sorted({r[1] for r in report}) == list(range(1, 9))
    print("\nworld seq rank_tokens best waited_s")
    for r in report:
        print(*r)


def test_a_step_with_fewer_units_than_ranks_gives_the_others_empty_parts(grouped_output):
    # 12 groups, 5 per step, 5 ranks: the last step has 2 groups, and 3 ranks an empty part of it that
    # they still receive (with the same columns), so they still reach the step's all-reduce.
    job = LocalJob(5)
    readers = job.readers(grouped_output, batch_units=5, unit="group", max_tokens_per_micro_batch=10_000)
    sizes = []
    keys = []
    while (batches := step(readers)) is not None:
        sizes.append([b.stats["units"] for b in batches])
        assert len({b.table.schema.remove_metadata() for b in batches}) == 1
        assert {len(b.micro_batches) for b in batches} == {1}
        for r, b in zip(readers, batches):
            keys.extend(b.keys)
            r.commit(b)
    assert sizes == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert sorted(keys) == all_keys(grouped_output)
