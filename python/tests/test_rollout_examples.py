"""examples/rollouts/ run as a user runs them, against the embedded gateway in front of llama.cpp."""
import json
import subprocess
import sys
from pathlib import Path

from rollout_fixtures import embedded  # noqa: F401 - fixture

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"


def run_example(name, gw, out):
    done = subprocess.run([sys.executable, str(EXAMPLES / name), gw.url, out], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith(("{", "["))]


def test_the_agents_sdk_grpo_step(embedded):  # noqa: F811
    gw, out = embedded
    [summary] = run_example("agents_sdk_grpo.py", gw, out)
    assert summary["groups"] == 8 and summary["rows"] >= 32 and summary["advantages"] == summary["rows"]
    assert summary["responses_shape"][0] == summary["rows"]
    assert summary["stats"]["rollout/sessions_done"] == 32
    assert all(len(r) == 4 and set(r) <= {0.0, 1.0} for r in summary["rewards"])


def test_the_asynchronous_loop(embedded):  # noqa: F811
    gw, out = embedded
    lines = run_example("async_loop.py", gw, out)
    assert sorted(line["uid"] for line in lines) == [f"prompt-{i}" for i in range(8)]
    for line in lines:
        # Rows older than the version trained at minus one were dropped; the rest are in the group.
        assert all(v >= line["trained_at"] - 1 for v in line["versions"])
        assert line["rows"] + line["stale_rows"] >= 4
