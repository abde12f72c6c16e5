"""Fixtures: real trajflow output, made by the trajflow CLI from generated gateway events.

`npm test` runs these tests with TRAJFLOW_NODE (the project's Node 24) and, for the Kafka test,
KAFKA_BROKERS (the broker it started).
"""
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The trainer adapters' suites run in the trainers' own environments (scripts/trainers.sh, scripts/test.ts
# sets TRAJFLOW_TRAINER_TESTS there), never in this one, which has neither verl nor AReaL.
collect_ignore = [] if os.environ.get("TRAJFLOW_TRAINER_TESTS") else ["trainers"]
NODE = os.environ.get("TRAJFLOW_NODE", str(ROOT / "node_modules" / "node" / "bin" / "node"))
BIN = str(ROOT / "bin" / "trajflow.js")


def require_all():
    """Whether every service and package must be there (CI, TRAJFLOW_REQUIRE_ALL): then a missing one fails."""
    return bool(os.environ.get("CI") or os.environ.get("TRAJFLOW_REQUIRE_ALL"))


def need(variable, what, module=False):
    """The value of a service's variable; without it the test (or, with `module`, the whole module) is
    skipped with the reason, or fails where every service must be there (require_all)."""
    value = os.environ.get(variable)
    if not value:
        reason = f"needs {variable} ({what}; npm test starts it)"
        if require_all():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason, allow_module_level=module)
    return value


def need_module(name, reason):
    """An importable module, or a skip with the reason (a failure where everything must be there)."""
    if require_all():
        try:
            return __import__(name, fromlist=["_"])
        except ImportError as err:
            pytest.fail(f"{reason}: {err}", pytrace=False)
    return pytest.importorskip(name, reason=reason)


def trajflow(*args, check=True, env=None, **kwargs):
    """Runs the trajflow CLI; returns the completed process."""
    result = subprocess.run(
        [NODE, BIN, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "TRAJFLOW_LOG_LEVEL": "warn", **(env or {})},
        **kwargs,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"trajflow {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


def session_events(uid, session_id, sample_index, group_size, seed, t0, turns=2, version=1, reward=None):
    """One linear agent session: a prompt, `turns` calls continuing each other, a reward, the end."""
    rnd = random.Random(seed)
    seq = 0
    ts = t0

    def ev(**fields):
        nonlocal seq, ts
        seq += 1
        ts += 100
        return {"v": 1, "uid": uid, "session_id": session_id, "seq": seq - 1, "ts": ts, **fields}

    out = [ev(type="session.start", sample_index=sample_index, group_size=group_size)]
    prompt = [rnd.randrange(1, 1000) for _ in range(rnd.randrange(4, 12))]
    for turn in range(turns):
        call = f"c{turn}"
        output = [rnd.randrange(1, 1000) for _ in range(rnd.randrange(2, 8))]
        out.append(ev(type="request", call_id=call, prompt_ids=prompt, weight_version=version))
        out.append(
            ev(
                type="response",
                call_id=call,
                output_ids=output,
                logprobs=[-rnd.random() for _ in output],
                finish_reason="stop",
                weight_version=version,
            )
        )
        prompt = prompt + output + [rnd.randrange(1, 1000) for _ in range(3)]
    out.append(ev(type="reward", value=reward if reward is not None else rnd.random()))
    out.append(ev(type="session.end", status="ok"))
    return out


def write_events(path, uids=12, group_size=4, versions=(1,), seed=0, prefix="prompt"):
    """GRPO groups of `group_size` rollouts for `uids` prompts; policies cycle through `versions`."""
    lines = []
    s = 0
    for u in range(uids):
        for k in range(group_size):
            events = session_events(
                f"{prefix}-{u}", f"r{k}", k, group_size, seed * 100_000 + s, s * 2_000, version=versions[u % len(versions)]
            )
            lines.extend(json.dumps(e) for e in events)
            s += 1
    Path(path).write_text("\n".join(lines) + "\n")
    return path


def grouped_replay(tmp, uids, rows_per_file, seed=0):
    """``uids`` GRPO groups of 4 replayed (grouped) into files of ``rows_per_file`` rows under ``tmp/out``."""
    events = write_events(tmp / "events.jsonl", uids=uids, group_size=4, seed=seed)
    out = tmp / "out"
    trajflow("replay", str(events), "--out", str(out), "--group", "--rows-per-file", str(rows_per_file), "--reward-grace-ms", "0")
    return out


@pytest.fixture
def grouped_output(tmp_path):
    """A grouped replay (many small files, a dead letter, a stray temporary) and its events."""
    events = write_events(tmp_path / "events.jsonl")
    with open(events, "a") as f:
        f.write("{broken\n")
    out = tmp_path / "out"
    trajflow("replay", str(events), "--out", str(out), "--group", "--rows-per-file", "5", "--reward-grace-ms", "0")
    # A writer's file in flight is never read.
    (out / ".trajflow-tmp-0123-part-99999.parquet").write_bytes(b"not yet a parquet file")
    return out
