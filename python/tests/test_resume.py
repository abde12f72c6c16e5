"""Kill and resume: a trainer that checkpoints every 3 steps, killed (SIGKILL) at named points and
restarted from its last checkpoint (or from none), trains every row exactly once: from a finished replay,
and while a Kafka consumer is still writing the files (locally here, on S3 in test_s3.py).

The kill plans are the ones that lost rows before the checkpoint became the truth (issue 61): a kill after
a commit and before the first checkpoint, after a checkpoint, and after a delivery."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from conftest import BIN, NODE, grouped_replay, need, write_events

LOOP = str(Path(__file__).with_name("trainer_loop.py"))

# Each plan: where each run but the last kills itself (POINT:SEQ, the step whose batch has that seq).
KILL_PLANS = [
    ["committed:1"],
    ["committed:2"],
    ["committed:2", "committed:5"],
    ["committed:1", "committed:4", "committed:7"],
    ["checkpointed:3"],
    ["delivered:5"],
]


def run_loop(out, ckpt, *extra, timeout=120):
    """Runs the loop to its end; returns its exit status (-SIGKILL when it killed itself) and stderr."""
    loop = subprocess.Popen([sys.executable, LOOP, str(out), str(ckpt), *extra], stderr=subprocess.PIPE, text=True)
    try:
        _, err = loop.communicate(timeout=timeout)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
    return loop.returncode, err


def deliveries(ckpt):
    return [json.loads(line) for line in (ckpt / "deliveries.log").read_text().splitlines()]


def keys_in(out):
    return sorted(ds.dataset(str(out), format="parquet", exclude_invalid_files=True).to_table().column("key").to_pylist())


def train_through_kills(out, ckpt, plan, killed_args=(), final_args=()):
    """Each run of the plan must die at its kill point, the last one finish; returns the model's rows."""
    for point in plan:
        rc, err = run_loop(out, ckpt, "--checkpoint-every", "3", "--kill-at", point, *killed_args)
        assert rc == -signal.SIGKILL, f"the run to be killed at {point} exited {rc}:\n{err}"
        seq = int(point.split(":")[1])
        assert deliveries(ckpt)[-1][0] == seq, f"the run killed at {point} last received batch {deliveries(ckpt)[-1][0]}"
    rc, err = run_loop(out, ckpt, "--checkpoint-every", "3", *final_args)
    assert rc == 0, err
    return json.loads((ckpt / "model.json").read_text())["trained"]


def assert_trained_exactly_once(trained, expected, ckpt):
    assert len(trained) == len(set(trained)), "a row was trained twice"
    missing = sorted(set(expected) - set(trained))
    assert not missing, f"{len(missing)} row(s) never trained: {missing[:4]}"
    assert sorted(trained) == expected
    # A batch delivered again after a kill is the same batch.
    by_seq = {}
    for seq, batch in deliveries(ckpt):
        assert by_seq.setdefault(seq, batch) == batch, f"batch {seq} changed after a restart"


@pytest.fixture(scope="module")
def output_96(tmp_path_factory):
    """24 GRPO groups of 4, replayed into small files: 12 batches of 2 groups."""
    return grouped_replay(tmp_path_factory.mktemp("o96"), uids=24, rows_per_file=5)


@pytest.mark.parametrize("plan", KILL_PLANS, ids=lambda p: "+".join(p))
def test_every_row_exactly_once_through_kills_of_the_trainer(output_96, tmp_path, plan):
    ckpt = tmp_path / "ckpt"
    expected = keys_in(output_96)
    assert len(expected) == 96
    trained = train_through_kills(output_96, ckpt, plan)
    assert_trained_exactly_once(trained, expected, ckpt)
    # Each run resumed right after the last checkpoint: what was trained since it came again, nothing
    # before it did.
    assert [seq for seq, _ in deliveries(ckpt)] == expected_deliveries(plan, batches=12, every=3)


def expected_deliveries(plan, batches, every):
    """The seqs each run of ``plan`` receives, in order: from the batch after the last checkpoint written
    to the kill point, then the last run to the end."""
    seqs = []
    checkpoint = 0
    for point in plan:
        name, seq = point.split(":")
        seq = int(seq)
        seqs.extend(range(checkpoint + 1, seq + 1))
        reached = seq if name == "checkpointed" else seq - 1  # the last step whose checkpoint was written
        checkpoint = max(checkpoint, reached - reached % every)
    return seqs + list(range(checkpoint + 1, batches + 1))


def train_while_consuming(tmp_path, out, keys_in, rows_per_file):
    """Produces 16 groups of 4 to a fresh topic and runs a consumer writing them to ``out`` (a directory or
    an s3:// prefix). Every kill plan runs against it, the first ones while the consumer is still writing
    (the killed runs follow the output until their kill point comes), the last run of each once it has
    finished: every row trained exactly once. Returns the checkpoint directories."""
    broker = os.environ["KAFKA_BROKERS"]
    topic = f"trainer-{os.getpid()}-{time.monotonic_ns()}"
    events = write_events(tmp_path / "events.jsonl", uids=16, group_size=4)
    env = {**os.environ, "KAFKA_BROKERS": broker, "TRAJFLOW_LOG_LEVEL": "warn"}
    subprocess.run([NODE, BIN, "produce", str(events), "--topic", topic], check=True, env=env, capture_output=True)
    consumer = subprocess.Popen(
        [NODE, BIN, "consume", "--topic", topic, "--group", f"{topic}-g", "--out", str(out), "--grpo",
         "--reward-grace-ms", "0", "--rows-per-file", rows_per_file, "--file-age-ms", "300", "--until-idle-ms", "4000"],
        env=env, stderr=subprocess.PIPE, text=True,
    )
    ckpts = []
    try:
        for i, plan in enumerate(KILL_PLANS):
            ckpt = tmp_path / f"ckpt-{i}"
            for point in plan:
                rc, err = run_loop(out, ckpt, "--checkpoint-every", "3", "--kill-at", point, "--follow")
                assert rc == -signal.SIGKILL, f"plan {plan}: the run to be killed at {point} exited {rc}:\n{err}"
            ckpts.append(ckpt)
        _, err = consumer.communicate(timeout=120)
        assert consumer.returncode == 0, err
        expected = keys_in(out)
        assert len(expected) == 64
        for plan, ckpt in zip(KILL_PLANS, ckpts):
            rc, err = run_loop(out, ckpt, "--checkpoint-every", "3")
            assert rc == 0, f"plan {plan}: {err}"
            trained = json.loads((ckpt / "model.json").read_text())["trained"]
            assert_trained_exactly_once(trained, expected, ckpt)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    return ckpts


def test_follows_files_as_a_kafka_consumer_commits_them(tmp_path):
    need("KAFKA_BROKERS", "a Kafka broker")
    train_while_consuming(tmp_path, tmp_path / "out", keys_in, "8")
