"""The asynchronous loop (AReaL's, slime's train_async, verl's separate-async mode): groups stream in
as they complete while the "trainer" steps, and rows more than one policy version behind are dropped.

    python examples/rollouts/async_loop.py http://127.0.0.1:8000 rows [--model m]

Every 2 groups the trainer takes an optimizer step and announces the new version (POST /weights).
Prints each group's uid, version range and stale rows, as JSON lines.
"""
import argparse
import asyncio
import json

import openai

from trajflow.rollout import Rollouts

ap = argparse.ArgumentParser()
ap.add_argument("gateway")
ap.add_argument("output")
ap.add_argument("--model", default="tiny")
args = ap.parse_args()


async def agent(ctx):
    async with openai.AsyncOpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key, max_retries=3) as client:
        answer = await client.chat.completions.create(
            model=args.model, max_tokens=16, messages=[{"role": "user", "content": ctx.task["prompt"]}])
    return float(len(answer.choices[0].message.content or "") % 2)  # a stand-in for the environment's check


async def main():
    ro = Rollouts(agent_url=args.gateway, output=args.output, progress=False)
    version = 0
    await asyncio.to_thread(ro.set_weights, version)
    tasks = ({"uid": f"prompt-{i}", "prompt": f"Tell me a fact about the number {i}."} for i in range(8))
    batch = []
    async for group in ro.astream(tasks, n=4, agent=agent, max_groups_in_flight=4, max_policy_lag=1,
                                  stale="drop", timeout_s=600):
        versions = group.table.column("weight_version_min").to_pylist()
        print(json.dumps({"uid": group.uid, "rows": group.table.num_rows, "stale_rows": group.stale_rows,
                          "versions": sorted(set(versions)), "trained_at": version}), flush=True)
        batch.append(group)
        if len(batch) == 2:  # an optimizer step on two groups, then the new weights are served
            batch.clear()
            version += 1
            await asyncio.to_thread(ro.set_weights, version)


asyncio.run(main())
