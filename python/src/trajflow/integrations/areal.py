"""AReaL 1.0: a ``RolloutWorkflow`` whose episode is one GRPO group run through trajflow's gateway.

    from trajflow.integrations.areal import TrajflowWorkflow

    workflow = TrajflowWorkflow("my_pkg.agents:solve", group_size=8, agent_url="http://gw:8000",
                                output="/data/rows")
    # then, as with any workflow: rollout.rollout_batch(data, workflow=workflow) / prepare_batch(...)

AReaL groups by fixed-size slices of the batch (``Normalization`` with ``group_size``), so an episode hands
back exactly ``group_size`` rows, one per session (its final row, ``final_rows``), in sample order; a group
that cannot (a session without rows, a group the failure policy dropped, stale rows under ``stale="drop"``,
a row without a reward) is rejected (``None``, AReaL's own "do not train on this"), counted by reason. With
``all_rows`` every row of every session is returned instead, for setups that group by uid themselves.
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Dict, List, Optional

from .common import AdapterConfig, GroupLike, StepStats, final_rows, group_rows

try:
    from areal.api.workflow_api import RolloutWorkflow
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("trajflow.integrations.areal needs AReaL 1.0 (pip install areal==1.0.4)") from err

__all__ = ["TrajflowWorkflow", "episode_tensors"]


def episode_tensors(group: GroupLike) -> Dict[str, Any]:
    """A group's rows (all of them, in order) as AReaL's episode tensors, right-padded to the longest:

    - ``input_ids`` [B, L] int32: prompt + response;
    - ``attention_mask`` [B, L] bool;
    - ``loss_mask`` [B, L] int32: 0 on the prompt, the row's response mask after it;
    - ``logprobs`` [B, L] float32: 0 on the prompt and on untrained positions, the sampling logprob on
      trained ones; NaN on trained positions of a row without logprobs (``missing_logprobs``), never 0.0;
    - ``versions`` [B, L] int32: -1 on the prompt and on tokens the model did not sample, the policy version
      that sampled each token after it; -1 throughout a row whose versions are unknown (never guessed);
    - ``rewards`` [B] float32: the row's reward, NaN for a row without one.

    Pass ``final_rows(group)`` for one row per session."""
    import torch

    rows = group_rows(group)
    length = max((len(r["prompt_ids"]) + len(r["response_ids"]) for r in rows), default=0)
    b = len(rows)
    input_ids = torch.zeros((b, length), dtype=torch.int32)
    attention = torch.zeros((b, length), dtype=torch.bool)
    loss_mask = torch.zeros((b, length), dtype=torch.int32)
    logprobs = torch.zeros((b, length), dtype=torch.float32)
    versions = torch.full((b, length), -1, dtype=torch.int32)
    rewards = torch.full((b,), float("nan"), dtype=torch.float32)
    for i, r in enumerate(rows):
        p, q = len(r["prompt_ids"]), len(r["response_ids"])
        input_ids[i, : p + q] = torch.tensor(list(r["prompt_ids"]) + list(r["response_ids"]), dtype=torch.int32)
        attention[i, : p + q] = True
        mask = torch.tensor(r["response_mask"], dtype=torch.int32)
        loss_mask[i, p : p + q] = mask
        if r["rollout_log_probs"] is None:
            logprobs[i, p : p + q] = torch.where(mask.bool(), float("nan"), 0.0)
        else:
            logprobs[i, p : p + q] = torch.tensor(r["rollout_log_probs"], dtype=torch.float32)
        if r.get("token_policy_versions") is not None:
            versions[i, p : p + q] = torch.tensor(r["token_policy_versions"], dtype=torch.int32)
        if r["reward"] is not None:
            rewards[i] = float(r["reward"])
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "loss_mask": loss_mask,
        "logprobs": logprobs,
        "versions": versions,
        "rewards": rewards,
    }


class TrajflowWorkflow(RolloutWorkflow):
    """AReaL's workflow over the rollout driver: ``arun_episode(engine, data)`` runs ``group_size``
    sessions of the agent on ``data`` (``uid``, else ``query_id``, names the group; else a fresh id) and
    returns the group's tensors, or ``None`` for a group that cannot be trained (see the module).

    The engine's policy version (``engine.get_version()``) is posted to the gateway's /weights when it
    changes (``set_weights``), so rows carry AReaL's version and ``max_policy_lag`` ages them by it;
    AReaL's own ``max_head_offpolicyness`` still bounds what it submits. ``stats()`` gives the figures since
    its last call (groups, rejections by reason, rows, tokens, wait, staleness).

    Args:
        agent: the agent (or its import path); the other options are ``AdapterConfig``'s.
        group_size: sessions per episode (GRPO's n).
    """

    def __init__(self, agent: Any = None, *, group_size: int = 1, **options: Any):
        if not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be a positive int, not {group_size!r}")
        self.group_size = group_size
        self.options = AdapterConfig.from_options(options, agent=agent)
        self._stats = StepStats()

    def stats(self) -> Dict[str, float]:
        return self._stats.pop()

    async def arun_episode(self, engine: Any, data: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        cfg = self.options
        driver = cfg.rollouts()
        await cfg.follow_version(driver, _version(engine))
        uid = str(data.get("uid") or data.get("query_id") or f"areal-{uuid.uuid4().hex[:12]}")
        task = {**data, "uid": uid}
        t0 = time.monotonic()
        group = (await driver.arun([task], self.group_size, cfg.agent_fn(), **cfg.run_options()))[0]
        rows: List[Dict[str, Any]] = group_rows(group) if cfg.all_rows else final_rows(group)
        reason = None
        if group.dropped:
            reason = "dropped"
        elif cfg.stale == "drop" and group.stale_rows:
            reason = "stale"
        elif group.incomplete or (not cfg.all_rows and len(rows) != self.group_size):
            reason = "incomplete"
        elif any(r["reward"] is None for r in rows):
            reason = "no_reward"
        if reason is not None:
            self._stats.count("groups_rejected")
            self._stats.count(f"groups_rejected_{reason}")
            return None
        self._stats.add_group(rows, group.table.num_rows, time.monotonic() - t0, driver.version)
        return episode_tensors(rows)


def _version(engine: Any) -> Optional[int]:
    get = getattr(engine, "get_version", None)
    if get is None:
        return None
    try:
        return int(get())
    except NotImplementedError:
        return None
