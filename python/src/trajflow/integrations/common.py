"""What every trainer adapter shares: its options (from the trainer's config or the environment), a group's
rows as dicts, each session's final row, and the per-step figures trainers log."""
from __future__ import annotations

import asyncio
import importlib
import os
import threading
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import pyarrow as pa

from ..rollout import Group, RolloutError, Rollouts
from ..rollout.plan import FAILURE_POLICIES, STALE_POLICIES

# Options a trainer's config may leave to the environment (a launcher exports them once for every worker).
_ENV = {
    "agent": "TRAJFLOW_AGENT",
    "agent_url": "TRAJFLOW_AGENT_URL",
    "control_url": "TRAJFLOW_CONTROL_URL",
    "output": "TRAJFLOW_OUTPUT",
    "reward": "TRAJFLOW_REWARD",
}


def resolve(target: Any, what: str) -> Any:
    """A callable given as itself or by name: ``"package.module:attr"`` or ``"package.module.attr"``."""
    if not isinstance(target, str):
        return target
    module, sep, attr = target.partition(":")
    if not sep:
        module, _, attr = target.rpartition(".")
    try:
        value = importlib.import_module(module)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError, ValueError) as err:
        raise RolloutError("ADAPTER_CONFIG", f"{what} {target!r} cannot be imported: {err}") from err
    return value


@dataclass
class AdapterConfig:
    """An adapter's options. In a trainer's config they sit under a ``trajflow`` section (verl:
    ``+trajflow.agent=...``; AReaL and slime: keyword arguments or args attributes ``trajflow_*``); the
    first five may come from the environment instead.

    Args:
        agent: the agent, called once per session with an ``AgentContext`` (rollout/agents.py), or its
            import path ``"package.module:function"`` ($TRAJFLOW_AGENT).
        agent_url: the gateway as agents reach it ($TRAJFLOW_AGENT_URL).
        control_url: its control routes (default: agent_url; $TRAJFLOW_CONTROL_URL).
        output: where the rows land: the gateway's ``--out`` or a ``trajflow consume`` output ($TRAJFLOW_OUTPUT).
        reward: ``reward(task, result)`` for agents that return no reward, or its import path ($TRAJFLOW_REWARD).
        control_token: the control token (default: $TRAJFLOW_CONTROL_TOKEN).
        timeout_s, failure, max_resamples, failure_reward, max_policy_lag, stale, max_concurrency: as
            ``Rollouts.arun`` takes them (docs/rollouts.md).
        rows_timeout_s: how long a group waits for an ended session's rows.
        all_rows: hand the trainer every row of a session (a branch, a compaction) rather than its final
            row, where the trainer's type can hold several per session (verl's v1 workers, AReaL).
        set_weights: tell the gateway the trainer's policy version as the adapter learns it (verl's
            global_steps, AReaL's engine version), so rows carry it; False when something else posts /weights.
    """

    agent: Any = None
    agent_url: Optional[str] = None
    control_url: Optional[str] = None
    output: Optional[str] = None
    reward: Any = None
    control_token: Optional[str] = None
    timeout_s: float = 1800.0
    failure: str = "keep"
    max_resamples: int = 2
    failure_reward: Optional[float] = None
    max_policy_lag: Optional[int] = None
    stale: str = "flag"
    max_concurrency: int = 64
    rows_timeout_s: float = 120.0
    all_rows: bool = False
    set_weights: bool = True

    @staticmethod
    def from_options(options: Optional[Mapping[str, Any]] = None, **overrides: Any) -> "AdapterConfig":
        """The options given (a mapping, e.g. verl's ``config.trajflow``; then keyword overrides), the
        environment filling what is left; every problem listed at once (``ADAPTER_CONFIG``)."""
        given: Dict[str, Any] = dict(options or {})
        given.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(AdapterConfig)}
        problems = [f"unknown option {k!r} (known: {', '.join(sorted(known))})" for k in given if k not in known]
        for name, variable in _ENV.items():
            if given.get(name) in (None, "") and os.environ.get(variable):
                given[name] = os.environ[variable]
        cfg = AdapterConfig(**{k: v for k, v in given.items() if k in known})
        for name in ("agent", "agent_url", "output"):
            if getattr(cfg, name) in (None, ""):
                problems.append(f"{name} is required (or ${_ENV[name]})")
        if cfg.failure not in FAILURE_POLICIES:
            problems.append(f"failure must be one of {', '.join(FAILURE_POLICIES)}, not {cfg.failure!r}")
        if cfg.stale not in STALE_POLICIES:
            problems.append(f"stale must be one of {', '.join(STALE_POLICIES)}, not {cfg.stale!r}")
        if problems:
            raise RolloutError("ADAPTER_CONFIG", "; ".join(problems))
        return cfg

    def agent_fn(self) -> Callable[..., Any]:
        return resolve(self.agent, "agent")

    def run_options(self) -> Dict[str, Any]:
        """The keyword arguments of ``Rollouts.arun`` these options give."""
        return {
            "reward": resolve(self.reward, "reward") if self.reward is not None else None,
            "timeout_s": float(self.timeout_s),
            "failure": self.failure,
            "max_resamples": int(self.max_resamples),
            "failure_reward": None if self.failure_reward is None else float(self.failure_reward),
            "max_policy_lag": None if self.max_policy_lag is None else int(self.max_policy_lag),
            "stale": self.stale,
            "max_concurrency": int(self.max_concurrency),
        }

    async def follow_version(self, driver: Rollouts, version: Any) -> None:
        """Posts the trainer's policy version (an int: verl's global_steps, AReaL's engine version) to the
        gateway's /weights when it changed and ``set_weights`` is on; anything else is left alone."""
        if self.set_weights and isinstance(version, int) and not isinstance(version, bool) and driver.version != version:
            await asyncio.to_thread(driver.set_weights, version)

    def rollouts(self) -> Rollouts:
        """The process's driver for this gateway and output: one, whichever loop or worker asks, so its
        watcher reads each output file once for every session waiting."""
        key = (self.agent_url, self.control_url, self.output, self.control_token)
        with _DRIVERS_LOCK:
            driver = _DRIVERS.get(key)
            if driver is None:
                driver = Rollouts(
                    self.agent_url, self.control_url, self.control_token, self.output,
                    rows_timeout_s=float(self.rows_timeout_s), progress=False,
                )
                _DRIVERS[key] = driver
            return driver


_DRIVERS: Dict[Tuple[Any, ...], Rollouts] = {}
_DRIVERS_LOCK = threading.Lock()

GroupLike = Union[Group, pa.Table, List[Dict[str, Any]]]


def group_rows(group: GroupLike) -> List[Dict[str, Any]]:
    """A group's rows as dicts (``Table.to_pylist()``), in the group's order: sessions by sample, rows by index."""
    if isinstance(group, Group):
        group = group.table
    if isinstance(group, pa.Table):
        return group.to_pylist()
    return list(group)


def session_rows(rows: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """Each session's rows by index, sessions in the order they first appear."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["session_id"], []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r["index"])
    return out


def final_rows(group: GroupLike) -> List[Dict[str, Any]]:
    """One row per session: its final one (the highest index, the path the session ended on), which is the
    row verl's v1 GRPO takes for a session's advantage. The others (earlier branches, pre-compaction
    context) are left to adapters with ``all_rows``, and counted as ``rows_left_out``."""
    return [rs[-1] for rs in session_rows(group_rows(group)).values()]


@dataclass
class StepStats:
    """The figures an adapter adds up between two ``pop()`` calls, under ``trajflow/...`` keys: groups (and
    those handed back rejected), sessions, rows (and rows left out), tokens (all, and trained), rows
    without logprobs or reward, the wait for a group (its first session's start to its rows in hand), and
    staleness (the trainer's policy version minus a row's oldest trained version)."""

    counts: Dict[str, float] = field(default_factory=dict)
    waits: List[float] = field(default_factory=list)
    lags: List[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, name: str, by: float = 1) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + by

    def add_group(self, rows_used: List[Dict[str, Any]], all_rows: int, wait_s: float, version: Optional[int]) -> None:
        """One group handed to the trainer: the rows it got, how many the group had, how long it took."""
        with self._lock:
            c = self.counts
            c["groups"] = c.get("groups", 0) + 1
            c["sessions"] = c.get("sessions", 0) + len({r["session_id"] for r in rows_used})
            c["rows"] = c.get("rows", 0) + len(rows_used)
            c["rows_left_out"] = c.get("rows_left_out", 0) + all_rows - len(rows_used)
            for r in rows_used:
                c["tokens"] = c.get("tokens", 0) + len(r["prompt_ids"]) + len(r["response_ids"])
                c["trained_tokens"] = c.get("trained_tokens", 0) + int(r["num_trained_tokens"])
                if r["rollout_log_probs"] is None:
                    c["rows_without_logprobs"] = c.get("rows_without_logprobs", 0) + 1
                if r["reward"] is None:
                    c["rows_without_reward"] = c.get("rows_without_reward", 0) + 1
                oldest = r.get("policy_version_min")
                if version is not None and oldest is not None:
                    self.lags.append(int(version) - int(oldest))
            self.waits.append(wait_s)

    def pop(self) -> Dict[str, float]:
        """The figures since the last pop, and a fresh start."""
        with self._lock:
            out = {f"trajflow/{k}": float(v) for k, v in self.counts.items()}
            for key in ("groups", "groups_rejected", "rows", "rows_left_out", "tokens", "trained_tokens"):
                out.setdefault(f"trajflow/{key}", 0.0)
            if self.waits:
                out["trajflow/wait_s_mean"] = sum(self.waits) / len(self.waits)
                out["trajflow/wait_s_max"] = max(self.waits)
            if self.lags:
                out["trajflow/staleness_mean"] = sum(self.lags) / len(self.lags)
                out["trajflow/staleness_max"] = float(max(self.lags))
            self.counts, self.waits, self.lags = {}, [], []
            return out
