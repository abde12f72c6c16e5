"""trajflow.emit's events without a broker: the shared test vector (test/vectors/gateway-events.json): the exact events, byte
for byte, that trajflow's own gateway writes for the same calls (test/emit-vectors.test.ts checks the
gateway against the same file), and the counts recording reports; and inputs the protocol refuses, which use no seq."""
import json
from pathlib import Path

import numpy as np
import pytest

from trajflow.events import EventBuilder

VECTOR = json.loads((Path(__file__).resolve().parents[2] / "test" / "vectors" / "gateway-events.json").read_text())


def experts(v):
    return np.array(v["ids"], dtype=v["dtype"]).reshape(v["shape"])


def run_step(b, step):
    """What the emitter's builder appends for one vector step."""
    op = step["op"]
    if op == "start":
        return {"events": b.start(step["ts"])}
    if op == "reward":
        fields = {k: step[k] for k in ("target", "key", "stage", "finished", "info") if k in step}
        return {"events": b.reward(step["ts"], step["value"], **fields)}
    if op == "end":
        return {"events": b.end(step["ts"], step["status"])}
    optional = ("logprobs", "messages", "tools", "sampling", "weight_version", "completion_version", "choice_index",
                "text", "tool_calls", "output_versions")
    built = b.call(
        step["call_id"],
        step["prompt_ids"],
        step["output_ids"],
        sent_at=step["sent_at"],
        done_at=step["done_at"],
        finish_reason=step["finish_reason"],
        **{k: step[k] for k in optional if k in step},
        **{k: experts(step[k]) for k in ("routed_experts", "prompt_routed_experts") if k in step},
    )
    return {"events": built.records, "missing_logprobs": built.missing_logprobs, "delta": built.delta}


@pytest.mark.parametrize("session", VECTOR["sessions"], ids=lambda s: f"{s['uid']}/{s['session_id']}")
def test_emits_the_vectors_events_byte_for_byte(session):
    b = EventBuilder(
        session["uid"],
        session["session_id"],
        session.get("sample_index"),
        session.get("group_size"),
        session.get("metadata"),
        max_tips=session["max_tips"],
    )
    for i, step in enumerate(session["steps"]):
        got = run_step(b, step)
        expected = {"events": [e.encode("utf-8") for e in step["events"]]}
        if step["op"] == "call":
            expected.update(missing_logprobs=step["missing_logprobs"], delta=step["delta"])
        assert got == expected, f"step {i} ({step['op']} {step.get('call_id', '')})"


def test_a_rejected_call_uses_no_seq():
    s = EventBuilder("u", "s")
    with pytest.raises(ValueError, match="logprobs has 1 values but output_ids has 2"):
        s.call("c1", [1], [2, 3], sent_at=1, done_at=2, logprobs=[-0.5])
    with pytest.raises(ValueError, match="not a token id"):
        s.call("c1", [1, -2], [3], sent_at=1, done_at=2)
    with pytest.raises(ValueError, match="must hold integers"):
        s.call("c1", [1.5], [3], sent_at=1, done_at=2)
    with pytest.raises(ValueError, match="above 0"):
        s.call("c1", [1], [3], sent_at=1, done_at=2, logprobs=[0.5])
    with pytest.raises(TypeError):  # not JSON: found while writing the request, after the start was built
        s.call("c1", [1], [3], sent_at=1, done_at=2, messages=[object()])
    assert (s.seq, s.started, s.tips()) == (0, False, [])
    assert [json.loads(e)["seq"] for e in s.call("c1", [1], [3], sent_at=1, done_at=2).records] == [0, 1, 2]
