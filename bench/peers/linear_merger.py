"""The Python pipeline an RL team writes today, as the peer trajflow is measured against (bench/peers.ts).

A confluent-kafka consumer groups gateway events by session and, when a session ends, merges its calls
linearly the way verl's and Agent Lightning's mergers do: a call whose prompt extends the current
context continues the row (the tokens in between are context, mask 0; the output is trained, mask 1);
any other prompt starts a new row. Rows are written with pyarrow as Parquet (zstd), with the same token
columns trajflow writes. Straightforward and idiomatic; not deliberately slow.

usage: linear_merger.py <brokers> <topic> <out-dir> <expected-events> [--rows-per-file N] [--max-file-age S]
Prints JSON: events, rows, seconds (first message to last file written), first_record_at, first_file_at, last_file_at (epoch
seconds), peak RSS, CPU seconds (user + system, all threads), and the latency from
each session's end (its session.end consumed) to the file holding it written (p50, p99).
"""
import argparse
import base64
import json
import math
import os
import resource
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer


def ids_of(value):
    """A token array: a JSON list, or {"b64": little-endian int32}."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["b64"]), dtype="<i4").tolist()
    return value


def logprobs_of(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["b64"]), dtype="<f4").tolist()
    return value


def merge(session):
    """Linear merge of a session's calls (in seq order) into rows."""
    rows = []
    current = None
    for call in session["calls"]:
        prompt, output, logprobs = call["prompt"], call["output"], call["logprobs"]
        context = None if current is None else current["prompt_ids"] + current["response_ids"]
        if context is not None and len(prompt) >= len(context) and prompt[: len(context)] == context:
            gap = prompt[len(context):]
            current["response_ids"] += gap + output
            current["response_mask"] += [0] * len(gap) + [1] * len(output)
            if logprobs is None or current["rollout_log_probs"] is None:
                current["rollout_log_probs"] = None  # never invent a logprob
            else:
                current["rollout_log_probs"] += [0.0] * len(gap) + logprobs
        else:
            current = {
                "prompt_ids": list(prompt),
                "response_ids": list(output),
                "response_mask": [1] * len(output),
                "rollout_log_probs": None if logprobs is None else list(logprobs),
            }
            rows.append(current)
    for i, row in enumerate(rows):
        row["key"] = f"{session['uid']}_{session['session_id']}_{i}"
        row["uid"] = session["uid"]
        row["session_id"] = session["session_id"]
        row["index"] = i
        row["reward"] = session["reward"]
    return rows


SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("uid", pa.string()),
        ("session_id", pa.string()),
        ("index", pa.int32()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.int32())),
        ("response_mask", pa.list_(pa.int8())),
        ("rollout_log_probs", pa.list_(pa.float32())),
        ("reward", pa.float64()),
    ]
)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("brokers")
    parser.add_argument("topic")
    parser.add_argument("out")
    parser.add_argument("expected", type=int)
    parser.add_argument("--rows-per-file", type=int, default=1000)
    # A file is also written once its oldest row waited this long, as trajflow's max_file_age_ms does.
    parser.add_argument("--max-file-age", type=float, default=1.0)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    consumer = Consumer(
        {
            "bootstrap.servers": args.brokers,
            "group.id": f"peer-{args.topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([args.topic])
    sessions = {}
    pending_rows = []
    pending_ended = []  # when each session in pending_rows ended
    latencies = []
    files = 0
    first_file_at = None
    last_file_at = None
    events = 0
    rows_written = 0
    started = None
    first_record_at = None

    def flush():
        nonlocal pending_rows, pending_ended, files, rows_written, first_file_at, last_file_at
        if not pending_rows:
            return
        table = pa.Table.from_pylist(pending_rows, schema=SCHEMA)
        pq.write_table(table, os.path.join(args.out, f"part-{files:05d}.parquet"), compression="zstd")
        now = time.perf_counter()
        last_file_at = time.time()
        if first_file_at is None:
            first_file_at = last_file_at
        latencies.extend(now - ended for ended in pending_ended)
        files += 1
        rows_written += len(pending_rows)
        pending_rows = []
        pending_ended = []

    while events < args.expected:
        batch = consumer.consume(num_messages=1000, timeout=1.0)
        for msg in batch:
            if msg.error():
                continue
            if started is None:
                started = time.perf_counter()
                first_record_at = time.time()
            events += 1
            e = json.loads(msg.value())
            key = (e["uid"], e["session_id"])
            s = sessions.setdefault(
                key, {"uid": e["uid"], "session_id": e["session_id"], "calls": [], "requests": {}, "reward": None}
            )
            t = e["type"]
            if t == "request":
                if "prompt_ids" in e:
                    prompt = ids_of(e["prompt_ids"])
                else:
                    parent = s["requests"][e["parent_call_id"]]
                    prompt = parent["prompt"] + parent["output"] + ids_of(e["prompt_delta_ids"])
                s["requests"][e["call_id"]] = {"prompt": prompt, "output": []}
            elif t == "response":
                request = s["requests"][e["call_id"]]
                request["output"] = ids_of(e["output_ids"])
                s["calls"].append(
                    {"prompt": request["prompt"], "output": request["output"], "logprobs": logprobs_of(e.get("logprobs"))}
                )
            elif t == "reward" and e.get("target", "session") == "session":
                s["reward"] = (s["reward"] or 0.0) + e["value"]
            elif t == "session.end":
                pending_rows.extend(merge(sessions.pop(key)))
                pending_ended.append(time.perf_counter())
                if len(pending_rows) >= args.rows_per_file:
                    flush()
        if pending_ended and time.perf_counter() - pending_ended[0] >= args.max_file_age:
            flush()
    flush()
    seconds = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
    # VmHWM, not ru_maxrss: Linux carries maxrss over from the parent (the benchmark) across fork and exec.
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    latencies.sort()

    def rank(q):  # nearest rank, as trajflow's Metrics.quantile
        return latencies[max(0, math.ceil(q * len(latencies)) - 1)]

    print(
        json.dumps(
            {
                "events": events,
                "rows": rows_written,
                "seconds": seconds,
                "first_file_at": first_file_at,
                "first_record_at": first_record_at,
                "last_file_at": last_file_at,
                "peak_rss": peak,
                "cpu_seconds": usage.ru_utime + usage.ru_stime,
                "latency_p50": rank(0.5) if latencies else None,
                "latency_p99": rank(0.99) if latencies else None,
            }
        )
    )


if __name__ == "__main__":
    main()
