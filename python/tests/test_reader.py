"""The reader against real trajflow output: files, batches, groups, shards, staleness, exactly once."""
import json

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from trajflow import TrajectoryReader, list_data_files
from trajflow.reader import shard_of

from conftest import trajflow, write_events


def all_keys(out):
    return sorted(ds.dataset(str(out), format="parquet", exclude_invalid_files=True).to_table().column("key").to_pylist())


def test_lists_only_committed_data_files_in_order(grouped_output):
    files = [f.path for f in list_data_files(str(grouped_output))]
    assert (grouped_output / "_dead-letter").is_dir(), "the fixture has a dead letter"
    assert files == sorted(files) and all(f.startswith("part-") for f in files)
    assert not any("dead-letter" in f or f.startswith(".") for f in files)
    assert len(files) >= 5
    # Regression: the documented plain reader crashed on dead-letter/ (JSON lines) beside the data.
    assert ds.dataset(str(grouped_output), format="parquet").count_rows() == 48


def test_every_row_once_in_batches_of_whole_groups(grouped_output):
    reader = TrajectoryReader(str(grouped_output), batch_units=3, unit="group")
    seen = []
    for batch in reader.batches():
        uids = batch.table.column("uid").to_pylist()
        # Whole groups: every uid's 4 rollouts together.
        assert all(uids.count(u) == 4 for u in set(uids)), uids
        assert batch.stats["units"] == 3
        seen.extend(batch.keys)
        reader.commit(batch)
    assert sorted(seen) == all_keys(grouped_output)
    assert len(seen) == 48
    assert reader.next_batch() is None


def test_batches_by_rows_and_tokens_never_split_a_unit(grouped_output):
    rows = TrajectoryReader(str(grouped_output), batch_rows=6, unit="group")
    sizes = []
    for b in rows.batches():
        sizes.append(b.num_rows)
        rows.commit(b)
    assert sizes == [8] * 6, "6 rows round up to two whole groups of 4"
    tokens = TrajectoryReader(str(grouped_output), batch_tokens=200, unit="session")
    batches = []
    for b in tokens.batches():
        batches.append(b)
        tokens.commit(b)
    assert len(batches) > 2
    assert all(b.stats["tokens"] >= 200 for b in batches[:-1]), "only the last batch may be short"
    sessions = [(u, s) for b in batches for u, s in set(zip(b.table.column("uid").to_pylist(), b.table.column("session_id").to_pylist()))]
    assert len(sessions) == len(set(sessions)) == 48, "a session was split across batches"


def test_shards_are_disjoint_complete_and_keep_groups_whole(grouped_output):
    world = 3
    shards = []
    for rank in range(world):
        reader = TrajectoryReader(str(grouped_output), batch_units=2, unit="group", rank=rank, world_size=world, sync="uid")
        keys = []
        for b in reader.batches():
            assert all(shard_of(u, world) == rank for u in b.table.column("uid").to_pylist())
            keys.extend(b.keys)
            reader.commit(b)
        shards.append(set(keys))
    assert sum(len(s) for s in shards) == len(set().union(*shards))
    assert sorted(set().union(*shards)) == all_keys(grouped_output)


def test_skips_units_of_stale_policies_at_read_time(tmp_path):
    events = write_events(tmp_path / "events.jsonl", uids=6, group_size=2, versions=(3, 5))
    out = tmp_path / "out"
    trajflow("replay", str(events), "--out", str(out), "--group", "--reward-grace-ms", "0")
    version = {"v": 5}
    reader = TrajectoryReader(
        str(out), batch_units=100, unit="group", policy_version=lambda: version["v"], max_policy_lag=1
    )
    batch = reader.next_batch()
    assert set(batch.table.column("weight_version_min").to_pylist()) == {5}
    assert batch.stats["stale_units"] == 3
    with pytest.raises(ValueError):
        TrajectoryReader(str(out), batch_rows=1, max_policy_lag=1)


def test_reads_hive_partitions(tmp_path):
    events = write_events(tmp_path / "events.jsonl", uids=4, group_size=2, versions=(1, 2))
    out = tmp_path / "out"
    trajflow("replay", str(events), "--out", str(out), "--partition-by", "policy", "--reward-grace-ms", "0")
    files = [f.path for f in list_data_files(str(out))]
    assert {f.split("/")[0] for f in files} == {"policy=1", "policy=2"}
    reader = TrajectoryReader(str(out), batch_rows=3)
    keys = []
    for b in reader.batches():
        keys.extend(b.keys)
        reader.commit(b)
    assert sorted(keys) == sorted(ds.dataset(str(out), format="parquet", partitioning="hive").to_table().column("key").to_pylist())


def land_late_files(grouped_output, tmp_path):
    """More files land, named as a Kafka consumer names them: they sort before the replay's files."""
    extra = tmp_path / "extra"
    trajflow("replay", str(write_events(tmp_path / "more.jsonl", uids=2, prefix="late")), "--out", str(extra), "--group")
    for i, f in enumerate(sorted(extra.glob("*.parquet"))):
        f.rename(grouped_output / f"t-0-{i:020d}-{i:020d}.parquet")


def test_redelivers_the_batches_after_the_checkpoint_exactly_after_a_restart(grouped_output, tmp_path):
    cursor = str(tmp_path / "ckpt" / "cursor.json")
    first = TrajectoryReader(str(grouped_output), cursor=cursor, batch_units=2, unit="group")
    b1 = first.next_batch()
    first.commit(b1)
    checkpoint = first.state_dict()
    b2 = first.next_batch()
    first.commit(b2)  # committed, but the trainer dies before its next checkpoint
    b3 = first.next_batch()  # read ahead, not committed
    land_late_files(grouped_output, tmp_path)
    # Restarted from the checkpoint: b2 and b3 again, exactly, though the late files sort before them.
    again = TrajectoryReader(str(grouped_output), cursor=cursor, batch_units=2, unit="group")
    again.load_state_dict(checkpoint)
    r2, r3 = again.next_batch(), again.next_batch()
    assert (r2.keys, r2.seq, r3.keys, r3.seq) == (b2.keys, 2, b3.keys, 3)
    again.commit(r2)
    again.commit(r3)
    rest = []
    for b in again.batches():
        rest.extend(b.keys)
        again.commit(b)
    assert sorted(b1.keys + r2.keys + r3.keys + rest) == all_keys(grouped_output)
    assert any(k.startswith("late-") for k in rest)


def test_without_a_checkpoint_reading_starts_from_the_beginning_whatever_the_cursor_file_says(grouped_output, tmp_path):
    # Issue 61: a trainer that committed two batches and died before its first checkpoint trained nothing
    # that survived; the cursor file had moved past both, and a restart skipped them.
    cursor = str(tmp_path / "ckpt" / "cursor.json")
    first = TrajectoryReader(str(grouped_output), cursor=cursor, batch_units=2, unit="group")
    delivered = []
    for _ in range(2):
        b = first.next_batch()
        delivered.append(b.keys)
        first.commit(b)
    land_late_files(grouped_output, tmp_path)
    for state in (None, "not called"):
        again = TrajectoryReader(str(grouped_output), cursor=cursor, batch_units=2, unit="group")
        if state is None:
            again.load_state_dict(None)  # checkpoint.get("data") at step 0: no `if` needed
        got = [again.next_batch() for _ in range(2)]
        assert [b.keys for b in got] == delivered and [b.seq for b in got] == [1, 2]
    # Asked explicitly, it continues after the file's last commit instead.
    from_file = TrajectoryReader(str(grouped_output), cursor=cursor, batch_units=2, unit="group", resume="file")
    from_file.load_state_dict(None)
    following = from_file.next_batch()
    assert following.seq == 3 and not set(following.keys) & {k for keys in delivered for k in keys}


def test_load_state_dict_refuses_what_state_dict_did_not_return(grouped_output):
    reader = TrajectoryReader(str(grouped_output), batch_units=2, unit="group")
    with pytest.raises(ValueError, match="load_state_dict takes what state_dict"):
        reader.load_state_dict({"model": 1})
    with pytest.raises(ValueError, match="resume must be checkpoint or file"):
        TrajectoryReader(str(grouped_output), batch_units=2, resume="cursor")


def test_the_journal_keeps_the_batches_after_the_checkpoint_before_the_last(grouped_output, tmp_path):
    cursor = tmp_path / "c.json"
    reader = TrajectoryReader(str(grouped_output), cursor=str(cursor), batch_units=1, unit="group")
    checkpoints = {}
    for b in reader.batches():
        reader.commit(b)
        if b.seq % 3 == 0:
            checkpoints[b.seq] = reader.state_dict()
    seqs = [p["after"]["batches"] for p in json.loads(cursor.read_text())["journal"]["batches"]]
    assert seqs == list(range(7, 13))  # after checkpoint 6, the one before the last (9)
    # From either of the last two checkpoints, the batches after it come again exactly; from an older one,
    # planned anew (the same rows here: the files did not change).
    for seq in (6, 9, 3):
        again = TrajectoryReader(str(grouped_output), cursor=str(cursor), batch_units=1, unit="group")
        again.load_state_dict(checkpoints[seq])
        assert again.next_batch().seq == seq + 1


def test_resuming_from_an_older_checkpoint_replays_from_there(grouped_output, tmp_path):
    reader = TrajectoryReader(str(grouped_output), cursor=str(tmp_path / "c.json"), batch_units=4, unit="group")
    b1 = reader.next_batch()
    reader.commit(b1)
    checkpoint = reader.state_dict()
    b2 = reader.next_batch()
    reader.commit(b2)
    reader.load_state_dict(checkpoint)
    assert reader.next_batch().keys == b2.keys
    # In memory only (no cursor file), the same: planned anew from the checkpoint's cursor.
    memory = TrajectoryReader(str(grouped_output), batch_units=4, unit="group")
    memory.load_state_dict(checkpoint)
    assert memory.next_batch().keys == b2.keys


def test_the_cursor_keeps_a_mark_per_lane_not_every_file_read(grouped_output, tmp_path):
    cursor = tmp_path / "c.json"
    reader = TrajectoryReader(str(grouped_output), cursor=str(cursor), batch_units=1, unit="group")
    keys = []
    for b in reader.batches():
        keys.extend(b.keys)
        reader.commit(b)
    assert sorted(keys) == all_keys(grouped_output)
    files = [f.path for f in list_data_files(str(grouped_output))]
    assert len(files) >= 6
    doc = json.loads(cursor.read_text())
    assert doc["version"] == 3
    # Every file but the last few is below the replay lane's mark and forgotten (a mark moves when the
    # next batch is planned, from the low waters of files read before: the last three are still listed).
    mark = doc["cursor"]["marks"]["|part"]
    assert mark >= len(files) - 3
    assert sorted(doc["cursor"]["done"]) == [f for f in files if int(f[5:10]) >= mark]
    # A reader resuming from that cursor finds nothing new, and reads a file that lands after it.
    again = TrajectoryReader(str(grouped_output), cursor=str(cursor), batch_units=100, unit="group", resume="file")
    assert again.next_batch() is None
    extra = tmp_path / "extra"
    trajflow("replay", str(write_events(tmp_path / "more.jsonl", uids=2, prefix="late")), "--out", str(extra), "--group")
    (extra / "part-00000.parquet").rename(grouped_output / f"part-{len(files) + 5:05d}.parquet")
    late = again.next_batch()
    assert late is not None and all(k.startswith("late-") for k in late.keys)


def test_reads_on_from_a_version_1_cursor(grouped_output, tmp_path):
    files = [f.path for f in list_data_files(str(grouped_output))]
    read = files[:3]
    cursor = tmp_path / "v1.json"
    v1 = {"done": read, "current": None, "row": 0, "batches": 3}
    cursor.write_text(json.dumps({"version": 1, "cursor": v1, "pending": None}))
    reader = TrajectoryReader(str(grouped_output), cursor=str(cursor), batch_units=4, unit="group", resume="file")
    keys = []
    for b in reader.batches():
        keys.extend(b.keys)
        reader.commit(b)
    earlier = set()
    for f in read:
        earlier.update(pq.read_table(grouped_output / f).column("key").to_pylist())
    assert sorted(keys) == sorted(set(all_keys(grouped_output)) - earlier)
    assert json.loads(cursor.read_text())["version"] == 3
