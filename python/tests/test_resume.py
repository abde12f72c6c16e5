"""Kill and resume: a trainer killed (SIGKILL) at random points and restarted trains every row exactly
once, from a finished replay and while a Kafka consumer is still writing the files."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from conftest import BIN, NODE, write_events

LOOP = str(Path(__file__).with_name("trainer_loop.py"))


def start_loop(out, ckpt, *extra):
    return subprocess.Popen([sys.executable, LOOP, str(out), str(ckpt), *extra], stderr=subprocess.PIPE, text=True)


def trained(ckpt):
    with open(ckpt / "model.json") as f:
        return json.load(f)["trained"]


def deliveries(ckpt):
    return [json.loads(line) for line in (ckpt / "deliveries.log").read_text().splitlines()]


def keys_in(out):
    return sorted(ds.dataset(str(out), format="parquet", exclude_invalid_files=True).to_table().column("key").to_pylist())


def delivered_count(ckpt):
    log = ckpt / "deliveries.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def kill_and_resume(out, ckpt, kills, rng, *extra):
    """Kills the loop `kills` times: the first right after it logged a batch (inside its training step,
    so at least one kill lands between reading and committing whatever the host's speed), the others at
    random points."""
    for k in range(kills):
        loop = start_loop(out, ckpt, *extra)
        if k == 0:
            before = delivered_count(ckpt)
            deadline = time.monotonic() + 60
            while delivered_count(ckpt) == before and loop.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
        else:
            time.sleep(rng.uniform(0.3, 1.2))
        loop.send_signal(signal.SIGKILL)
        loop.wait()


def test_every_row_exactly_once_through_kills_of_the_trainer(grouped_output, tmp_path):
    ckpt = tmp_path / "ckpt"
    rng = random.Random(7)
    kill_and_resume(grouped_output, ckpt, 6, rng, "--step", "0.1")
    final = start_loop(grouped_output, ckpt, "--step", "0.1")
    assert final.wait(timeout=120) == 0, final.stderr.read()
    keys = trained(ckpt)
    assert len(keys) == len(set(keys)), "a row was trained twice"
    assert sorted(keys) == keys_in(grouped_output)
    # A batch delivered again after a kill is the same batch.
    by_seq = {}
    for seq, batch in deliveries(ckpt):
        assert by_seq.setdefault(seq, batch) == batch, f"batch {seq} changed after a restart"
    assert len(deliveries(ckpt)) > len(by_seq), "no kill landed between reading and committing"


def train_while_consuming(tmp_path, out, keys_in, rows_per_file, seed):
    """Produces 16 groups of 4 to a fresh topic, runs a consumer writing them to ``out`` (a directory or an
    s3:// prefix), kills the trainer loop following it three times and lets a last one finish: every row
    trained exactly once. Returns the checkpoint directory."""
    broker = os.environ["KAFKA_BROKERS"]
    topic = f"trainer-{os.getpid()}-{int(time.time() * 1000)}"
    events = write_events(tmp_path / "events.jsonl", uids=16, group_size=4)
    env = {**os.environ, "KAFKA_BROKERS": broker, "TRAJFLOW_LOG_LEVEL": "warn"}
    subprocess.run([NODE, BIN, "produce", str(events), "--topic", topic], check=True, env=env, capture_output=True)
    consumer = subprocess.Popen(
        [NODE, BIN, "consume", "--topic", topic, "--group", f"{topic}-g", "--out", str(out), "--grpo",
         "--reward-grace-ms", "0", "--rows-per-file", rows_per_file, "--file-age-ms", "300", "--until-idle-ms", "4000"],
        env=env, stderr=subprocess.PIPE, text=True,
    )
    ckpt = tmp_path / "ckpt"
    try:
        kill_and_resume(out, ckpt, 3, random.Random(seed), "--follow", "--idle", "30", "--step", "0.05")
        assert consumer.wait(timeout=120) == 0, consumer.stderr.read()
        final = start_loop(out, ckpt, "--follow", "--idle", "3")
        assert final.wait(timeout=120) == 0, final.stderr.read()
    finally:
        consumer.kill()
    keys = trained(ckpt)
    assert len(keys) == len(set(keys)), "a row was trained twice"
    assert sorted(keys) == keys_in(out)
    assert len(keys) == 64
    return ckpt


@pytest.mark.skipif(not os.environ.get("KAFKA_BROKERS"), reason="needs KAFKA_BROKERS (npm test starts a broker)")
def test_follows_files_as_a_kafka_consumer_commits_them(tmp_path):
    train_while_consuming(tmp_path, tmp_path / "out", keys_in, "8", seed=11)
