"""Claude Code as the agent: each session gets a working directory with a small task, `claude -p` runs in
it against the gateway (ANTHROPIC_BASE_URL from the session), and the reward checks what it left there.

    python examples/rollouts/claude_code.py http://127.0.0.1:8000 rows [--claude PATH]

Start the gateway with `--untrained-model 'claude-haiku-*'` so Claude Code's side calls (titles, topic
checks) are answered but kept out of training (docs/apis.md).
"""
import argparse
import json
import os

from trajflow.rollout import cli_agent, Rollouts

ap = argparse.ArgumentParser()
ap.add_argument("gateway")
ap.add_argument("output")
ap.add_argument("--claude", default="claude")
args = ap.parse_args()


def setup(ctx, workdir):
    with open(os.path.join(workdir, "numbers.txt"), "w") as f:
        f.write("\n".join(str(x) for x in ctx.task["numbers"]) + "\n")


agent = cli_agent(
    [args.claude, "-p", "--output-format", "json",
     "Add up the numbers in numbers.txt and write the sum to sum.txt."],
    setup=setup,
)


def reward(task, result):
    try:
        with open(os.path.join(result.workdir, "sum.txt")) as f:
            return 1.0 if f.read().strip() == str(sum(task["numbers"])) else 0.0
    except FileNotFoundError:
        return 0.0


ro = Rollouts(agent_url=args.gateway, output=args.output)
tasks = [{"uid": f"sum-file-{i}", "numbers": list(range(i, i + 5))} for i in range(2)]
groups = ro.run(tasks, n=2, agent=agent, reward=reward, timeout_s=900, failure_reward=0.0)
print(json.dumps([{"uid": g.uid, "rewards": g.rewards, "statuses": [s.status for s in g.sessions],
                   "rows": g.table.num_rows} for g in groups]))
