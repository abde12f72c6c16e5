"""trajflow.emit against a real Kafka broker: sessions emitted to a fresh topic, read back by `trajflow
consume` as exact rows; a broker that never answers makes a call raise and keep its events, which go first,
byte for byte, once the session emits through a working producer; events the broker wrote but did not
confirm are re-sent and the pipeline takes them once."""
import json
import socket
import time
import uuid

import pyarrow.dataset as ds
import pytest

from trajflow import DeliveryError, Emitter, EventBuilder, Session

from conftest import need, trajflow

BROKERS = need("KAFKA_BROKERS", "a Kafka broker", module=True)

T0 = 1767225600000


class Clock:
    """Event time that moves 100 ms per event: exact timestamps to expect, and no waiting on the wall clock."""

    def __init__(self, t=T0):
        self.t = t

    def __call__(self):
        self.t += 100
        return self.t


@pytest.fixture
def topic():
    """A fresh topic of 2 partitions, deleted afterwards with the consumer groups that read it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"emit-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": BROKERS})
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])[name].result(timeout=30)
    yield name
    admin.delete_topics([name])[name].result(timeout=30)
    for group, done in admin.delete_consumer_groups([f"{name}-g", f"{name}-raw"], request_timeout=30).items():
        try:
            done.result()
        except Exception:  # a test that failed early never made the group
            pass


def consume(topic, tmp_path):
    """Runs `trajflow consume` until the topic is drained; returns the rows by key, the final metrics and the
    dead letters (lines)."""
    out, dead = tmp_path / "out", tmp_path / "dead"
    result = trajflow(
        "consume", "--topic", topic, "--group", f"{topic}-g", "--out", str(out), "--brokers", BROKERS,
        "--dead-letter-dir", str(dead), "--reward-grace-ms", "0", "--file-age-ms", "200",
        "--until-idle-ms", "2000", "--json", timeout=120,
    )
    table = ds.dataset(str(out), format="parquet", exclude_invalid_files=True).to_table()
    rows = {r["key"]: r for r in table.to_pylist()}
    letters = [line for f in dead.rglob("*") if f.is_file() for line in f.read_text().splitlines()] if dead.exists() else []
    return rows, json.loads(result.stdout), letters


def raw_messages(topic, n, timeout=30):
    """The topic's first ``n`` messages as (key, value) in seq order per session, waiting until they are there."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": BROKERS, "group.id": f"{topic}-raw", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.key(), m.value()))
    finally:
        consumer.close()
    return got


def picked(row):
    return {
        "prompt_ids": row["prompt_ids"],
        "response_ids": row["response_ids"],
        "response_mask": row["response_mask"],
        "rollout_log_probs": row["rollout_log_probs"],
        "reward": row["reward"],
        "status": row["status"],
    }


def test_a_branching_session_and_a_group_mate_come_back_as_exact_rows(topic, tmp_path):
    emitter = Emitter({"bootstrap.servers": BROKERS}, topic, clock=Clock())
    uid = f"task-{topic}"
    a = emitter.session(uid, "r0", sample_index=0, group_size=2, metadata={"answer": "42"})
    a.start()
    c1 = a.call([1, 2, 3], [10, 11], [-0.5, -0.25], finish_reason="tool_calls", weight_version=7,
                messages=[{"role": "user", "content": "2*21?"}], sampling={"temperature": 1.0, "top_p": 2.0})
    c2 = a.call([1, 2, 3, 10, 11, 4, 5], [12, 13], [-0.125, -0.0625], finish_reason="stop", weight_version=7)
    # A branch from c1's turn after c2 extended it: the full prompt form (c1's tip was replaced by c2's).
    c3 = a.call([1, 2, 3, 10, 11, 6], [14], [-1.0], finish_reason="stop", weight_version=7)
    a.reward(0.25, target=c2, stage="judge", key="judge-c2")
    a.reward(1.0, key="final")
    a.end("ok")
    # A session that never calls start(); the engine gave no logprob for one of its tokens.
    b = Session(emitter, uid, "r1", sample_index=1, group_size=2)
    b.call([1, 2, 3], [20, 21], [-0.5, None], finish_reason="abort")
    b.reward(0.0, key="final")
    b.end("aborted")
    assert (c1, c2, c3) == ("c1", "c2", "c3")
    assert emitter.missing_logprobs == 1 and emitter.delta_prompts == 1 and emitter.resends == 0
    assert a.unsettled == [] and b.unsettled == []

    # Every event is on the topic keyed by uid, in seq order within each session (one partition per uid).
    messages = raw_messages(topic, 15)
    assert {k for k, _ in messages} == {uid.encode()}
    events = [json.loads(v) for _, v in messages]
    assert [(e["session_id"], e["seq"], e["type"]) for e in events] == [
        ("r0", 0, "session.start"), ("r0", 1, "request"), ("r0", 2, "response"), ("r0", 3, "request"),
        ("r0", 4, "response"), ("r0", 5, "request"), ("r0", 6, "response"), ("r0", 7, "reward"),
        ("r0", 8, "reward"), ("r0", 9, "session.end"),
        ("r1", 0, "session.start"), ("r1", 1, "request"), ("r1", 2, "response"),
        ("r1", 3, "reward"), ("r1", 4, "session.end"),
    ]
    # The request of c2 is the delta form against c1; c3's is the full prompt; the hole drops r1's logprobs.
    by = {(e["session_id"], e["type"], e.get("call_id")): e for e in events}
    assert by[("r0", "request", "c2")]["parent_call_id"] == "c1"
    assert "prompt_ids" in by[("r0", "request", "c3")]
    assert by[("r0", "request", "c1")]["sampling"] == {"temperature": 1}, "top_p 2.0 is out of range: left out"

    rows, metrics, letters = consume(topic, tmp_path)
    assert letters == []
    assert {k: picked(r) for k, r in rows.items()} == {
        f"{uid}_r0_0": {
            "prompt_ids": [1, 2, 3],
            "response_ids": [10, 11, 4, 5, 12, 13],
            "response_mask": [1, 1, 0, 0, 1, 1],
            "rollout_log_probs": [-0.5, -0.25, 0.0, 0.0, -0.125, -0.0625],
            "reward": 1.0,
            "status": "ok",
        },
        f"{uid}_r0_1": {
            "prompt_ids": [1, 2, 3],
            "response_ids": [10, 11, 6, 14],
            "response_mask": [0, 0, 0, 1],
            "rollout_log_probs": [0.0, 0.0, 0.0, -1.0],
            "reward": 1.0,
            "status": "ok",
        },
        f"{uid}_r1_0": {
            "prompt_ids": [1, 2, 3],
            "response_ids": [20, 21],
            "response_mask": [1, 1],
            "rollout_log_probs": None,
            "reward": 0.0,
            "status": "aborted",
        },
    }


def closed_port():
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_delivery_failure_raises_and_the_events_go_first_byte_for_byte(topic, tmp_path):
    nowhere = {"bootstrap.servers": f"127.0.0.1:{closed_port()}", "message.timeout.ms": 1000}
    clock = Clock()
    broken = Emitter(nowhere, topic, clock=clock)
    s = broken.session("task-f", "r0", sample_index=0, group_size=1)
    with pytest.raises(DeliveryError) as failed:
        s.call([1, 2, 3], [10, 11], [-0.5, -0.25], finish_reason="stop")
    assert failed.value.unsettled == 3 and failed.value.retryable
    # The kept events are exactly what the builder writes for that call: start, request, response.
    expected = EventBuilder("task-f", "r0", 0, 1)
    first = expected.call("c1", [1, 2, 3], [10, 11], sent_at=T0 + 100, done_at=T0 + 100, logprobs=[-0.5, -0.25]).records
    assert s.unsettled == first

    # Without waiting, the next call returns at once; flush() reports that nothing was confirmed, and all
    # five events are still kept in seq order.
    s.call([1, 2, 3, 10, 11, 4], [12], [-0.125], wait=False)
    assert s.unsettled == []  # in flight again, not yet failed
    with pytest.raises(DeliveryError) as flushed:
        s.flush()
    second = expected.call("c2", [1, 2, 3, 10, 11, 4], [12], sent_at=T0 + 200, done_at=T0 + 200, logprobs=[-0.125]).records
    assert flushed.value.unsettled == 5
    assert s.unsettled == first + second
    assert broken.resends == 3

    # The session moves to a working producer: the kept events go first, then the reward and the end.
    s.emitter = Emitter({"bootstrap.servers": BROKERS}, topic, clock=clock)
    s.reward(1.0)
    s.end("ok")
    assert s.unsettled == []
    end = expected.reward(T0 + 300, 1.0) + expected.end(T0 + 400, "ok")
    assert [v for _, v in raw_messages(topic, 7)] == first + second + end

    rows, _, letters = consume(topic, tmp_path)
    assert letters == []
    assert {k: picked(r) for k, r in rows.items()} == {
        "task-f_r0_0": {
            "prompt_ids": [1, 2, 3],
            "response_ids": [10, 11, 4, 12],
            "response_mask": [1, 1, 0, 1],
            "rollout_log_probs": [-0.5, -0.25, 0.0, -0.125],
            "reward": 1.0,
            "status": "ok",
        }
    }


class LosesAcks:
    """A real producer whose first ``n`` delivery reports say the delivery failed although the broker wrote
    the events: the unknown outcome of a timeout or a broken connection."""

    def __init__(self, producer, n):
        self.producer, self.n = producer, n

    def produce(self, topic, key, value, on_delivery):
        lose = self.n > 0
        self.n -= 1

        def report(err, msg):
            on_delivery(err if err is not None or not lose else "ack lost (test)", msg)

        self.producer.produce(topic, key=key, value=value, on_delivery=report)

    def poll(self, timeout):
        return self.producer.poll(timeout)

    def flush(self, timeout=None):
        return self.producer.flush(timeout)


def test_events_written_but_not_confirmed_are_sent_again_and_taken_once(topic, tmp_path):
    from confluent_kafka import Producer

    producer = LosesAcks(Producer({"bootstrap.servers": BROKERS, "acks": "all", "enable.idempotence": True}), 3)
    s = Emitter(producer, topic, clock=Clock()).session("task-d", "r0")
    with pytest.raises(DeliveryError):
        s.call([1, 2], [3, 4], [-0.5, -0.25])
    s.call([1, 2, 3, 4, 5], [6], [-1.0])
    s.reward(1.0)
    s.end()
    assert len(raw_messages(topic, 10)) == 10, "the three unconfirmed events are on the topic twice"
    rows, metrics, letters = consume(topic, tmp_path)
    assert letters == []
    assert metrics["metrics"]["duplicate_events_ignored"] == 3
    assert {k: picked(r) for k, r in rows.items()} == {
        "task-d_r0_0": {
            "prompt_ids": [1, 2],
            "response_ids": [3, 4, 5, 6],
            "response_mask": [1, 1, 0, 1],
            "rollout_log_probs": [-0.5, -0.25, 0.0, -1.0],
            "reward": 1.0,
            "status": "ok",
        }
    }


def test_sessions_emitting_from_threads_without_waiting_are_all_delivered_by_flush(topic):
    import threading

    emitter = Emitter({"bootstrap.servers": BROKERS}, topic, wait=False)

    def rollout(k):
        s = emitter.session("task-t", f"r{k}", sample_index=k, group_size=4)
        prompt = [1, 2, 3]
        for turn in range(5):
            output = [100 * k + turn]
            s.call(prompt, output, [-0.5])
            prompt = prompt + output + [7]
        s.reward(float(k))
        s.end()

    threads = [threading.Thread(target=rollout, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    emitter.flush()
    events = [json.loads(v) for _, v in raw_messages(topic, 4 * 13)]
    by_session = {}
    for e in events:
        by_session.setdefault(e["session_id"], []).append((e["seq"], e["type"]))
    # One partition per uid: each session's events arrive in seq order, 0..12 without a gap.
    assert sorted(by_session) == ["r0", "r1", "r2", "r3"]
    for seqs in by_session.values():
        assert [q for q, _ in seqs] == list(range(13))
        assert [t for _, t in seqs] == ["session.start"] + ["request", "response"] * 5 + ["reward", "session.end"]
    assert emitter.delta_prompts == 4 * 4, "every call after the first extends the previous one"
