"""trajflow.integrations.slime through a real gateway in front of llama.cpp's server, with the OpenAI Agents
SDK's tool agent. slime is not in the package registries: the groups are checked against slime's documented
fields and invariants (slime/utils/types.py's Sample; GRPO's reshape to (-1, n_samples_per_prompt)), and the
data source is one shaped as slime's (``get_samples(k)`` -> k groups of n samples), not slime itself."""
import asyncio
import types

import pytest

from rollout_agents import rule, tool_agent
from rollout_fixtures import embedded, read_all  # noqa: F401 - fixture

from trajflow.control import GatewayControl
from trajflow.integrations import final_rows
from trajflow.integrations.slime import generate, generate_rollout, samples, status_of
from trajflow.rollout import ABORTED, FAILED, OK, SessionResult

FIELDS = {"group_index", "index", "prompt", "tokens", "response", "response_length", "label", "reward", "loss_mask",
          "rollout_log_probs", "weight_versions", "status", "session_id", "metadata"}
N = 3


class PromptSource:
    """slime's data source contract: get_samples(k) hands k groups of n samples of one prompt each."""

    def __init__(self, prompts, n):
        self.prompts, self.n, self.next = list(prompts), n, 0

    def get_samples(self, k):
        groups = []
        for _ in range(k):
            p = self.prompts[self.next % len(self.prompts)]
            gi = self.next
            groups.append([{"group_index": gi, "index": gi * self.n + j, "prompt": p["prompt"], "label": p["label"],
                            "metadata": {"a": p["a"], "b": p["b"]}} for j in range(self.n)])
            self.next += 1
        return groups


def args_for(gw, out, agent, **more):
    return types.SimpleNamespace(n_samples_per_prompt=N, rollout_batch_size=2, trajflow_agent=agent,
                                 trajflow_agent_url=gw.url, trajflow_output=out, trajflow_timeout_s=300, **more)


def sdk_reward(task, answer):
    meta = task["slime_metadata"]
    return rule(meta, answer)


def test_generate_rollout_hands_back_whole_contiguous_groups_of_n(embedded):  # noqa: F811
    gw, out = embedded
    answers = {}
    args = args_for(gw, out, tool_agent(answers), trajflow_reward=sdk_reward)
    GatewayControl(gw.url).set_weights(2)  # the policy version the gateway stamps on what it samples
    source = PromptSource([{"prompt": f"What is {i} + 3?", "label": str(i + 3), "a": i, "b": 3} for i in range(4)], N)
    result = generate_rollout(args, 0, source)
    groups = result.samples
    assert len(groups) == args.rollout_batch_size and all(len(g) == N for g in groups)
    rows = {r["key"]: r for r in read_all(out).to_pylist()}
    flat = [s for g in groups for s in g]
    for g in groups:  # contiguous and whole: one group index, n consecutive indices, GRPO-reshapable rewards
        assert len({s["group_index"] for s in g}) == 1
        assert [s["index"] for s in g] == list(range(g[0]["index"], g[0]["index"] + N))
        assert all(isinstance(s["reward"], float) for s in g)
    for s in flat:
        assert set(s) == FIELDS
        row = rows[s["metadata"]["trajflow_key"]]
        assert s["tokens"] == row["prompt_ids"] + row["response_ids"]
        assert s["response_length"] == len(row["response_ids"]) == len(s["loss_mask"])
        assert s["loss_mask"] == list(row["response_mask"])
        if row["rollout_log_probs"] is None:
            assert s["rollout_log_probs"] is None and "missing_logprobs" in row["flags"]
        else:
            assert len(s["rollout_log_probs"]) == s["response_length"]
        assert s["status"] in ("completed", "truncated")
        assert s["reward"] == row["reward"] == rule(row_meta(source, s), answers[s["session_id"]])
        assert s["weight_versions"] == ["2"] * len(row["turn_end_indices"])
    assert result.metrics["trajflow/groups"] == 2 and result.metrics["trajflow/rows"] == 2 * N


def row_meta(source, sample):
    p = source.prompts[sample["group_index"] % len(source.prompts)]
    return {"a": p["a"], "b": p["b"]}


def test_the_per_sample_generate_function(embedded):  # noqa: F811
    gw, out = embedded
    args = args_for(gw, out, "rollout_agents:chat_agent")
    sample = {"group_index": 99, "index": 297, "prompt": "Hi.", "label": None, "metadata": {}}

    async def three():
        return await asyncio.gather(*(generate(args, dict(sample, index=297 + j), {"temperature": 0}) for j in range(N)))

    got = asyncio.run(three())
    assert [s["index"] for s in got] == [297, 298, 299] and {s["group_index"] for s in got} == {99}
    rows = {r["key"]: r for r in read_all(out).to_pylist()}
    for s in got:
        assert s["reward"] == 0.25 and s["status"] == "completed"
        assert s["tokens"] == rows[s["metadata"]["trajflow_key"]]["prompt_ids"] + rows[s["metadata"]["trajflow_key"]]["response_ids"]
    assert sorted(rows[s["metadata"]["trajflow_key"]]["sample_index"] for s in got) == [0, 1, 2]


def test_statuses_map_from_how_each_session_ended():
    def result(status):
        return SessionResult("s", 0, 0, status)

    assert status_of({"finish_reasons": ["stop"]}, result(OK)) == "completed"
    assert status_of({"finish_reasons": ["tool_calls", "length"]}, result(OK)) == "truncated"
    assert status_of({"finish_reasons": ["abort"]}, None) == "aborted"
    assert status_of({"finish_reasons": ["stop"]}, result(ABORTED)) == "aborted"
    assert status_of({"finish_reasons": ["stop"]}, result(FAILED)) == "failed"
    row = {"key": "u_s_1", "session_id": "s", "index": 1, "prompt_ids": [1], "response_ids": [2, 3], "response_mask": [1, 0],
           "rollout_log_probs": None, "reward": None, "token_policy_versions": [4, -1], "turn_end_indices": [0],
           "finish_reasons": ["stop"], "flags": []}
    (s,) = samples([dict(row, index=0, response_ids=[9], response_mask=[1], turn_end_indices=[0]), row], group_index=5)
    assert s["tokens"] == [1, 2, 3] and s["weight_versions"] == ["4"] and s["rollout_log_probs"] is None
    assert s["reward"] is None and s["index"] == 0 and s["group_index"] == 5
    assert final_rows([row]) == [row]
    with pytest.raises(Exception, match="ADAPTER_CONFIG"):
        generate_rollout(types.SimpleNamespace(n_samples_per_prompt=2, rollout_batch_size=1), 0, PromptSource([], 2))
