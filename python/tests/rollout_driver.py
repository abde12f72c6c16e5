"""A driver process for the killed-driver tests: one durable step (journal_dir, step=1) of 3 tasks x 4
sessions through the gateway, killed at a named point, and run again to its end.

    python rollout_driver.py AGENT_URL OUT JOURNAL_DIR RUNS_LOG RESULT [--kill-at POINT]

Every agent run appends its session id, task, sample and attempt to RUNS_LOG before its model call. The
finished step's groups go to RESULT as JSON. Kill points (SIGKILL of this process by itself):
- ``started:K``: right after the gateway answered the K-th session start (journaled, started, no call yet);
- ``mid-session``: the agent of task 1, sample 2, attempt 0 once every other session has ended: that
  one session is cut in the middle of its run;
- ``ended:K``: right after the gateway answered the K-th session end (the end recorded, its result not yet
  in the journal); the session's id goes to RESULT.killed first;
- ``rows``: when the first group begins to wait for its rows (all its sessions ended).
"""
import argparse
import asyncio
import json
import os
import signal

import openai

from trajflow.control import GatewayControl
from trajflow.rollout import Rollouts
from trajflow.rollout import driver as driver_module

ap = argparse.ArgumentParser()
ap.add_argument("agent_url")
ap.add_argument("out")
ap.add_argument("journal_dir")
ap.add_argument("runs_log")
ap.add_argument("result")
ap.add_argument("--kill-at", default=None)
args = ap.parse_args()


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def ended_elsewhere(sid):
    """Sessions of this step that ended, as the journal says (the others than ``sid``)."""
    with open(os.path.join(args.journal_dir, "step-1.json")) as f:
        sessions = json.load(f)["sessions"]
    return sum(1 for k, v in sessions.items() if k != sid and v["result"] is not None)


async def agent(ctx):
    with open(args.runs_log, "a") as f:
        f.write(json.dumps([ctx.session_id, ctx.uid, ctx.sample_index, ctx.attempt]) + "\n")
    async with openai.AsyncOpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key, max_retries=3, timeout=60) as client:
        await client.chat.completions.create(model="tiny", max_tokens=6, messages=[{"role": "user", "content": "Go."}])
    if args.kill_at == "mid-session" and (ctx.uid, ctx.sample_index, ctx.attempt) == ("task-1", 2, 0):
        while ended_elsewhere(ctx.session_id) < 11:
            await asyncio.sleep(0.02)
        die()
    return float(ctx.sample_index)


if args.kill_at and args.kill_at.startswith("started:"):
    limit = int(args.kill_at.split(":")[1])
    real_start = GatewayControl.start_session
    count = [0]

    def start_session(self, *a, **kw):
        answer = real_start(self, *a, **kw)
        count[0] += 1
        if count[0] == limit:
            die()
        return answer

    GatewayControl.start_session = start_session
if args.kill_at and args.kill_at.startswith("ended:"):
    limit = int(args.kill_at.split(":")[1])
    real_end = GatewayControl.end
    ends = [0]

    def end(self, session_id, status="ok"):
        answer = real_end(self, session_id, status)
        ends[0] += 1
        if ends[0] == limit:
            with open(f"{args.result}.killed", "w") as f:
                f.write(session_id)
            die()
        return answer

    GatewayControl.end = end
if args.kill_at == "rows":
    real_rows = driver_module.Rollouts._rows

    async def rows(self, wanted, timeout_s):
        die()

    driver_module.Rollouts._rows = rows

ro = Rollouts(agent_url=args.agent_url, output=args.out, journal_dir=args.journal_dir, progress=False)
tasks = [{"uid": f"task-{i}"} for i in range(3)]
groups = ro.run(tasks, 4, agent, timeout_s=120, max_concurrency=4, step=1)
with open(args.result, "w") as f:
    json.dump([
        {"uid": g.uid, "keys": g.table.column("key").to_pylist(), "session_ids": g.table.column("session_id").to_pylist(),
         "sessions": [s.to_json() for s in g.sessions]}
        for g in groups
    ], f)
