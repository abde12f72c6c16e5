"""trajflow.integrations.areal under AReaL 1.0.4 (scripts/trainers.sh areal), through a real gateway in front of
llama.cpp's server with the OpenAI Agents SDK's tool agent: each episode is one group in AReaL's tensors
(its dtypes and shapes), AReaL's own concat_padded_tensors batches the episodes and its Normalization
normalizes the rewards by group; a group that cannot be trained comes back None."""
import asyncio

import pytest
import torch

from rollout_agents import rule, tool_agent
from rollout_fixtures import embedded, read_all  # noqa: F401 - fixture

from trajflow.integrations import final_rows
from trajflow.integrations.areal import TrajflowWorkflow, episode_tensors

N = 4


def engine(version):
    """AReaL's own remote vLLM engine, never initialized: the workflow asks it only for the policy version
    (generation goes through the gateway)."""
    from areal.api.cli_args import InferenceEngineConfig
    from areal.engine.vllm_remote import RemotevLLMEngine

    e = RemotevLLMEngine(InferenceEngineConfig())
    e.set_version(version)
    return e


def test_episodes_are_areals_tensors_and_batch_with_areals_own_utilities(embedded):  # noqa: F811
    from areal.api.cli_args import NormConfig
    from areal.api.workflow_api import RolloutWorkflow
    from areal.utils.data import Normalization, concat_padded_tensors

    gw, out = embedded
    answers = {}
    workflow = TrajflowWorkflow(tool_agent(answers), group_size=N, agent_url=gw.url, output=out, reward=rule, timeout_s=300)
    assert isinstance(workflow, RolloutWorkflow)
    data = [{"uid": f"areal-{i}", "prompt": f"What is {i} + 2?", "a": i, "b": 2} for i in range(3)]

    async def episodes():
        e = engine(7)
        return await asyncio.gather(*(workflow.arun_episode(e, d) for d in data))

    results = asyncio.run(episodes())
    assert all(r is not None for r in results)
    rows = read_all(out).to_pylist()
    for d, r in zip(data, results):
        assert set(r) == {"input_ids", "attention_mask", "loss_mask", "logprobs", "versions", "rewards"}
        assert (r["input_ids"].dtype, r["attention_mask"].dtype, r["loss_mask"].dtype) == (torch.int32, torch.bool, torch.int32)
        assert (r["logprobs"].dtype, r["versions"].dtype, r["rewards"].dtype) == (torch.float32, torch.int32, torch.float32)
        assert r["input_ids"].shape[0] == N and r["rewards"].shape == (N,)
        ours = final_rows([x for x in rows if x["uid"] == d["uid"]])
        assert len(ours) == N
        by_ids = {tuple(x["prompt_ids"] + x["response_ids"]): x for x in ours}
        for i in range(N):
            length = int(r["attention_mask"][i].sum())
            row = by_ids[tuple(r["input_ids"][i][:length].tolist())]
            p = len(row["prompt_ids"])
            assert r["loss_mask"][i][:p].sum() == 0 and r["loss_mask"][i][p:length].tolist() == list(row["response_mask"])
            assert (r["versions"][i][:p] == -1).all() and r["logprobs"][i][:p].abs().sum() == 0
            trained = r["loss_mask"][i][:length].bool()
            assert (r["versions"][i][:length][trained] == 7).all()  # the engine's version, posted to /weights
            assert r["versions"][i][p:length].tolist() == row["token_policy_versions"]  # the row's, token by token
            if row["rollout_log_probs"] is None:
                assert torch.isnan(r["logprobs"][i][:length][trained]).all()
            else:
                assert torch.allclose(r["logprobs"][i][p:length], torch.tensor(row["rollout_log_probs"]))
            assert r["rewards"][i].item() == pytest.approx(row["reward"]) == rule(d, answers[row["session_id"]])
    batch = concat_padded_tensors(results)
    assert batch["input_ids"].shape[0] == 3 * N and batch["rewards"].shape == (3 * N,)
    assert batch["attention_mask"].dtype == torch.bool
    norm = Normalization(NormConfig(mean_level="group", std_level="group", group_size=N))
    normalized = norm(batch["rewards"])
    for g in range(3):
        x = batch["rewards"][g * N : (g + 1) * N].double()
        expected = (x - x.mean()) / (x.std() + NormConfig().eps) if x.std() > 0 else (x - x.mean())
        assert torch.allclose(normalized[g * N : (g + 1) * N].double(), expected, atol=1e-5)
    stats = workflow.stats()
    assert stats["trajflow/groups"] == 3 and stats["trajflow/rows"] == 3 * N and stats["trajflow/staleness_max"] == 0


def test_a_group_that_cannot_be_trained_is_rejected(embedded):  # noqa: F811
    gw, out = embedded

    def broken(ctx):
        raise RuntimeError("the environment fell over")

    workflow = TrajflowWorkflow(broken, group_size=2, agent_url=gw.url, output=out, failure="drop", timeout_s=60)
    assert asyncio.run(workflow.arun_episode(engine(1), {"uid": "areal-broken"})) is None
    stats = workflow.stats()
    assert stats["trajflow/groups_rejected"] == 1 and stats["trajflow/groups_rejected_dropped"] == 1


def test_episode_tensors_never_invent():
    row = {"prompt_ids": [1, 2], "response_ids": [3, 4, 5], "response_mask": [1, 0, 1], "rollout_log_probs": None,
           "token_policy_versions": None, "reward": None}
    t = episode_tensors([row])
    assert t["loss_mask"].tolist() == [[0, 0, 1, 0, 1]] and t["versions"].tolist() == [[-1] * 5]
    assert torch.isnan(t["logprobs"][0][[2, 4]]).all() and t["logprobs"][0][[0, 1, 3]].abs().sum() == 0
    assert torch.isnan(t["rewards"][0])
