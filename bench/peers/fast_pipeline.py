"""The Python pipeline a performance-minded RL team writes, as the second peer of bench/peers.ts.

Same job as linear_merger.py (linear merge of each session's calls, verl's and Agent Lightning's way),
written for speed: confluent-kafka batches, orjson, one numpy array per call (prompt, output, logprobs;
a delta prompt is its parent's arrays concatenated with the delta), a prefix check against the previous
call's arrays instead of lists, rows kept as lists of numpy chunks, and files built column-wise
(pyarrow ListArray.from_arrays over one concatenated buffer per column), Parquet zstd without
dictionaries, written by a background thread (pyarrow releases the GIL while it encodes). Offsets are
committed after each file, up to the first message of the oldest session still open on each partition
(at least once), as a production consumer must.

usage: fast_pipeline.py <brokers> <topic> <out-dir> <expected-events> [--rows-per-file N] [--max-file-age S]
Prints JSON: events, rows, seconds (first message to last file written), first_record_at, first_file_at and last_file_at (epoch seconds),
peak RSS, CPU seconds (user + system, all threads), and the latency from each session's end to the file holding it written (p50, p99).
"""
import argparse
import base64
import math
import os
import resource
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, TopicPartition

I32 = np.dtype("<i4")
F32 = np.dtype("<f4")
EMPTY_I32 = np.zeros(0, I32)


def ids_of(value):
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["b64"]), dtype=I32)
    return np.array(value, dtype=I32)


def logprobs_of(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["b64"]), dtype=F32)
    return np.array(value, dtype=F32)


class Rows:
    """Rows waiting for a file, column by column: numpy chunks and per-row lengths."""

    def __init__(self):
        self.keys, self.uids, self.sessions, self.index, self.reward, self.turns, self.trained = ([] for _ in range(7))
        self.prompt, self.prompt_len = [], []
        self.response, self.mask, self.logprobs, self.response_len, self.has_logprobs = [], [], [], [], []
        self.ended = []  # when each session in here ended

    def __len__(self):
        return len(self.keys)

    def add_session(self, s):
        self.next_index = 0
        row = None
        prev = None  # (prompt, output) of the previous call
        for prompt, output, lps in s["calls"]:
            extends = False
            if prev is not None and row is not None:
                lp, lo = len(prev[0]), len(prev[1])
                extends = (
                    len(prompt) >= lp + lo
                    and np.array_equal(prompt[:lp], prev[0])
                    and np.array_equal(prompt[lp : lp + lo], prev[1])
                )
            if extends:
                gap = prompt[lp + lo :]
                row["response"] += [gap, output]
                row["mask"] += [np.zeros(len(gap), np.int8), np.ones(len(output), np.int8)]
                row["logprobs"] += [np.zeros(len(gap), F32), lps if lps is not None else np.zeros(len(output), F32)]
                row["has_logprobs"] &= lps is not None
                row["turns"] += 1
                row["trained"] += len(output)
            else:
                row = {
                    "prompt": prompt,
                    "response": [output],
                    "mask": [np.ones(len(output), np.int8)],
                    "logprobs": [lps if lps is not None else np.zeros(len(output), F32)],
                    "has_logprobs": lps is not None,
                    "turns": 1,
                    "trained": len(output),
                }
                self._start_row(s, row)
            prev = (prompt, output)
        self._end_row(row)

    def _start_row(self, s, row):
        if self.pending_row is not None:
            self._end_row(self.pending_row)
        i = self.next_index
        self.next_index += 1
        self.keys.append(f"{s['uid']}_{s['session_id']}_{i}")
        self.uids.append(s["uid"])
        self.sessions.append(s["session_id"])
        self.index.append(i)
        self.reward.append(s["reward"])
        self.pending_row = row

    def _end_row(self, row):
        if row is None:
            return
        self.prompt.append(row["prompt"])
        self.prompt_len.append(len(row["prompt"]))
        self.response += row["response"]
        self.mask += row["mask"]
        self.logprobs += row["logprobs"]
        self.response_len.append(sum(len(c) for c in row["response"]))
        self.has_logprobs.append(row["has_logprobs"])
        self.turns.append(row["turns"])
        self.trained.append(row["trained"])
        self.pending_row = None

    pending_row = None
    next_index = 0

    def table(self):
        def lists(chunks, lengths, dtype):
            offsets = np.zeros(len(lengths) + 1, np.int32)
            np.cumsum(lengths, out=offsets[1:])
            values = np.concatenate(chunks) if chunks else np.zeros(0, dtype)
            return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(dtype, copy=False)))

        logprobs = lists(self.logprobs, self.response_len, F32)
        mask = pa.array(np.logical_not(self.has_logprobs))
        logprobs = pa.ListArray.from_arrays(logprobs.offsets, logprobs.values, mask=mask)
        return pa.table(
            {
                "key": pa.array(self.keys, pa.string()),
                "uid": pa.array(self.uids, pa.string()),
                "session_id": pa.array(self.sessions, pa.string()),
                "index": pa.array(self.index, pa.int32()),
                "prompt_ids": lists(self.prompt, self.prompt_len, I32),
                "response_ids": lists(self.response, self.response_len, I32),
                "response_mask": lists(self.mask, self.response_len, np.int8),
                "rollout_log_probs": logprobs,
                "reward": pa.array(self.reward, pa.float64()),
                "num_turns": pa.array(self.turns, pa.int32()),
                "num_trained_tokens": pa.array(self.trained, pa.int32()),
            }
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("brokers")
    parser.add_argument("topic")
    parser.add_argument("out")
    parser.add_argument("expected", type=int)
    parser.add_argument("--rows-per-file", type=int, default=1000)
    parser.add_argument("--max-file-age", type=float, default=1.0)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    consumer = Consumer(
        {
            "bootstrap.servers": args.brokers,
            "group.id": f"fast-{args.topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
        }
    )
    consumer.subscribe([args.topic])
    writer = ThreadPoolExecutor(max_workers=1)
    sessions = {}  # (uid, session_id) -> session
    rows = Rows()
    latencies, writes = [], []
    state = {"files": 0, "rows": 0, "first_file_at": None, "last_file_at": None}
    events = 0
    started = None
    first_record_at = None

    def write(table, ended, path, offsets):
        pq.write_table(table, path, compression="zstd", use_dictionary=False)
        now = time.perf_counter()
        state["last_file_at"] = time.time()
        if state["first_file_at"] is None:
            state["first_file_at"] = state["last_file_at"]
        latencies.extend(now - t for t in ended)
        if offsets:
            consumer.commit(offsets=offsets, asynchronous=True)

    def flush():
        nonlocal rows
        if len(rows) == 0:
            return
        # Committable: per partition, the first offset of its oldest open session, else what was read.
        low = dict(positions)
        for s in sessions.values():
            p, o = s["first"]
            if o < low[p]:
                low[p] = o
        offsets = [TopicPartition(args.topic, p, o) for p, o in low.items()]
        path = os.path.join(args.out, f"part-{state['files']:05d}.parquet")
        state["files"] += 1
        state["rows"] += len(rows)
        writes.append(writer.submit(write, rows.table(), rows.ended, path, offsets))
        rows = Rows()

    positions = {}  # partition -> next offset
    while events < args.expected:
        batch = consumer.consume(num_messages=10_000, timeout=0.1)
        for msg in batch:
            if msg.error():
                continue
            if started is None:
                started = time.perf_counter()
                first_record_at = time.time()
            events += 1
            partition, offset = msg.partition(), msg.offset()
            positions[partition] = offset + 1
            e = orjson.loads(msg.value())
            key = (e["uid"], e["session_id"])
            s = sessions.get(key)
            if s is None:
                s = sessions[key] = {
                    "uid": e["uid"],
                    "session_id": e["session_id"],
                    "calls": [],
                    "requests": {},
                    "reward": None,
                    "first": (partition, offset),
                }
            t = e["type"]
            if t == "request":
                if "prompt_ids" in e:
                    prompt = ids_of(e["prompt_ids"])
                else:
                    parent = s["requests"][e["parent_call_id"]]
                    prompt = np.concatenate((parent[0], parent[1], ids_of(e["prompt_delta_ids"])))
                s["requests"][e["call_id"]] = [prompt, EMPTY_I32]
            elif t == "response":
                request = s["requests"][e["call_id"]]
                request[1] = ids_of(e["output_ids"])
                s["calls"].append((request[0], request[1], logprobs_of(e.get("logprobs"))))
            elif t == "reward" and e.get("target", "session") == "session":
                s["reward"] = (s["reward"] or 0.0) + e["value"]
            elif t == "session.end":
                rows.add_session(sessions.pop(key))
                rows.ended.append(time.perf_counter())
                if len(rows) >= args.rows_per_file:
                    flush()
        if rows.ended and time.perf_counter() - rows.ended[0] >= args.max_file_age:
            flush()
    flush()
    for w in writes:
        w.result()
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
        orjson.dumps(
            {
                "events": events,
                "rows": state["rows"],
                "seconds": seconds,
                "first_file_at": state["first_file_at"],
                "first_record_at": first_record_at,
                "last_file_at": state["last_file_at"],
                "peak_rss": peak,
                "cpu_seconds": usage.ru_utime + usage.ru_stime,
                "latency_p50": rank(0.5) if latencies else None,
                "latency_p99": rank(0.99) if latencies else None,
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
