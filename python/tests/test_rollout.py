"""The rollout driver (trajflow.rollout) against a real gateway in front of llama.cpp's server: whole
groups from an Agents SDK tool agent with a rule reward, exactly their sessions' rows though the output
holds another run's; failures under each policy; over-sampling; streaming with staleness; a CLI agent
(Claude Code); through the embedded gateway (--out) and through Kafka with `trajflow consume` writing to
S3. The driver SIGKILLed mid-step is in test_rollout_kill.py."""
import asyncio
import json
import os
import random
import subprocess
import sys
import urllib.request

import openai
import pyarrow.compute as pc
import pytest

from gateway_proc import harness_bin, mini_swe_agent, wait_until
from rollout_agents import chat_agent, rule, tool_agent
from rollout_fixtures import embedded, kafka_s3, read_all  # noqa: F401 - fixtures
from trajflow.rollout import ABORTED, FAILED, OK, Rollouts, RolloutError, cli_agent

def assert_rows_are_the_engines(rows):
    """Each row's sampled ids and logprobs are what llama.cpp itself samples for the row's prompt ids,
    greedy, asked directly (its /completion route with a token prompt): the rows hold the engine's ids and
    logprobs, not a re-tokenization. A row without logprobs (a token ending inside a UTF-8 character has
    none from llama.cpp) says so by its flag, and its ids are still checked."""
    engine = os.environ["LLAMA_SERVER"].rstrip("/")
    compared = 0
    for r in rows:
        body = {"prompt": r["prompt_ids"], "n_predict": len(r["response_ids"]), "temperature": 0, "n_probs": 1,
                "return_tokens": True, "cache_prompt": False}
        req = urllib.request.Request(f"{engine}/completion", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        direct = json.loads(urllib.request.urlopen(req, timeout=60).read())
        assert direct["tokens"] == r["response_ids"], (r["key"], direct["tokens"], r["response_ids"])
        if r["rollout_log_probs"] is None:
            assert "missing_logprobs" in r["flags"]
            continue
        probs = direct["completion_probabilities"]
        assert [p["id"] for p in probs] == r["response_ids"]
        assert all(abs(p["logprob"] - lp) < 1e-3 for p, lp in zip(probs, r["rollout_log_probs"])), r["key"]
        compared += 1
    return compared


def assert_group_rows(g, n):
    """The group's table holds exactly its kept sessions' rows, each with the session's uid, index, reward
    and status; every trained token has its logprob or the row says it has none."""
    kept = {s.session_id: s for s in g.kept_sessions}
    rows = g.table.to_pylist()
    assert {r["session_id"] for r in rows} == {s for s, r in kept.items() if r.calls > 0}
    assert len({r["key"] for r in rows}) == len(rows)
    for r in rows:
        s = kept[r["session_id"]]
        assert (r["uid"], r["sample_index"], r["group_size"], r["status"]) == (g.uid, s.sample_index, n, s.status)
        assert r["reward"] == s.reward
        assert len(r["response_mask"]) == len(r["response_ids"]) and sum(r["response_mask"]) == r["num_trained_tokens"]
        if r["rollout_log_probs"] is None:
            assert "missing_logprobs" in r["flags"]
        else:
            assert len(r["rollout_log_probs"]) == len(r["response_ids"])
    assert [s.rows for s in g.kept_sessions] == [sum(1 for r in rows if r["session_id"] == s.session_id) for s in g.kept_sessions]


@pytest.mark.parametrize("deployment", ["embedded", "kafka_s3"])
def test_whole_groups_of_an_agents_sdk_tool_agent_with_a_rule_reward(deployment, request):
    gw, out = request.getfixturevalue(deployment)
    ro = Rollouts(agent_url=gw.url, control_url=gw.url, output=out, progress=False)
    # Another run writing to the same output first: its rows must not come back in this step's groups.
    other = ro.run([{"uid": "other-0", "prompt": "Hi."}, {"uid": "other-1", "prompt": "Yo."}], 2, chat_agent, timeout_s=120)
    other_ids = {s.session_id for g in other for s in g.sessions}
    assert [len(g.table) for g in other] == [2, 2] and all(s.reward == 0.25 for g in other for s in g.sessions)
    assert assert_rows_are_the_engines([r for g in other for r in g.table.to_pylist()]) >= 1, "no row had logprobs to compare"
    rng = random.Random(7)
    tasks = [{"uid": f"calc-{i}", "prompt": f"What is {a} + {b}?", "a": a, "b": b}
             for i, (a, b) in enumerate((rng.randrange(10), rng.randrange(10)) for _ in range(8))]
    answers = {}
    ro.set_weights(3)
    groups = ro.run(tasks, 4, tool_agent(answers), reward=rule, timeout_s=300, max_concurrency=8)
    assert [g.uid for g in groups] == [t["uid"] for t in tasks]
    for g, task in zip(groups, tasks):
        assert not g.dropped and not g.incomplete
        assert [(s.sample_index, s.status, s.kept) for s in g.sessions] == [(k, OK, True) for k in range(4)]
        for s in g.sessions:
            assert s.reward == rule(task, answers[s.session_id]) and s.calls >= 1
        assert_group_rows(g, 4)
        assert set(g.table.column("weight_version_min").to_pylist()) == {3}
        assert not other_ids & set(g.table.column("session_id").to_pylist())
    # The output holds both runs' rows; the step handed back only its own.
    everything = set(read_all(out).column("session_id").to_pylist())
    assert other_ids <= everything and {s.session_id for g in groups for s in g.sessions} <= everything
    stats = groups.stats
    assert (stats["rollout/groups_done"], stats["rollout/sessions_done"], stats["rollout/sessions_failed"]) == (8, 32, 0)
    assert stats["rollout/calls"] >= 32 and stats["rollout/rows"] == sum(len(g.table) for g in groups)
    assert stats["rollout/sampled_tokens"] > 0 and stats["rollout/reward_mean"] == sum(s.reward for g in groups for s in g.sessions) / 32


async def one_call(ctx, max_tokens=6):
    async with openai.AsyncOpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key, max_retries=3, timeout=60) as client:
        await client.chat.completions.create(model="tiny", max_tokens=max_tokens, messages=[{"role": "user", "content": "Go."}])


async def scripted(ctx):
    """Each sample does what the task's ``modes`` say, on its first attempt; a resampled attempt succeeds.
    ok: one call, reward 1; raise: a call, then an exception; hang: a call, then waits for ever (until the
    timeout cancels it); stuck: a call, then one that generates far longer than the timeout (cut in flight);
    none: no model call at all, reward 1."""
    mode = ctx.task["modes"][ctx.sample_index]
    if mode == "none":
        return 1.0
    await one_call(ctx)
    if ctx.attempt == 0 and mode == "raise":
        raise RuntimeError("the environment broke")
    if ctx.attempt == 0 and mode == "hang":
        await asyncio.Event().wait()
    if ctx.attempt == 0 and mode == "stuck":
        async with openai.AsyncOpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key, max_retries=0, timeout=600) as client:
            await client.chat.completions.create(  # ~60000 tokens: over half a minute of the engine's time
                model="tiny", max_tokens=60000, extra_body={"ignore_eos": True}, messages=[{"role": "user", "content": "Go."}])
    return 1.0


def engine_log():
    """The llama.cpp server's log when it is the one scripts/llama.sh started (None for one named by
    LLAMA_SERVER): it says `cancel task` for every request cancelled."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cache = os.environ.get("TRAJFLOW_LLAMA_DIR", os.path.join(root, ".cache", "llama"))
    try:
        with open(os.path.join(cache, "server.pid")) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except (OSError, ValueError):
        return None
    port = os.environ["LLAMA_SERVER"].rstrip("/").rsplit(":", 1)[-1].encode()
    if port not in cmdline:
        return None
    return os.path.join(cache, "server.log")


def cancelled_in_engine(log):
    with open(log, errors="replace") as f:
        return sum(1 for line in f if "cancel task" in line)


def gone_calls(gw):
    for line in gw.metrics().splitlines():
        if line.startswith('trajflow_gateway_calls_total{outcome="client_gone"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("deployment", ["embedded", "kafka_s3"])
def test_failures_under_each_policy_and_oversampling(deployment, request):
    gw, out = request.getfixturevalue(deployment)
    ro = Rollouts(agent_url=gw.url, output=out, progress=False)
    modes = ["ok", "raise", "hang", "none"]
    log = engine_log()
    cancelled, gone = (None if log is None else cancelled_in_engine(log)), gone_calls(gw)

    async def main():
        return await asyncio.gather(
            # A failed session's reward is 0 here: without one, its rows wait out the pipeline's reward grace.
            ro.arun([{"uid": "keep-0", "modes": ["ok", "raise", "stuck", "none"]}], 4, scripted, timeout_s=20,
                    failure="keep", failure_reward=0.0),
            ro.arun([{"uid": "drop-0", "modes": modes}], 4, scripted, timeout_s=20, failure="drop", failure_reward=0.0),
            ro.arun([{"uid": "resample-0", "modes": modes}], 4, scripted, timeout_s=20, failure="resample"),
            ro.arun([{"uid": "over-0", "modes": ["ok", "hang", "ok", "hang"]}], 2, scripted, timeout_s=600, oversample=2),
        )

    keep, drop, resample, over = (step[0] for step in asyncio.run(main()))
    # keep: every session in its group, flagged by its status; the one without calls has no row.
    by = lambda g: [(s.sample_index, s.attempt, s.status, s.reason, s.kept, s.rows > 0) for s in g.sessions]  # noqa: E731
    assert by(keep) == [(0, 0, OK, None, True, True), (1, 0, FAILED, "raised", True, True),
                        (2, 0, ABORTED, "timeout", True, True), (3, 0, OK, None, True, False)]
    assert keep.incomplete and not keep.dropped
    assert [s.reward for s in keep.sessions] == [1.0, 0.0, 0.0, 1.0]
    assert [s.info for s in keep.sessions] == [None, {"reason": "raised"}, {"reason": "timeout"}, None]
    assert "RuntimeError: the environment broke" in keep.sessions[1].error
    assert_group_rows(keep, 4)
    assert sorted(set(keep.table.column("status").to_pylist())) == ["aborted", "failed", "ok"]
    # The stuck session's call in flight was cut at its timeout: the gateway saw its client go and cancelled
    # the engine's request, which the engine's log shows; nothing of that call was recorded.
    assert gone_calls(gw) >= gone + 1
    if log is not None:
        wait_until(lambda: cancelled_in_engine(log) >= cancelled + 1, "the engine to log the cancelled request")
    stuck = keep.table.filter(pc.equal(keep.table.column("session_id"), keep.sessions[2].session_id)).to_pylist()
    assert [r["num_turns"] for r in stuck] == [1]
    # drop: the group is dropped whole.
    assert drop.dropped and len(drop.table) == 0 and [s.status for s in drop.sessions] == [OK, FAILED, ABORTED, OK]
    # resample: the failed and timed-out samples ran again; only the new attempts are in the group.
    assert by(resample) == [(0, 0, OK, None, True, True), (1, 0, FAILED, "raised", False, False),
                            (1, 1, OK, None, True, True), (2, 0, ABORTED, "timeout", False, False),
                            (2, 1, OK, None, True, True), (3, 0, OK, None, True, False)]
    assert_group_rows(resample, 4)
    # oversampling: the first two to end ok make the group; the other two are ended aborted, never trained.
    assert [(s.sample_index, s.status, s.reason, s.kept) for s in over.sessions] == [
        (0, OK, None, True), (1, ABORTED, "oversampled", False), (2, OK, None, True), (3, ABORTED, "oversampled", False)]
    assert_group_rows(over, 2)
    assert len(over.kept_sessions) == 2 and not over.incomplete


@pytest.mark.parametrize("deployment", ["embedded", "kafka_s3"])
def test_streaming_yields_groups_as_they_complete_and_honours_staleness(deployment, request):
    gw, out = request.getfixturevalue(deployment)
    ro = Rollouts(agent_url=gw.url, output=out, progress=False)
    ro.set_weights(1)
    released = asyncio.Event()

    async def agent(ctx):
        await one_call(ctx)  # sampled at version 1
        if ctx.task["uid"] == "slow-0":
            await released.wait()
        return 1.0

    async def main():
        order = []
        tasks = [{"uid": "slow-0"}, {"uid": "fast-1"}, {"uid": "fast-2"}]
        async for g in ro.astream(tasks, 2, agent, max_groups_in_flight=2, max_policy_lag=1, stale="drop", timeout_s=120):
            order.append(g)
            if len(order) == 1:
                # The first group is in hand while slow-0 still runs; the policy moves on two versions,
                # so slow-0's rows (sampled at 1) are stale when its group completes.
                await asyncio.to_thread(ro.set_weights, 3)
                released.set()
        return order

    order = asyncio.run(main())
    # slow-0 began first but was held until a group was in hand, and fast-2 began only once a group left
    # (two in flight): the first group yielded is fast-1's.
    assert order[0].uid == "fast-1" and sorted(g.uid for g in order[1:]) == ["fast-2", "slow-0"]
    by_uid = {g.uid: g for g in order}
    assert by_uid["fast-1"].stale_rows == 0 and len(by_uid["fast-1"].table) == 2
    # slow-0's rows were sampled at version 1, stale against 3 with a lag of 1: dropped. fast-2 was sampled
    # at version 3.
    assert by_uid["slow-0"].stale_rows == 2 and len(by_uid["slow-0"].table) == 0
    assert by_uid["fast-2"].stale_rows == 0 and set(by_uid["fast-2"].table.column("weight_version_min").to_pylist()) == {3}


def test_a_uid_that_row_keys_cannot_carry_is_refused_with_every_problem(embedded):
    gw, out = embedded
    ro = Rollouts(agent_url=gw.url, output=out, progress=False)
    with pytest.raises(RolloutError) as e:
        ro.run([{"uid": "gsm8k_0042"}, {"uid": "ok-1"}, {"uid": "ok-1"}, {"prompt": "x"}], 0, chat_agent, failure="retry")
    msg = str(e.value)
    for part in ("[ROLLOUT_CONFIG]", "n must be a positive int", "failure must be one of keep, drop, resample",
                 "uid 'gsm8k_0042' cannot be carried", "uid 'ok-1' repeats", "task 3 has no uid"):
        assert part in msg, msg


@pytest.mark.parametrize("deployment", ["embedded", "kafka_s3"])
def test_claude_code_as_a_cli_agent(deployment, request, tmp_path):
    gw, out = request.getfixturevalue(deployment)
    bin_dir = harness_bin()
    home = tmp_path / "home"
    home.mkdir()
    agent = cli_agent([os.path.join(bin_dir, "claude"), "-p", "--output-format", "json", "{task[prompt]}"],
                      env={"HOME": str(home)})

    def reward(task, result):
        return 1.0 if json.loads(result.stdout)["is_error"] is False else 0.0

    ro = Rollouts(agent_url=gw.url, output=out, progress=False)
    groups = ro.run([{"uid": f"claude-{deployment.replace('_', '-')}", "prompt": "Say hi."}], 2, agent, reward=reward, timeout_s=300)
    g = groups[0]
    assert [(s.status, s.reward) for s in g.sessions] == [(OK, 1.0), (OK, 1.0)]
    assert_group_rows(g, 2)
    assert len(g.table) >= 2


BUGGY = "def add(a, b):\n    return a - b\n"
CHECK = "from calc import add\nassert add(2, 3) == 5\n"


@pytest.mark.parametrize("deployment", ["embedded", "kafka_s3"])
def test_mini_swe_agent_on_a_tiny_repository_task(deployment, request, tmp_path):
    """mini-swe-agent (PyPI) as a command-line agent: a repository with a bug per session, `mini` run in it
    by its base URL (LiteLLM's openai/ provider), three steps at most; the reward runs the repository's
    check. The tiny random model fixes nothing, but the group comes back whole, with its rows."""
    gw, out = request.getfixturevalue(deployment)
    mini = mini_swe_agent()

    def setup(ctx, workdir):
        with open(os.path.join(workdir, "calc.py"), "w") as f:
            f.write(BUGGY)
        with open(os.path.join(workdir, "check.py"), "w") as f:
            f.write(CHECK)

    def command(ctx, workdir):
        return [mini, "-y", "--exit-immediately", "-m", "openai/tiny", "-l", "0", "-t", ctx.task["prompt"],
                "-c", "mini.yaml", "-c", "agent.step_limit=3",
                "-c", f"model.model_kwargs.api_base={ctx.openai_base_url}", "-c", f"model.model_kwargs.api_key={ctx.api_key}",
                "-o", os.path.join(workdir, "trajectory.json")]

    env = {"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors", "MSWEA_SILENT_STARTUP": "1",
           "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "mswea")}
    agent = cli_agent(command, setup=setup, env=env, keep_workdir=True, workdir_root=str(tmp_path))
    checked = {}

    def reward(task, result):
        passed = subprocess.run([sys.executable, "check.py"], cwd=result.workdir, capture_output=True).returncode == 0
        trajectory = json.loads(open(os.path.join(result.workdir, "trajectory.json")).read())
        checked[result.workdir] = (passed, trajectory["info"]["exit_status"])
        return 1.0 if passed else 0.0

    ro = Rollouts(agent_url=gw.url, output=out, progress=False)
    groups = ro.run([{"uid": f"swe-{deployment.replace('_', '-')}", "prompt": "Fix add() in calc.py so that check.py passes."}], 2, agent,
                    reward=reward, timeout_s=600)
    g = groups[0]
    assert [s.status for s in g.sessions] == [OK, OK]
    assert sorted(s.reward for s in g.sessions) == sorted(1.0 if p else 0.0 for p, _ in checked.values())
    assert all(status for _, status in checked.values())  # mini recorded how it ended (a limit, a format error)
    assert_group_rows(g, 2)
    assert all(s.calls >= 1 for s in g.sessions) and len(g.table) >= 2


def test_a_cli_agent_past_its_timeout_is_killed_with_its_children(embedded, tmp_path):
    """A command line that makes a model call, then hangs with a child of its own: at the timeout its whole
    process group is stopped, and its session ends aborted."""
    gw, out = embedded
    script = tmp_path / "hang.py"
    script.write_text(
        "import json, os, subprocess, sys, time, urllib.request\n"
        "base = os.environ['OPENAI_BASE_URL']\n"
        "body = {'model': 'tiny', 'max_tokens': 4, 'messages': [{'role': 'user', 'content': 'Go.'}]}\n"
        "req = urllib.request.Request(base + '/chat/completions', data=json.dumps(body).encode(),\n"
        "                             headers={'content-type': 'application/json'})\n"
        "urllib.request.urlopen(req).read()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])\n"
        "open(sys.argv[1], 'w').write(f'{os.getpid()} {child.pid}')\n"
        "time.sleep(3600)\n"
    )
    pids = tmp_path / "pids"
    agent = cli_agent([sys.executable, str(script), str(pids)], terminate_grace_s=1.0)
    ro = Rollouts(agent_url=gw.url, output=out, progress=False)
    groups = ro.run([{"uid": "cli-hang-0"}], 1, agent, timeout_s=15, failure_reward=0.0)
    [s] = groups[0].sessions
    assert (s.status, s.reason, s.calls) == (ABORTED, "timeout", 1)
    for pid in map(int, pids.read_text().split()):
        wait_until(lambda: not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower(),
                   f"process {pid} to be gone")
    assert_group_rows(groups[0], 1)


def test_a_step_logs_its_progress_and_its_figures_off_a_terminal(embedded, caplog):
    """Off a terminal (CI, a job's log) a step logs structured progress lines; the last carries the step's
    figures, which the returned groups' stats repeat for the trainer's logger."""
    gw, out = embedded
    ro = Rollouts(agent_url=gw.url, output=out)  # progress on: a log line at the end, none on a live line
    with caplog.at_level("INFO", logger="trajflow.rollout"):
        groups = ro.run([{"uid": "logged-0"}], 2, scripted_ok, timeout_s=120, step=None)
    lines = [r for r in caplog.records if r.name == "trajflow.rollout" and hasattr(r, "rollout")]
    assert lines and lines[-1].getMessage().startswith("rollout step done")
    last = lines[-1].rollout
    assert (last["groups"], last["in_flight"], last["failed"], last["aborted"]) == ("1/1", 0, 0, 0)
    assert last["calls"] == groups.stats["rollout/calls"] == 2


async def scripted_ok(ctx):
    await one_call(ctx)
    return 1.0
