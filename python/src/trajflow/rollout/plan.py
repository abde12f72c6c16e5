"""A step's plan: its options as the group and session coroutines need them, the checks that refuse a bad
option or task list before anything starts (every problem at once), and the policies' small pieces (the
session's reward from what its agent returned, a short oversampled group filled with failures)."""
from __future__ import annotations

import re
from typing import Any, Awaitable, Callable, Dict, List, Optional, Set

from .types import AgentContext, SessionResult

# The gateway takes ids of 1 to 200 of these; `_` is left out since row keys are `{uid}_{session}_{index}`
# and verl's replay buffer takes a key's uid as key.split("_")[0].
_UID = re.compile(r"^[A-Za-z0-9.:@-]{1,160}$")
FAILURE_POLICIES = ("keep", "drop", "resample")
STALE_POLICIES = ("flag", "drop")

Agent = Callable[[AgentContext], Any]
Reward = Callable[[Dict[str, Any], Any], Any]


class Plan:
    """One step's options, as the group and session coroutines need them."""

    def __init__(self, n, agent, reward, timeout_s, sem, failure, max_resamples, oversample, max_policy_lag, stale):
        self.n, self.agent, self.reward, self.timeout_s, self.sem = n, agent, reward, timeout_s, sem
        self.failure, self.max_resamples, self.oversample = failure, max_resamples, oversample
        self.max_policy_lag, self.stale = max_policy_lag, stale
        self.failure_reward: Optional[float] = None
        self.only: Optional[int] = None  # arun_sample: the one sample of the group this call runs


def fill_with_failures(done: List[SessionResult], n: int) -> None:
    """Oversampling that ended with fewer than n ok sessions: failed ones fill the group up to n (flagged
    by their status, for the failure policy to decide), the earliest samples first."""
    kept = sum(1 for r in done if r.kept)
    for r in sorted(done, key=lambda r: r.sample_index):
        if kept >= n:
            break
        if not r.kept and r.reason in ("raised", "timeout", "reward_raised"):
            r.kept = True
            kept += 1


async def score_of(task: Dict[str, Any], value: Any, reward: Optional[Reward]):
    """The session's reward and info: from the agent's return value, else from ``reward(task, result)``."""
    if isinstance(value, bool):
        raise TypeError("an agent returned a bool: return a float reward, a dict with reward, or None")
    if isinstance(value, (int, float)):
        return float(value), None
    if isinstance(value, dict) and "reward" in value:
        return (None if value["reward"] is None else float(value["reward"])), value.get("info")
    if reward is None:
        return None, None
    got = reward(task, value)
    if isinstance(got, Awaitable):
        got = await got
    if isinstance(got, dict):
        return (None if got.get("reward") is None else float(got["reward"])), got.get("info")
    return (None if got is None else float(got)), None


def check_options(tasks, n, timeout_s, max_concurrency, failure, max_resamples, oversample, stale) -> List[str]:
    problems = []
    if not isinstance(n, int) or n < 1:
        problems.append(f"n must be a positive int, not {n!r}")
    if timeout_s is None or timeout_s <= 0:
        problems.append("timeout_s must be positive")
    if max_concurrency < 1:
        problems.append("max_concurrency must be at least 1")
    if failure not in FAILURE_POLICIES:
        problems.append(f"failure must be one of {', '.join(FAILURE_POLICIES)}, not {failure!r}")
    if max_resamples < 0 or oversample < 0:
        problems.append("max_resamples and oversample must be >= 0")
    if stale not in STALE_POLICIES:
        problems.append(f"stale must be flag or drop, not {stale!r}")
    seen: Set[str] = set()
    for i, t in enumerate(tasks):
        uid = t.get("uid") if isinstance(t, dict) else None
        if not isinstance(uid, str):
            problems.append(f"task {i} has no uid (a string)")
        elif not _UID.match(uid):
            problems.append(
                f"task {i}: uid {uid!r} cannot be carried in row keys: 1 to 160 letters, digits and . : @ - "
                "(no '_': verl takes a key's uid as key.split('_')[0])"
            )
        elif uid in seen:
            problems.append(f"task {i}: uid {uid!r} repeats an earlier task's (a group per uid)")
        else:
            seen.add(uid)
    return problems
