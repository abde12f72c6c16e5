"""A durable step: the driver SIGKILLed mid-step at named points and run again with the same step returns
that step's groups exactly once, and no session that had finished runs again; the sessions the kill cut
are ended aborted and their samples run again."""
import collections
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rollout_fixtures import embedded, kafka_s3, read_all  # noqa: F401 - fixtures

DRIVER = str(Path(__file__).with_name("rollout_driver.py"))


def drive(gw, out, tmp, *extra):
    done = subprocess.run(
        [sys.executable, DRIVER, gw.url, out, str(tmp / "journal"), str(tmp / "runs.log"), str(tmp / "result.json"), *extra],
        capture_output=True, text=True, timeout=600,
    )
    return done.returncode, done.stderr


@pytest.mark.parametrize("deployment", ["embedded", "kafka_s3"])
@pytest.mark.parametrize("kill_at", ["started:3", "mid-session", "ended:5", "rows"])
def test_a_killed_driver_returns_the_step_exactly_once_without_rerunning_finished_sessions(request, deployment, tmp_path, kill_at):
    gw, out = request.getfixturevalue(deployment)
    rc, err = drive(gw, out, tmp_path, "--kill-at", kill_at)
    assert rc == -signal.SIGKILL, f"the driver to be killed at {kill_at} exited {rc}:\n{err}"
    rc, err = drive(gw, out, tmp_path)
    assert rc == 0, err
    groups = json.loads((tmp_path / "result.json").read_text())
    runs = [json.loads(line) for line in (tmp_path / "runs.log").read_text().splitlines()]
    assert [g["uid"] for g in groups] == ["task-0", "task-1", "task-2"]
    keys = [k for g in groups for k in g["keys"]]
    assert len(keys) == len(set(keys)) == 12, "a group was not whole, or a row came twice"
    cut = collections.Counter()
    for g in groups:
        kept = [s for s in g["sessions"] if s["kept"]]
        assert [(s["sample_index"], s["status"], s["reward"]) for s in kept] == [(k, "ok", float(k)) for k in range(4)]
        assert sorted(g["session_ids"]) == sorted(s["session_id"] for s in kept)
        for s in g["sessions"]:
            if not s["kept"]:
                assert (s["status"], s["reason"]) == ("aborted", "driver_restarted")
                cut[(g["uid"], s["sample_index"])] += 1
    assert sum(cut.values()) >= 1, "the kill cut no session"
    # Every sample's agent ran once, and once more for each time the kill cut it; a session id never twice.
    # (A cut session's agent may not have begun: it waited for a slot, or the kill came right after its start.)
    ran = collections.Counter((uid, sample) for _, uid, sample, _ in runs)
    assert len({sid for sid, *_ in runs}) == len(runs)
    for uid in ("task-0", "task-1", "task-2"):
        for sample in range(4):
            times, cuts = ran[(uid, sample)], cut[(uid, sample)]
            assert (times == 1) if cuts == 0 else (cuts <= times <= cuts + 1), (uid, sample, times, cuts)
    if kill_at == "mid-session":
        assert cut == {("task-1", 2): 1} and len(runs) == 13
    if kill_at == "ended:5":
        # The gateway had recorded this session's end when the kill came, before the journal took its result:
        # the restarted driver keeps it as it ended, and its agent never runs again.
        ended = (tmp_path / "result.json.killed").read_text()
        session = next(s for g in groups for s in g["sessions"] if s["session_id"] == ended)
        assert (session["kept"], session["status"], session["calls"]) == (True, "ok", 1)
        assert sum(1 for sid, *_ in runs if sid == ended) == 1
    # The cut sessions were ended aborted in the gateway: their rows (if any) say so, and none is in a group.
    table = read_all(out)
    statuses = dict(zip(table.column("session_id").to_pylist(), table.column("status").to_pylist()))
    in_groups = {sid for g in groups for sid in g["session_ids"]}
    for g in groups:
        for s in g["sessions"]:
            if not s["kept"] and s["session_id"] in statuses:
                assert statuses[s["session_id"]] == "aborted" and s["session_id"] not in in_groups
