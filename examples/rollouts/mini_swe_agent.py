"""mini-swe-agent (PyPI) as the agent on a tiny repository task: each session gets a repository with a bug,
`mini` runs in it against the gateway (LiteLLM's openai/ provider, the session's base URL), and the reward
runs the repository's check.

    python examples/rollouts/mini_swe_agent.py http://127.0.0.1:8000 rows [--mini PATH] [--model openai/m]

`bash scripts/mini-swe-agent.sh` installs `mini` into .cache/mini-swe-agent (its own environment).
"""
import argparse
import json
import os
import subprocess
import sys

from trajflow.rollout import Rollouts, cli_agent

ap = argparse.ArgumentParser()
ap.add_argument("gateway")
ap.add_argument("output")
ap.add_argument("--mini", default="mini")
ap.add_argument("--model", default="openai/tiny")
ap.add_argument("--steps", type=int, default=20)
args = ap.parse_args()


def setup(ctx, workdir):
    with open(os.path.join(workdir, "calc.py"), "w") as f:
        f.write("def add(a, b):\n    return a - b\n")
    with open(os.path.join(workdir, "check.py"), "w") as f:
        f.write("from calc import add\nassert add(2, 3) == 5\n")


def command(ctx, workdir):
    return [args.mini, "-y", "--exit-immediately", "-m", args.model, "-l", "0", "-t", ctx.task["prompt"],
            "-c", "mini.yaml", "-c", f"agent.step_limit={args.steps}",
            "-c", f"model.model_kwargs.api_base={ctx.openai_base_url}",
            "-c", f"model.model_kwargs.api_key={ctx.api_key}",
            "-o", os.path.join(workdir, "trajectory.json")]


agent = cli_agent(command, setup=setup, env={
    "MSWEA_CONFIGURED": "true",           # no first-run setup prompt
    "MSWEA_COST_TRACKING": "ignore_errors",  # a local model has no price in LiteLLM's table
    "MSWEA_SILENT_STARTUP": "1",
})


def reward(task, result):
    check = subprocess.run([sys.executable, "check.py"], cwd=result.workdir, capture_output=True)
    return 1.0 if check.returncode == 0 else 0.0


ro = Rollouts(agent_url=args.gateway, output=args.output)
groups = ro.run([{"uid": "calc-add", "prompt": "Fix add() in calc.py so that check.py passes."}], n=4,
                agent=agent, reward=reward, timeout_s=1800, failure_reward=0.0)
print(json.dumps([{"uid": g.uid, "rewards": g.rewards, "statuses": [s.status for s in g.sessions],
                   "rows": g.table.num_rows} for g in groups]))
