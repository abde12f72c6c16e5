"""A synchronous RL loop against a live `trajflow consume --grpo`: send a wave of GRPO groups (events with
wall-clock timestamps, as a gateway sends them), wait until the trainer's reader has every group of the
wave, "train", commit, send the next wave. Prints one JSON object: per wave, the seconds from the wave's
last event to its batch in the trainer's hands, and the row keys it got.

    sync_loop.py BROKER TOPIC OUT CURSOR WAVES GROUPS GROUP_SIZE
"""
import json
import sys
import time

from confluent_kafka import Producer

import trajflow

broker, topic, out, cursor = sys.argv[1:5]
waves, groups, group_size = (int(a) for a in sys.argv[5:8])

producer = Producer({"bootstrap.servers": broker, "linger.ms": 0})
reader = trajflow.TrajectoryReader(out, cursor=cursor, batch_units=groups, unit="group")


def session_events(uid, sample, t0):
    """A two-turn tool-using session with its reward before session.end."""
    sid = f"r{sample}"
    ts = t0
    seq = 0
    events = []

    def push(event):
        nonlocal ts, seq
        events.append({"v": 1, "uid": uid, "session_id": sid, "seq": seq, "ts": ts, **event})
        seq += 1
        ts += 1

    push({"type": "session.start", "sample_index": sample, "group_size": group_size})
    push({"type": "request", "call_id": "c1", "prompt_ids": [1, 2, 3]})
    push({"type": "response", "call_id": "c1", "output_ids": [10 + sample, 11], "logprobs": [-0.5, -0.25],
          "finish_reason": "tool_calls"})
    push({"type": "request", "call_id": "c2", "parent_call_id": "c1", "prompt_delta_ids": [4, 5]})
    push({"type": "response", "call_id": "c2", "output_ids": [12], "logprobs": [-0.125], "finish_reason": "stop"})
    push({"type": "reward", "value": float(sample)})
    push({"type": "session.end", "status": "ok"})
    return events


result = []
for wave in range(waves):
    t0 = int(time.time() * 1000)
    expected = set()
    for g in range(groups):
        uid = f"wave{wave}-task{g}"
        for sample in range(group_size):
            for event in session_events(uid, sample, t0):
                producer.produce(topic, key=uid.encode(), value=json.dumps(event).encode())
            expected.add(f"{uid}_r{sample}_0")
    producer.flush(30)
    sent = time.monotonic()
    keys = []
    while len(keys) < len(expected):
        batch = reader.next_batch(follow=True, timeout=120)
        if batch is None:
            break
        keys.extend(batch.keys)
        reader.commit(batch)  # after the "optimizer step"
    result.append({"seconds": time.monotonic() - sent, "keys": sorted(keys), "expected": sorted(expected)})

print(json.dumps({"waves": result}))
