"""slime: ``generate_rollout`` for ``--rollout-function-path trajflow.integrations.slime.generate_rollout``
(and ``generate`` for ``--custom-generate-function-path``), the groups through trajflow's gateway as
slime's ``Sample`` (``slime.utils.types.Sample`` where slime is importable, else dicts with its field names).

slime is not in the package registries, so this is tested against slime's documented fields and
invariants (``tokens`` = prompt + response, ``loss_mask`` and ``rollout_log_probs`` ``response_length``
long, each group contiguous and exactly ``n_samples_per_prompt``), not against slime itself.

Options come from slime's args as ``trajflow_<option>`` attributes (``--custom-config-path`` sets them:
``trajflow_agent: my_pkg.agents:solve``), else the environment (``TRAJFLOW_AGENT``, ``TRAJFLOW_AGENT_URL``,
``TRAJFLOW_OUTPUT``...). A session's status maps from how it ended: ok → COMPLETED (TRUNCATED when its last
turn stopped at the token limit, ABORTED when it was aborted), aborted → ABORTED, failed → FAILED.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..rollout import ABORTED, FAILED, Group, SessionResult
from .common import AdapterConfig, GroupLike, StepStats, final_rows, group_rows

try:  # slime's own types, when slime is installed
    from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput
    from slime.utils.types import Sample
except ImportError:  # slime is not on PyPI: the same shapes, as plain data
    Sample = None

    @dataclass
    class RolloutFnTrainOutput:  # type: ignore[no-redef]
        samples: List[List[Any]]
        metrics: Optional[Dict[str, Any]] = None

    @dataclass
    class RolloutFnEvalOutput:  # type: ignore[no-redef]
        data: Dict[str, Dict[str, Any]]
        metrics: Optional[Dict[str, Any]] = None


__all__ = ["generate", "generate_rollout", "samples", "status_of"]

COMPLETED, TRUNCATED = "completed", "truncated"
stats = StepStats()


def status_of(row: Optional[Dict[str, Any]], session: Optional[SessionResult]) -> str:
    """slime's status value for a session (its result when known) and its final row."""
    if session is not None and session.status == FAILED:
        return "failed"
    if session is not None and session.status == ABORTED:
        return "aborted"
    reasons = list((row or {}).get("finish_reasons") or [])
    if reasons and reasons[-1] == "length":
        return TRUNCATED
    if reasons and reasons[-1] == "abort":
        return "aborted"
    return COMPLETED


def _sample(fields: Dict[str, Any]) -> Any:
    if Sample is None:
        return fields
    fields = dict(fields, status=Sample.Status(fields["status"]))
    return Sample(**fields)


def _fields(row: Dict[str, Any], status: str, *, group_index: Optional[int], index: Optional[int],
            prompt: Any, label: Any) -> Dict[str, Any]:
    response = list(row["response_ids"])
    versions = row.get("token_policy_versions")
    ends = row.get("turn_end_indices") or []
    return {
        "group_index": group_index,
        "index": index,
        "prompt": prompt,
        "tokens": list(row["prompt_ids"]) + response,
        "response": "",  # trajflow keeps ids, not text: nothing is detokenized
        "response_length": len(response),
        "label": label,
        "reward": None if row["reward"] is None else float(row["reward"]),
        "loss_mask": [int(m) for m in row["response_mask"]],
        "rollout_log_probs": None if row["rollout_log_probs"] is None else [float(x) for x in row["rollout_log_probs"]],
        # slime keeps one weight version per generation call: each trained turn's, at its last token.
        "weight_versions": [] if versions is None else [str(versions[e]) for e in ends],
        "status": status,
        "session_id": row["session_id"],
        "metadata": {"trajflow_key": row["key"], "trajflow_flags": list(row.get("flags") or [])},
    }


def samples(group: GroupLike, *, group_index: Optional[int] = None, index_start: int = 0, prompt: Any = "",
            label: Any = None) -> List[Any]:
    """A group as slime's samples, one per session (its final row), in sample order: ``index`` runs from
    ``index_start``, ``group_index`` is the group's. A ``Group`` gives each session's status from how it
    ended; a table of rows, from its finish reasons alone."""
    sessions = {s.session_id: s for s in group.kept_sessions} if isinstance(group, Group) else {}
    out = []
    for k, row in enumerate(final_rows(group)):
        status = status_of(row, sessions.get(row["session_id"]))
        out.append(_sample(_fields(row, status, group_index=group_index, index=index_start + k, prompt=prompt, label=label)))
    return out


def _options(args: Any) -> AdapterConfig:
    given = {}
    for name in AdapterConfig.__dataclass_fields__:
        value = getattr(args, f"trajflow_{name}", None)
        if value is not None:
            given[name] = value
    return AdapterConfig.from_options(given)


def _sync(coro: Any) -> Any:
    """Runs a coroutine to its end from synchronous code, in a thread of its own where this one already
    runs an event loop (slime's rollout manager may call from inside one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _get(s: Any, name: str) -> Any:
    return s.get(name) if isinstance(s, dict) else getattr(s, name, None)


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's rollout function: ``args.rollout_batch_size`` prompts from ``data_source.get_samples``, each
    a group of ``args.n_samples_per_prompt`` sessions, returned as ``RolloutFnTrainOutput(samples, metrics)``.

    Every group handed back is whole: exactly n samples, each with a reward. A group that is not (a session
    without rows, one without a reward, one the failure policy dropped) is left out and counted
    (``trajflow/groups_rejected``), and prompts are taken again for the shortfall, up to
    ``trajflow_max_refills`` rounds (default 2); ``metrics`` says how many groups came back. Evaluation
    returns ``RolloutFnEvalOutput`` with the rewards and truncation of every session under ``trajflow``."""
    cfg = _options(args)
    n = int(args.n_samples_per_prompt)
    want = int(args.rollout_batch_size)
    refills = int(getattr(args, "trajflow_max_refills", None) or 2)
    driver = cfg.rollouts()
    agent = cfg.agent_fn()
    kept: List[List[Any]] = []
    counter = 0
    for _ in range(refills + 1):
        short = want - len(kept)
        if short <= 0:
            break
        prompts = data_source.get_samples(short)
        tasks = []
        for g in prompts:
            first = g[0]
            tasks.append({"uid": f"slime-r{rollout_id}-p{counter}", "prompt": _get(first, "prompt"),
                          "label": _get(first, "label"), "slime_metadata": _get(first, "metadata"),
                          "group_index": _get(first, "group_index")})
            counter += 1
        t0 = time.monotonic()
        groups = _sync(driver.arun(tasks, n, agent, **cfg.run_options()))
        for task, group in zip(tasks, groups):
            gi = task["group_index"]
            got = samples(group, group_index=gi, index_start=(gi or 0) * n, prompt=task["prompt"], label=task["label"])
            whole = not group.dropped and len(got) == n and all(_get(s, "reward") is not None for s in got)
            if evaluation or whole:
                kept.append(got)
                stats.add_group(final_rows(group), group.table.num_rows, time.monotonic() - t0, driver.version)
            else:
                stats.count("groups_rejected")
        if evaluation:
            break
    metrics = stats.pop()
    if evaluation:
        flat = [s for g in kept for s in g]
        return RolloutFnEvalOutput(
            data={"trajflow": {"rewards": [_get(s, "reward") for s in flat],
                               "truncated": [_status(s) == TRUNCATED for s in flat], "samples": flat}},
            metrics=metrics,
        )
    return RolloutFnTrainOutput(samples=kept, metrics=metrics)


def _status(s: Any) -> str:
    status = _get(s, "status")
    return getattr(status, "value", status)


_next_sample: Dict[str, int] = defaultdict(int)
_next_lock = threading.Lock()


async def generate(args: Any, sample: Any, sampling_params: Dict[str, Any]) -> Any:
    """slime's per-sample generate function (``--custom-generate-function-path``): one session of the
    sample's group (``group_index`` names it; ``n_samples_per_prompt`` sessions in all), the sample filled
    from its final row. A session without rows comes back with its status (FAILED or ABORTED), no tokens
    beyond the prompt's, ``remove_sample`` set, and ``trajflow_failure_reward`` as its reward (None unless
    set: GRPO needs a number for every sample of a group, and trajflow does not make one up)."""
    cfg = _options(args)
    n = int(args.n_samples_per_prompt)
    gi = _get(sample, "group_index")
    uid = f"slime-g{gi}"
    index = _get(sample, "index")
    if index is not None:
        k = int(index) % n  # slime numbers a group's samples group_index * n + j
    else:
        with _next_lock:
            k = _next_sample[uid] % n
            _next_sample[uid] += 1
            if _next_sample[uid] == n:  # the group's last sample: forget the uid
                del _next_sample[uid]
    task = {"uid": uid, "prompt": _get(sample, "prompt"), "label": _get(sample, "label"),
            "slime_metadata": _get(sample, "metadata"), "sampling_params": dict(sampling_params or {})}
    group = await cfg.rollouts().arun_sample(task, n, k, cfg.agent_fn(), **cfg.run_options())
    rows = group_rows(group)
    session = group.sessions[-1] if group.sessions else None
    if rows:
        fields = _fields(rows[-1], status_of(rows[-1], session), group_index=gi, index=_get(sample, "index"),
                         prompt=task["prompt"], label=task["label"])
    else:
        status = "aborted" if session is not None and session.status == ABORTED else "failed"
        fields = {"group_index": gi, "index": _get(sample, "index"), "prompt": task["prompt"], "tokens": [],
                  "response": "", "response_length": 0, "label": task["label"], "reward": cfg.failure_reward,
                  "loss_mask": [], "rollout_log_probs": None, "weight_versions": [], "status": status,
                  "remove_sample": True, "metadata": {"trajflow_reason": getattr(session, "reason", None)}}
    return _sample(fields)
