"""Tensors from a hand-built session: every value written out."""
import base64
import json

import numpy as np

from trajflow import TrajectoryReader, grpo_advantages, to_packed, to_verl

from conftest import trajflow


def events(tmp_path):
    def ev(seq, **f):
        return {"v": 1, "uid": "u", "session_id": "s", "seq": seq, "ts": 1000 + seq * 10, **f}

    lines = [
        ev(0, type="session.start", sample_index=0, group_size=1),
        ev(1, type="request", call_id="c1", prompt_ids=[1, 2], weight_version=7),
        ev(2, type="response", call_id="c1", output_ids=[3, 4], logprobs=[-0.5, -0.25], finish_reason="stop", weight_version=7),
        ev(3, type="request", call_id="c2", prompt_ids=[1, 2, 3, 4, 5], weight_version=7),
        ev(4, type="response", call_id="c2", output_ids=[6], logprobs=[-0.125], finish_reason="stop", weight_version=7),
        ev(5, type="reward", value=2.0),
        ev(6, type="session.end", status="ok"),
    ]
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_verl_and_packed_tensors_of_one_session(tmp_path):
    out = tmp_path / "out"
    trajflow("replay", str(events(tmp_path)), "--out", str(out), "--reward-grace-ms", "0")
    batch = TrajectoryReader(str(out), batch_rows=10).next_batch()
    t = to_verl(batch.table, pad_token_id=0)
    assert t["prompts"].tolist() == [[1, 2]]
    assert t["responses"].tolist() == [[3, 4, 5, 6]]
    assert t["response_mask"].tolist() == [[1, 1, 0, 1]]
    assert t["rollout_log_probs"].tolist() == [[-0.5, -0.25, 0.0, -0.125]]
    assert t["rm_scores"].tolist() == [[0, 0, 0, 2.0]]
    assert t["attention_mask"].tolist() == [[1] * 6]
    assert t["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5]]
    assert t["has_log_probs"].tolist() == [True] and t["has_reward"].tolist() == [True]
    p = to_packed(batch.table)
    assert p["input_ids"].tolist() == [1, 2, 3, 4, 5, 6]
    assert p["cu_seqlens"].tolist() == [0, 6]
    assert p["loss_mask"].tolist() == [0, 0, 1, 1, 0, 1]
    assert p["log_probs"].tolist() == [0, 0, -0.5, -0.25, 0, -0.125]
    assert p["parent_index"].tolist() == [-1] and p["shared_prefix_len"].tolist() == [0]
    assert grpo_advantages(batch.table).tolist() == [0.0]


def test_policy_versions_per_token_for_a_resumed_rollout(tmp_path):
    out = tmp_path / "out"
    path = events(tmp_path)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[2]["output_versions"] = [6, 7]  # c1 was interrupted by a weight update and resumed
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    trajflow("replay", str(path), "--out", str(out), "--reward-grace-ms", "0")
    batch = TrajectoryReader(str(out), batch_rows=10).next_batch()
    t = to_verl(batch.table)
    assert t["token_policy_versions"].tolist() == [[6, 7, -1, 7]]
    assert t["has_policy_versions"].tolist() == [True]
    assert to_packed(batch.table)["policy_versions"].tolist() == [-1, -1, 6, 7, -1, 7]
    assert batch.table.column("policy_version_min").to_pylist() == [6]


def test_missing_logprobs_are_nan_never_zero(tmp_path):
    out = tmp_path / "out"
    path = events(tmp_path)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for e in lines:
        e.pop("logprobs", None)
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    trajflow("replay", str(path), "--out", str(out), "--reward-grace-ms", "0")
    t = TrajectoryReader(str(out), batch_rows=10).next_batch().to_verl()
    assert t["has_log_probs"].tolist() == [False]
    assert np.isnan(t["rollout_log_probs"][0]).all()


def _routes(a):
    a = np.asarray(a, dtype="<i2")
    return {"b64": base64.b64encode(a.tobytes()).decode(), "dtype": "int16", "shape": list(a.shape)}


def test_routed_experts_and_temperatures_per_token(tmp_path):
    """R3 tensors: routing of every position aligned with the padded and packed input ids, bytes as sent."""
    out = tmp_path / "out"
    path = events(tmp_path)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    layers, top_k = 2, 3
    # Expert ids that say where they came from: position * 10 + layer, one slot per source phase.
    def block(positions, source):
        return [[[p * 10 + layer, source, layer] for layer in range(layers)] for p in positions]

    lines[1]["prompt_routed_experts"] = _routes(block([0, 1], 1))
    lines[1]["sampling"] = {"temperature": 0.7, "top_p": 0.9, "logprobs_mode": "raw"}
    lines[2]["routed_experts"] = _routes(block([2], 2))  # output [3, 4]: the last never went in
    lines[3]["prompt_routed_experts"] = _routes(block([0, 1, 2, 3, 4], 3))
    lines[3]["sampling"] = {"temperature": 1.0}
    lines[4]["routed_experts"] = _routes(block([5], 4))
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    trajflow("replay", str(path), "--out", str(out), "--reward-grace-ms", "0")
    batch = TrajectoryReader(str(out), batch_rows=10).next_batch()

    row = batch.table.to_pylist()[0]
    assert (row["routed_experts_dtype"], row["routed_experts_layers"], row["routed_experts_top_k"]) == ("int16", 2, 3)
    assert row["routed_experts_missing"] == 0
    expected = np.array(block([0, 1], 1) + block([2], 2) + block([3, 4], 3) + block([5], 4), dtype="<i2")
    assert row["routed_experts"] == expected.tobytes(), "the bytes as the engine sent them"
    assert row["flags"] == ["mixed_sampling"]

    t = to_verl(batch.table)
    assert t["routed_experts"].shape == (1, 6, layers, top_k)
    assert t["routed_experts"][0].tolist() == expected.tolist()
    assert t["has_routed_experts"].tolist() == [True]
    assert np.allclose(t["temperatures"][0], [0.7, 0.7, np.nan, 1.0], equal_nan=True)
    p = to_packed(batch.table)
    assert p["routed_experts"].tolist() == expected.tolist()


def test_routed_experts_missing_positions_read_as_minus_one(tmp_path):
    out = tmp_path / "out"
    path = events(tmp_path)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[2]["routed_experts"] = _routes([[[5]], [[6]]])  # only c1's output is covered
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    trajflow("replay", str(path), "--out", str(out), "--reward-grace-ms", "0")
    batch = TrajectoryReader(str(out), batch_rows=10).next_batch()
    # Positions 0, 1 and 4 are missing; 5, the last sampled token, was never an input and never counts.
    assert batch.table.column("routed_experts_missing").to_pylist() == [3]
    t = to_verl(batch.table)
    assert t["routed_experts"][0, :, 0, 0].tolist() == [-1, -1, 5, 6, -1, -1]
    assert t["has_routed_experts"].tolist() == [False]
    assert np.isnan(t["temperatures"]).all(), "never a made-up temperature"
