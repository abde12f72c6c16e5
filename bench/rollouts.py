"""The rollout driver's own cost, against a gateway in front of an instant upstream (bench/rollouts.ts
starts both): sessions/s at 1, 64 and 512 concurrent agents, the driver's CPU per session, and the time
from a group's last session end to its rows in hand; beside it, the same step written by hand with the
control client and the reader. Prints one JSON object.

    python bench/rollouts.py AGENT_URL OUT
"""
import asyncio
import json
import statistics
import sys
import time

import openai

from trajflow import TrajectoryReader
from trajflow.control import GatewayControl
from trajflow.rollout import Rollouts

URL, OUT = sys.argv[1], sys.argv[2]
N = 4  # sessions per group


# One HTTP client for every session's AsyncOpenAI: a client made per session builds its own TLS context
# (loading the CA bundle), measured at 23 ms of CPU each, 65 % of a step at 64 agents; shared, the
# figures below are the driver's and the gateway's. Made in each step's event loop.
HTTP = {}


async def agent(ctx):
    loop = asyncio.get_running_loop()
    if loop not in HTTP:
        HTTP.clear()
        HTTP[loop] = openai.DefaultAsyncHttpxClient()
    c = openai.AsyncOpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key, max_retries=0, timeout=60,
                           http_client=HTTP[loop])
    await c.chat.completions.create(model="instant", max_tokens=8, messages=[{"role": "user", "content": "Go."}])
    return 1.0


def driver_step(ro, label, groups, concurrency):
    tasks = [{"uid": f"{label}-{i}"} for i in range(groups)]
    cpu, wall = time.process_time(), time.perf_counter()
    result = ro.run(tasks, N, agent, max_concurrency=concurrency, timeout_s=120)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    sessions = groups * N
    assert all(len(g.table) == N for g in result), "a group came back without its rows"
    s = result.stats
    return {
        "concurrency": concurrency, "sessions": sessions, "seconds": wall, "sessions_per_s": sessions / wall,
        "cpu_ms_per_session": 1000 * cpu / sessions, "rows_wait_p50_ms": 1000 * s["rollout/rows_wait_p50_s"],
        "rows_wait_p99_ms": 1000 * s["rollout/rows_wait_p99_s"],
    }


async def by_hand(label, groups, concurrency):
    """The loop a team writes today: start each session with the control client, run the agent, post the
    reward, end it, then follow the output with the reader until every row of the step is in."""
    gw = GatewayControl(URL)
    sem = asyncio.Semaphore(concurrency)
    ended = {}

    async def one(uid, k):
        async with sem:
            sid = f"{label}-{uid}-{k}"
            s = await asyncio.to_thread(gw.start_session, session_id=sid, uid=uid, sample_index=k, group_size=N)
            ctx = type("Ctx", (), {"openai_base_url": s["base_url"], "api_key": s["api_key"]})
            reward = await agent(ctx)
            await asyncio.to_thread(gw.reward, sid, reward)
            await asyncio.to_thread(gw.end, sid)
            ended[sid] = time.perf_counter()

    uids = [f"{label}-{i}" for i in range(groups)]
    await asyncio.gather(*(one(u, k) for u in uids for k in range(N)))
    return ended


def hand_step(label, groups, concurrency):
    cpu, wall = time.process_time(), time.perf_counter()
    ended = asyncio.run(by_hand(label, groups, concurrency))
    # The reader reads the whole output from its start (it has no notion of a step's sessions).
    reader = TrajectoryReader(OUT, batch_rows=1_000_000)
    seen = {}
    while len(seen) < len(ended):
        batch = reader.next_batch()  # what has landed so far (a short batch), or None
        if batch is None:
            time.sleep(0.02)
            continue
        now = time.perf_counter()
        for sid in batch.table.column("session_id").to_pylist():
            if sid in ended:
                seen.setdefault(sid, now)
        reader.commit(batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    groups_wait = []
    for u in range(groups):
        sids = [f"{label}-{label}-{u}-{k}" for k in range(N)]
        groups_wait.append(max(seen[s] for s in sids) - max(ended[s] for s in sids))
    groups_wait.sort()
    sessions = groups * N
    return {
        "concurrency": concurrency, "sessions": sessions, "seconds": wall, "sessions_per_s": sessions / wall,
        "cpu_ms_per_session": 1000 * cpu / sessions, "rows_wait_p50_ms": 1000 * groups_wait[len(groups_wait) // 2],
        "rows_wait_p99_ms": 1000 * groups_wait[min(len(groups_wait) - 1, int(0.99 * len(groups_wait)))],
    }


ro = Rollouts(agent_url=URL, output=OUT, progress=False)
driver_step(ro, "warm", 4, 4)
results = {"driver": [], "by_hand": []}
for concurrency, groups in ((1, 16), (64, 128), (512, 256)):
    results["driver"].append(driver_step(ro, f"d{concurrency}", groups, concurrency))
results["by_hand"].append(hand_step("h64", 128, 64))
print(json.dumps(results))
