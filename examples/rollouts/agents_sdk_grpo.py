"""One GRPO step with the OpenAI Agents SDK and a rule reward, driven by trajflow.rollout.

    python examples/rollouts/agents_sdk_grpo.py http://127.0.0.1:8000 rows [--model m]

8 arithmetic tasks, 4 sessions each: the agent must call its calculator tool; the reward is 1 when its
answer is the task's sum. Each group comes back with exactly its 4 sessions' rows, and the step's GRPO
advantages and verl tensors are built from them. Prints a JSON summary.
"""
import argparse
import json
import random

import openai
import pyarrow as pa
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

from trajflow import grpo_advantages, to_verl
from trajflow.rollout import Rollouts

ap = argparse.ArgumentParser()
ap.add_argument("gateway")
ap.add_argument("output")
ap.add_argument("--model", default="tiny")
args = ap.parse_args()
set_tracing_disabled(True)


@function_tool
def calc(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


async def agent(ctx):
    # A model of its own per session: the SDK's default client is global, and sessions run concurrently.
    async with openai.AsyncOpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key, max_retries=6) as client:
        calculator = Agent(
            name="calculator", instructions="Use calc.", tools=[calc],
            model=OpenAIChatCompletionsModel(model=args.model, openai_client=client),
            tool_use_behavior="stop_on_first_tool",
            model_settings=ModelSettings(tool_choice="required", max_tokens=32),
        )
        result = await Runner.run(calculator, ctx.task["prompt"], max_turns=3)
        return str(result.final_output)


def reward(task, answer):
    return 1.0 if answer.strip() == str(task["a"] + task["b"]) else 0.0


rng = random.Random(0)
tasks = []
for i in range(8):
    a, b = rng.randrange(100), rng.randrange(100)
    tasks.append({"uid": f"sum-{i}", "prompt": f"What is {a} + {b}?", "a": a, "b": b})

ro = Rollouts(agent_url=args.gateway, output=args.output)
ro.set_weights(0)
groups = ro.run(tasks, n=4, agent=agent, reward=reward, timeout_s=600, max_concurrency=16, failure_reward=0.0)
table = pa.concat_tables([g.table for g in groups.kept()])
advantages = grpo_advantages(table)
tensors = to_verl(table)
print(json.dumps({
    "groups": len(groups.kept()), "rows": table.num_rows, "responses_shape": list(tensors["responses"].shape),
    "advantages": len(advantages), "rewards": [g.rewards for g in groups],
    "stats": {k: v for k, v in groups.stats.items() if k in ("rollout/sessions_done", "rollout/calls", "rollout/reward_mean")},
}))
