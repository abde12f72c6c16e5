"""The row watcher (trajflow.rollout.rows) on real Parquet files: each file read once, rows kept for every
session waited for, and the files listed before a new group began never skipped while another group waits."""
import pyarrow as pa
import pyarrow.parquet as pq

from trajflow.rollout.rows import RowWatcher


def write(path, sessions):
    rows = [{"key": f"u_{s}_0", "session_id": s, "index": 0} for s in sessions]
    pq.write_table(pa.Table.from_pylist(rows), str(path))


def test_a_file_listed_when_a_second_group_begins_still_gives_the_first_its_rows(tmp_path):
    # Regression: a group starting while another waited skipped every file listed at its start, unread, so
    # the waiting group's rows in such a file were never found (astream's groups and verl's agent loops
    # start while others wait).
    w = RowWatcher(str(tmp_path))
    w.skip(w.files())  # the first group begins on an empty output
    w.want(["a-s0"])
    write(tmp_path / "part-00000.parquet", ["a-s0"])  # its rows land before anyone looked again
    w.skip(w.files())  # a second group begins and lists the output
    w.want(["b-s0"])
    assert set(w.scan({"a-s0"})) == {"a-s0"}
    write(tmp_path / "part-00001.parquet", ["b-s0", "x-s9"])
    assert set(w.scan({"b-s0"})) == {"b-s0"}  # a session nobody waits for is not kept


def test_files_there_before_any_group_are_never_read(tmp_path):
    write(tmp_path / "part-00000.parquet", ["old-s0"])
    w = RowWatcher(str(tmp_path))
    w.skip(w.files())
    w.want(["old-s0"])  # even a session of the same name: the file predates every wait
    assert w.scan({"old-s0"}) == {}
