"""trajflow.integrations.verl under verl 0.9.1's own machinery (scripts/trainers.sh verl), through a real
gateway in front of llama.cpp's server with the OpenAI Agents SDK's tool agent and Claude Code:

- the agent loop ``trajflow`` run by verl's own ``AgentLoopWorker.generate_sequences`` (registry, hydra
  instantiation, per-sample postprocessing, batching): its DataProto's tensors equal the rows;
- the v1 manager on a local Ray with TransferQueue's simple storage: verl's own v1 ``ReplayBuffer`` samples
  every group whole, the fields and tags are the rows', and verl's GRPO advantage runs on them.
"""
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch

from gateway_proc import harness_bin
from rollout_agents import rule, tool_agent
from rollout_fixtures import embedded, read_all  # noqa: F401 - fixture

from trajflow.integrations.verl import TrajflowAgentLoop, TrajflowRolloutManager, agent_loop_output
from trajflow.rollout import RolloutError, cli_agent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROMPT_LENGTH, RESPONSE_LENGTH = 4096, 2048
# Logical CPUs for the local Ray: TransferQueue's controller and its two storage units reserve one each
# (Ray does not hold a process to its reservation; the machine's two cores run them all).
RAY_CPUS = 4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The tiny random-weight checkpoint (its tokenizer is what verl's config loads), written by the
    project's script with the project's Python (gguf)."""
    path = str(tmp_path_factory.mktemp("tiny-hf"))
    subprocess.run([os.path.join(ROOT, ".cache", "python", "bin", "python"), os.path.join(ROOT, "scripts", "tiny_llm.py"),
                    "--hf-model", path], check=True, capture_output=True)
    return path


def verl_config(model_dir, gw, out, n, agent, *more):
    """verl's own trainer config (ppo_trainer.yaml composed by hydra), as a run would have it."""
    import verl
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.n={n}",
            f"actor_rollout_ref.rollout.prompt_length={PROMPT_LENGTH}",
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=trajflow",
            "+actor_rollout_ref.rollout.agent.agent_loop_manager_class=trajflow.integrations.verl.TrajflowRolloutManager",
            f"+trajflow.agent={agent}",
            f"+trajflow.agent_url={gw.url}",
            f"+trajflow.output={out}",
            "+trajflow.timeout_s=300",
            *more,
        ])
    return cfg


# The agents, importable by name as a trainer's config names them (+trajflow.agent=module:attr).
ANSWERS = {}
solve = tool_agent(ANSWERS)


def reward(task, answer):
    return rule(task, answer)


async def claude_or_solve(ctx):
    """Claude Code for the tasks that ask for it, else the Agents SDK's tool agent."""
    if ctx.task.get("harness") == "claude":
        home = tempfile.mkdtemp(prefix="claude-home-")
        agent = cli_agent([os.path.join(harness_bin(), "claude"), "-p", "--output-format", "json", "{task[prompt]}"],
                          env={"HOME": home})
        return await agent(ctx)
    return await solve(ctx)


def scored(task, result):
    if task.get("harness") == "claude":
        return 1.0 if json.loads(result.stdout)["is_error"] is False else 0.0
    return rule(task, result)


def tasks(k, prefix):
    return [{"uid": f"{prefix}-{i}", "prompt": f"What is {i} + {i + 1}?", "a": i, "b": i + 1} for i in range(k)]


def objects(values):
    """A 1-d numpy object array (verl's non-tensor batch columns), whatever the values' own shape."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def assert_sequence(row, prompts, responses, mask, logprobs):
    """One batch entry (verl's padding removed) is the row: the same ids, mask and logprobs."""
    assert prompts == row["prompt_ids"] and responses == row["response_ids"]
    assert mask == list(row["response_mask"])
    if row["rollout_log_probs"] is None:
        assert "missing_logprobs" in row["flags"] and all(math.isnan(x) for x in logprobs)
    else:
        assert np.allclose(logprobs, row["rollout_log_probs"], atol=1e-6)


def test_the_agent_loop_under_verls_own_agent_loop_worker(embedded, model_dir):  # noqa: F811
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry

    gw, out = embedded
    n = 3
    cfg = verl_config(model_dir, gw, out, n, "test_verl:solve", "+trajflow.reward=test_verl:reward")
    assert _agent_loop_registry["trajflow"] == {"_target_": "trajflow.integrations.verl.TrajflowAgentLoop"}
    worker = AgentLoopWorker(cfg, llm_client=None)
    prompts = tasks(2, "verl-loop")
    # The batch as verl's trainer hands it over: each prompt repeated n times (interleaved), its dataset fields.
    rep = [t for t in prompts for _ in range(n)]
    batch = DataProto(batch=None, non_tensor_batch={
        "uid": np.array([t["uid"] for t in rep], dtype=object),
        "raw_prompt": objects([[{"role": "user", "content": t["prompt"]}] for t in rep]),
        "prompt": np.array([t["prompt"] for t in rep], dtype=object),
        "a": np.array([t["a"] for t in rep], dtype=object),
        "b": np.array([t["b"] for t in rep], dtype=object),
        "index": np.array([i for i, _ in enumerate(prompts) for _ in range(n)], dtype=object),
    }, meta_info={"global_steps": 1})
    result = asyncio.run(worker.generate_sequences(batch))
    rows = {r["key"]: r for r in read_all(out).to_pylist()}
    b = result.batch
    assert b["prompts"].shape == (len(rep), PROMPT_LENGTH) and b["responses"].shape == (len(rep), RESPONSE_LENGTH)
    seen_sessions = set()
    for i in range(len(rep)):
        row = rows[result.non_tensor_batch["trajflow_key"][i]]
        assert row["uid"] == rep[i]["uid"] and row["group_size"] == n
        seen_sessions.add(row["session_id"])
        attention = b["attention_mask"][i].bool()
        p_keep, r_keep = attention[:PROMPT_LENGTH], attention[PROMPT_LENGTH:]
        prompt_ids = b["prompts"][i][p_keep].tolist()
        length = int(r_keep.sum())
        assert_sequence(row, prompt_ids, b["responses"][i][:length].tolist(), b["response_mask"][i][:length].tolist(),
                        b["rollout_log_probs"][i][:length].tolist())
        pad = worker.tokenizer.pad_token_id  # verl pads with the tokenizer's own pad token
        assert not b["response_mask"][i][length:].any() and (b["responses"][i][length:] == pad).all()
        assert b["input_ids"][i][attention].tolist() == row["prompt_ids"] + row["response_ids"]
        # verl's own postprocessing puts the reward on the last response token.
        scores = b["rm_scores"][i]
        assert scores[length - 1].item() == pytest.approx(row["reward"]) and scores.abs().sum().item() == pytest.approx(abs(row["reward"]))
        assert row["reward"] == rule(rep[i], ANSWERS[row["session_id"]])
        assert result.non_tensor_batch["__num_turns__"][i] == row["num_turns"]
    # n distinct sessions per uid, each with its own sample index in the group.
    assert len(seen_sessions) == len(rep)
    by_uid = {}
    for r in rows.values():
        if r["session_id"] in seen_sessions:
            by_uid.setdefault(r["uid"], set()).add(r["sample_index"])
    assert by_uid == {t["uid"]: set(range(n)) for t in prompts}
    stats = TrajflowAgentLoop.stats.pop()
    assert stats["trajflow/groups"] == len(rep) and stats["trajflow/rows"] == len(rep)


def test_agent_loop_output_is_verls_type_and_never_invents():
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    row = {"key": "u_s_0", "session_id": "s", "prompt_ids": [1, 2, 3], "response_ids": [4, 5, 6, 7],
           "response_mask": [1, 1, 0, 1], "rollout_log_probs": None, "reward": None, "num_turns": 2,
           "flags": ["missing_logprobs"], "policy_version_min": 3, "policy_version_max": 4}
    out = agent_loop_output(row, prompt_length=2, response_length=3)
    assert isinstance(out, AgentLoopOutput)
    assert out.prompt_ids == [2, 3] and out.response_ids == [4, 5, 6] and out.response_mask == [1, 1, 0]
    assert all(math.isnan(x) for x in out.response_logprobs) and out.reward_score is None
    assert out.extra_fields["trajflow_truncated"] and not out.extra_fields["trajflow_has_log_probs"]
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (3, 4)
    assert "rm_scores" not in out.as_dict()  # no reward: verl's type has no score rather than 0


def test_the_v1_manager_through_transferqueue_and_verls_replay_buffer(embedded, model_dir):  # noqa: F811
    import ray
    import transfer_queue as tq
    from tensordict import NonTensorStack, TensorDict
    from verl import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    gw, out = embedded
    n = 2
    cfg = verl_config(model_dir, gw, out, n, "test_verl:claude_or_solve", "+trajflow.reward=test_verl:scored")
    ray.init(num_cpus=RAY_CPUS, include_dashboard=False, namespace="trajflow-test",
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}})
    try:
        tq.init()
        prompts = tasks(3, "verl-v1") + [{"uid": "verl-v1-claude", "prompt": "Say hi.", "harness": "claude", "a": 0, "b": 0}]
        steps = 5
        uids = [t["uid"] for t in prompts]
        # What verl's v1 trainer does before dispatching a batch: each prompt's record, pending.
        tq.kv_batch_put(keys=uids, partition_id="train",
                        tags=[{"is_prompt": True, "status": "pending", "global_steps": steps} for _ in uids])
        batch = TensorDict({
            "uid": NonTensorStack(*uids),
            "raw_prompt": NonTensorStack(*[[{"role": "user", "content": t["prompt"]}] for t in prompts]),
            "prompt": NonTensorStack(*[t["prompt"] for t in prompts]),
            "harness": NonTensorStack(*[t.get("harness", "sdk") for t in prompts]),
            "a": torch.tensor([t["a"] for t in prompts]),
            "b": torch.tensor([t["b"] for t in prompts]),
            "index": torch.arange(len(prompts)),
            "global_steps": NonTensorStack(*[steps] * len(prompts)),
        }, batch_size=len(prompts))
        manager = TrajflowRolloutManager.create(config=cfg, llm_client=None)
        manager.generate_sequences(batch)  # returns at once; the groups land as they complete
        manager.wait(900)  # every group written (an actor's failure surfaces here, not as a hung sample)
        buffer = ReplayBuffer("sync", cfg, None, "drop", {}, poll_interval=0.2)
        meta, _ = buffer.sample(steps, "train", len(prompts))
        rows = {r["key"]: r for r in read_all(out).to_pylist()}
        ours = {k: r for k, r in rows.items() if r["uid"] in uids}
        assert sorted(meta.keys) == sorted(ours)  # every row of every group, keyed as the rows are
        for key, tag in zip(meta.keys, meta.tags):
            r = ours[key]
            assert tag["status"] == "success" and tag["global_steps"] == steps
            assert (tag["prompt_len"], tag["response_len"]) == (len(r["prompt_ids"]), len(r["response_ids"]))
            assert tag["seq_len"] == tag["prompt_len"] + tag["response_len"]
            assert (tag["min_global_steps"], tag["max_global_steps"]) == (r["policy_version_min"], r["policy_version_max"]) == (steps, steps)
        for uid in uids:  # whole groups: n sessions each, every one with its rows
            assert len({r["session_id"] for r in ours.values() if r["uid"] == uid}) == n
        data = tq.kv_batch_get(keys=meta.keys, partition_id="train")
        for i, key in enumerate(meta.keys):
            r = ours[key]
            assert data["prompts"][i].tolist() == r["prompt_ids"] and data["responses"][i].tolist() == r["response_ids"]
            assert data["response_mask"][i].tolist() == list(r["response_mask"]) == data["loss_mask"][i].tolist()
            assert data["input_ids"][i].tolist() == r["prompt_ids"] + r["response_ids"]
            assert data["attention_mask"][i].tolist() == [1] * (len(r["prompt_ids"]) + len(r["response_ids"]))
            assert data["position_ids"][i].tolist() == list(range(len(r["prompt_ids"]) + len(r["response_ids"])))
            scores = data["rm_scores"][i].tolist()
            assert scores[-1] == pytest.approx(r["reward"]) and sum(map(abs, scores[:-1])) == 0
            assert_sequence(r, data["prompts"][i].tolist(), data["responses"][i].tolist(),
                            data["response_mask"][i].tolist(), data["rollout_log_probs"][i].tolist())
        # verl's own GRPO advantage, as its v1 trainer computes it: on the padded batch, and per final output.
        fields = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["uid", "response_mask", "rm_scores"])
        padded = DataProto(batch=fields.to_padded_tensor())
        padded.non_tensor_batch["uid"] = np.array(padded.batch.pop("uid").tolist(), dtype=object)
        advantages, _ = compute_grpo_outcome_advantage(padded.batch["rm_scores"], padded.batch["response_mask"],
                                                       padded.non_tensor_batch["uid"])
        assert advantages.shape == padded.batch["response_mask"].shape and torch.isfinite(advantages).all()
        padded.batch["token_level_rewards"] = padded.batch["rm_scores"]
        multi = compute_advantage_for_multi_trajectories(padded, batch_keys=list(meta.keys), adv_estimator="grpo", num_repeat=n)
        for uid in uids:  # sessions of a group with different rewards get advantages of both signs
            idx = [i for i, k in enumerate(meta.keys) if k.split("_")[0] == uid]
            rewards = {ours[meta.keys[i]]["reward"] for i in idx}
            adv = [multi.batch["advantages"][i][padded.batch["response_mask"][i].bool()] for i in idx]
            if len(rewards) > 1:
                assert min(a.min().item() for a in adv) < 0 < max(a.max().item() for a in adv)
            else:
                assert all(a.abs().max().item() == 0 for a in adv if a.numel())
        metrics = manager.metrics()
        assert metrics["trajflow/groups"] == len(prompts) and metrics["trajflow/rows"] == len(ours)
        assert metrics.get("trajflow/staleness_max", 0) == 0
    finally:
        tq.close()
        ray.shutdown()


def test_a_uid_verls_keys_would_split_fails_its_prompt(embedded, model_dir):  # noqa: F811
    import ray
    import transfer_queue as tq
    from tensordict import NonTensorStack, TensorDict

    gw, out = embedded
    cfg = verl_config(model_dir, gw, out, 2, "test_verl:solve")
    ray.init(num_cpus=RAY_CPUS, include_dashboard=False, namespace="trajflow-test-uid",
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}})
    try:
        tq.init()
        tq.kv_put(key="bad_uid", partition_id="train", tag={"is_prompt": True, "status": "pending", "global_steps": 1})
        manager = TrajflowRolloutManager.create(config=cfg)
        manager.generate_sequences(TensorDict({"uid": NonTensorStack("bad_uid"), "prompt": NonTensorStack("Hi."),
                                               "global_steps": NonTensorStack(1)}, batch_size=1))
        manager.wait(120)
        assert tq.kv_list()["train"]["bad_uid"]["status"] == "failure"
        assert manager.metrics()["trajflow/groups"] == 0
    finally:
        tq.close()
        ray.shutdown()
    with pytest.raises(RolloutError, match="ADAPTER_CONFIG.*agent_url is required.*failure must be"):
        from trajflow.integrations import AdapterConfig

        AdapterConfig.from_options({"agent": "x:y", "output": "/tmp", "failure": "explode"})
