"""verl 0.9: rollouts through trajflow's gateway, in verl's own types, through verl's own plug-in points.

- ``TrajflowAgentLoop``, registered as agent loop ``trajflow`` (a dataset row's ``agent_name``, or
  ``actor_rollout_ref.rollout.agent.default_agent_loop=trajflow``): each loop is one session of its
  prompt's group, run by the rollout driver, and returns the session's final row as ``AgentLoopOutput``.
- ``TrajflowRolloutManager``, for the v1 trainer's ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``:
  runs each prompt's group and writes every row into TransferQueue under verl's keys, fields and tags.
- ``agent_loop_output(row)``: one row (a dict, as ``Table.to_pylist()`` gives it) as ``AgentLoopOutput``.

Options (``AdapterConfig``) come from the trainer config's top-level ``trajflow`` section
(``+trajflow.agent=my_pkg.agents:solve +trajflow.agent_url=http://gw:8000 +trajflow.output=/data/rows``),
from an agent loop config file's entry (extra keys beside ``_target_``), or from the environment.

A session of several rows (a branch, a compaction): verl's agent loop output is one sequence, so the loop
returns the session's final row (the highest index: the path it ended on, and the row verl's v1 GRPO takes
a session's advantage from); the others are counted (``trajflow_rows`` in ``extra_fields``, and
``rows_left_out``). With ``all_rows`` the loop returns the list of every row, which verl's v1
TransferQueue workers store under ``{uid}_{session}_{index}`` each; the v1 manager always writes every row.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Any, Dict, List, Optional

import numpy as np

from ..rollout import OK, RolloutError
from ..tensors import decode_routing
from .common import AdapterConfig, StepStats, group_rows, session_rows

try:  # verl's own types: the agent loop subclasses them; agent_loop_output builds them
    from omegaconf import DictConfig, OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("trajflow.integrations.verl needs verl 0.9 (pip install verl==0.9.1)") from err

log = logging.getLogger("trajflow.integrations.verl")

__all__ = ["TrajflowAgentLoop", "TrajflowRolloutManager", "agent_loop_output"]


def agent_loop_output(
    row: Dict[str, Any],
    *,
    seconds: float = 0.0,
    rows_in_session: int = 1,
    prompt_length: Optional[int] = None,
    response_length: Optional[int] = None,
) -> AgentLoopOutput:
    """One row as verl's ``AgentLoopOutput``: its ids and mask as they are, its logprobs (NaN at every
    position when the row has none, flag ``missing_logprobs``: verl's type has no per-row "absent" once
    other rows have logprobs, and NaN cannot pass for a probability), its reward (None when it has none),
    its routed experts ([seq, layers, top_k], -1 where not covered), and in ``extra_fields`` the policy
    versions verl's v1 staleness tags read (``min_global_steps`` / ``max_global_steps``: the row's oldest
    and newest trained version) and the row's own key, flags and figures.

    ``prompt_length`` / ``response_length`` (verl's ``rollout.prompt_length`` / ``response_length``): verl
    pads to them and cannot take a longer sequence, so, as verl's own loops do, a longer prompt loses its
    head and a longer response its tail; the row is then flagged ``trajflow_truncated`` in ``extra_fields``.
    """
    prompt, response = list(row["prompt_ids"]), list(row["response_ids"])
    mask = [int(m) for m in row["response_mask"]]
    logprobs = row["rollout_log_probs"]
    logprobs = [float("nan")] * len(response) if logprobs is None else [float(x) for x in logprobs]
    routed = None
    if row.get("routed_experts") is not None:
        routed = decode_routing(
            row["routed_experts"], row["routed_experts_dtype"], row["routed_experts_layers"], row["routed_experts_top_k"]
        )
    truncated = False
    if prompt_length is not None and len(prompt) > prompt_length:
        cut = len(prompt) - prompt_length
        prompt, truncated = prompt[cut:], True
        routed = None if routed is None else routed[cut:]
    if response_length is not None and len(response) > response_length:
        response, mask, logprobs, truncated = (
            response[:response_length], mask[:response_length], logprobs[:response_length], True
        )
    extra = {
        "min_global_steps": row.get("policy_version_min"),
        "max_global_steps": row.get("policy_version_max"),
        "reward_extra_info": {},
        "trajflow_key": row["key"],
        "trajflow_session_id": row["session_id"],
        "trajflow_flags": list(row.get("flags") or []),
        "trajflow_has_log_probs": row["rollout_log_probs"] is not None,
        "trajflow_rows": rows_in_session,
        "trajflow_truncated": truncated,
    }
    fields: Dict[str, Any] = dict(
        prompt_ids=prompt,
        response_ids=response,
        response_mask=mask,
        response_logprobs=logprobs,
        num_turns=int(row["num_turns"]),
        metrics=AgentLoopMetrics(generate_sequences=float(seconds)),
        extra_fields=extra,
    )
    if routed is not None:
        fields["routed_experts"] = routed
    if row["reward"] is not None:
        # Left unset otherwise: verl's as_dict then writes no rm_scores, and its reward loop may score it.
        fields["reward_score"] = float(row["reward"])
    return AgentLoopOutput(**fields)


def _plain(value: Any) -> Any:
    """A dataset field as plain Python (verl hands numpy arrays and scalars, tensors, OmegaConf nodes)."""
    if isinstance(value, DictConfig) or type(value).__name__ == "ListConfig":
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "tolist") and type(value).__module__.startswith("torch"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _options(config: Any) -> Dict[str, Any]:
    section = config.get("trajflow") if config is not None else None
    if section is None:
        return {}
    return _plain(section) if not isinstance(section, dict) else dict(section)


def _task(prompt: Dict[str, Any], sampling_params: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """What the agent gets as ``ctx.task``: the dataset row (``raw_prompt``, ``extra_info``, ``reward_model``,
    ...) as plain Python, its ``uid``, and verl's sampling parameters for this rollout."""
    task = {k: _plain(v) for k, v in prompt.items() if not k.startswith("__")}
    task["uid"] = str(task["uid"])
    if sampling_params is not None:
        task["sampling_params"] = dict(sampling_params)
    return task


@register("trajflow")
class TrajflowAgentLoop(AgentLoopBase):
    """verl's agent loop ``trajflow``: one session of its prompt's group through the gateway.

    The group's size is ``rollout.n`` (``val_kwargs.n`` does not reach an agent loop in verl 0.9, so
    validation groups are started with ``rollout.n`` as their size too); the session's sample index is the
    v1 workers' ``session_id`` where verl gives one, else the loop's count of its uid's sessions in this
    process. A session that ends without a row (it made no model call, or its rows never came) raises:
    verl's v0 loop has no way to hand back nothing (its batch fails, as it does when any agent loop
    raises), and its v1 workers mark the group ``failure``.
    """

    _next_sample: Dict[str, int] = defaultdict(int)
    _next_lock = threading.Lock()
    stats = StepStats()

    def __init__(self, *args: Any, **kwargs: Any):
        own = {k: kwargs.pop(k) for k in list(kwargs) if k in AdapterConfig.__dataclass_fields__}
        super().__init__(*args, **kwargs)
        self.options = AdapterConfig.from_options(_options(self.config), **own)

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any):
        cfg = self.options
        task = _task(kwargs, sampling_params)
        uid = task["uid"]
        n = int(self.rollout_config.n)
        sample = kwargs.get("session_id")
        if sample is None:
            with self._next_lock:
                sample = self._next_sample[uid] % n
                self._next_sample[uid] += 1
                if self._next_sample[uid] == n:  # the group's last loop here: forget the uid
                    del self._next_sample[uid]
        driver = cfg.rollouts()
        steps = task.get("global_steps")
        await cfg.follow_version(driver, steps)
        t0 = time.monotonic()
        group = await driver.arun_sample(task, n, int(sample), cfg.agent_fn(), **cfg.run_options())
        rows = group_rows(group)
        if not rows:
            s = group.sessions[-1] if group.sessions else None
            raise RolloutError(
                "ROLLOUT_NO_ROWS",
                f"uid {uid} sample {sample}: the session ended {getattr(s, 'status', '?')} "
                f"({getattr(s, 'reason', None) or getattr(s, 'error', None) or 'no model call'}) without a row",
            )
        seconds = group.sessions[-1].seconds if group.sessions else 0.0
        used = rows if cfg.all_rows else rows[-1:]
        self.stats.add_group(used, len(rows), time.monotonic() - t0, driver.version)
        lengths = dict(prompt_length=int(self.rollout_config.prompt_length),
                       response_length=int(self.rollout_config.response_length))
        outputs = [agent_loop_output(r, seconds=seconds, rows_in_session=len(rows), **lengths) for r in used]
        for o in outputs:
            if o.extra_fields["trajflow_truncated"]:
                self.stats.count("rows_truncated")
        return outputs if cfg.all_rows else outputs[0]


class TrajflowRolloutManager:
    """verl's v1 rollout manager (``agent_loop_manager_class``) backed by the rollout driver: each prompt of
    a batch is one GRPO group of ``rollout.n`` sessions (or the prompt's ``__rollout_n__``), run in the
    background by a Ray actor of its own (as verl's own v1 workers are, so the trainer's process only
    dispatches), and every row of the group goes into TransferQueue as verl's v1 workers write theirs:

    - the key is the row's own key, ``{uid}_{session}_{index}`` (verl's replay buffer groups by
      ``key.split("_")[0]``, and a uid with ``_`` is refused: the prompt is marked ``failure``);
    - the fields are ``AgentLoopOutput.as_dict()``'s (prompts, responses, response_mask, rollout_log_probs,
      rm_scores with the reward on the last response token) and loss_mask, input_ids, attention_mask,
      position_ids, multi_modal_inputs, with the prompt's own fields;
    - the tags are status ``success``, global_steps, min/max_global_steps (the row's oldest and newest
      trained policy version), prompt_len, response_len, seq_len;
    - the prompt's ``{uid}`` record goes ``running``, then ``finished``, or ``failure`` when the group has
      a failed, aborted or missing session, was dropped by the failure policy, or has a row without a reward
      (left out: a reward is never made up).

    ``set_weights`` (default on): a batch of a new ``global_steps`` posts it to the gateway's /weights first,
    so rows carry verl's step as their policy version. ``metrics()`` gives the figures since its last call.
    """

    def __init__(self, config: Any, llm_client: Any = None, teacher_client: Any = None,
                 reward_loop_worker_handles: Any = None, **options: Any):
        import ray

        self.config = config
        self.options = AdapterConfig.from_options(_options(config), **options)
        rollout = OmegaConf.to_container(config.actor_rollout_ref.rollout, resolve=True)
        # No CPU reserved: the actor waits on agents and I/O; the agents and the engine do the work.
        self._worker = ray.remote(_GroupWorker).options(num_cpus=0, max_concurrency=1 << 16).remote(rollout, self.options)
        self._pending: List[Any] = []

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> "TrajflowRolloutManager":
        return cls(*args, **kwargs)

    def generate_sequences(self, prompts: Any) -> None:
        """Starts a group for each prompt of the batch (a TensorDict) and returns at once; each group's
        rows and its prompt's status reach TransferQueue as it completes."""
        validate = bool(_plain(prompts["validate"])) if "validate" in prompts.keys() else False
        self._pending = [ref for ref in self._pending if not _done(ref)]
        for prompt in _batch_rows(prompts):
            prompt.pop("validate", None)
            self._pending.append(self._worker.group.remote(prompt, validate))

    def wait(self, timeout_s: Optional[float] = None) -> None:
        """Blocks until every group started so far has been written (for shutdown, and tests)."""
        import ray

        ray.get(list(self._pending), timeout=timeout_s)

    def metrics(self) -> Dict[str, float]:
        import ray

        return ray.get(self._worker.metrics.remote())


def _done(ref: Any) -> bool:
    import ray

    ready, _ = ray.wait([ref], timeout=0)
    return bool(ready)


class _GroupWorker:
    """The manager's Ray actor: runs the groups (asynchronously, many at once) and writes them to
    TransferQueue with its asynchronous API, from a process of its own."""

    def __init__(self, rollout: Dict[str, Any], options: AdapterConfig):
        import transfer_queue as tq

        self.rollout, self.options, self.stats, self._tq = rollout, options, StepStats(), tq
        tq.init()  # attaches to the trainer's TransferQueue (its controller already runs)

    def metrics(self) -> Dict[str, float]:
        return self.stats.pop()

    async def group(self, prompt: Dict[str, Any], validate: bool) -> str:
        tq, partition = self._tq, "val" if validate else "train"
        uid = str(_plain(prompt["uid"]))
        await tq.async_kv_put(key=uid, partition_id=partition, tag={"status": "running"})
        status = "failure"
        try:
            status = await self._run(prompt, partition, validate)
        except Exception:  # noqa: BLE001 - a group's failure is its prompt's status, not the manager's
            log.exception("trajflow: the group of uid %s failed", uid)
        await tq.async_kv_put(key=uid, partition_id=partition, tag={"status": status})
        return status

    async def _run(self, prompt: Dict[str, Any], partition: str, validate: bool) -> str:
        cfg, rc = self.options, self.rollout
        val = rc.get("val_kwargs") or {}
        n = int(prompt.pop("__rollout_n__", val.get("n", rc["n"]) if validate else rc["n"]))
        source = val if validate else rc
        sampling = {k: source.get(k) for k in ("temperature", "top_p", "top_k")}
        sampling["logprobs"] = rc.get("calculate_log_probs")
        task = _task(prompt, sampling)
        driver = cfg.rollouts()
        steps = task.get("global_steps")
        await cfg.follow_version(driver, steps)
        t0 = time.monotonic()
        group = (await driver.arun([task], n, cfg.agent_fn(), **cfg.run_options()))[0]
        rows = group_rows(group)
        written = [r for r in rows if r["reward"] is not None]
        if written:
            await self._put(written, prompt, partition, steps)
        self.stats.add_group(written, len(rows), time.monotonic() - t0, driver.version)
        failed = group.dropped or group.incomplete or any(s.status != OK for s in group.kept_sessions)
        if len(written) < len(rows):
            self.stats.count("rows_without_reward_left_out", len(rows) - len(written))
        if failed or len(written) < len(rows):
            self.stats.count("groups_failed")
            return "failure"
        return "finished"

    async def _put(self, rows: List[Dict[str, Any]], prompt: Dict[str, Any], partition: str, steps: Any) -> None:
        import torch
        from verl.utils.model import compute_position_id_with_mask
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        per_session = {sid: len(rs) for sid, rs in session_rows(rows).items()}
        keys, fields, tags = [], [], []
        for r in rows:
            out = agent_loop_output(r, rows_in_session=per_session[r["session_id"]])
            field = out.as_dict()
            field.update(prompt)
            field.pop("multi_modal_data", None)
            field["loss_mask"] = field["response_mask"]
            field["input_ids"] = torch.cat([field["prompts"], field["responses"]], dim=0)
            attention = torch.ones_like(field["input_ids"], dtype=torch.int64)
            field["attention_mask"] = attention
            field["position_ids"] = compute_position_id_with_mask(attention.unsqueeze(0)).squeeze(0)
            field["multi_modal_inputs"] = {}
            p, q = field["prompts"].size(0), field["responses"].size(0)
            keys.append(r["key"])
            fields.append(field)
            tags.append({
                "status": "success", "prompt_len": p, "response_len": q, "seq_len": p + q, "global_steps": steps,
                "min_global_steps": r.get("policy_version_min"), "max_global_steps": r.get("policy_version_max"),
            })
        await self._tq.async_kv_batch_put(
            keys=keys, fields=list_of_dict_to_tensordict(fields), tags=tags, partition_id=partition
        )


def _batch_rows(batch: Any) -> List[Dict[str, Any]]:
    """A TensorDict batch of prompts as one dict per prompt, the way verl's v1 workers read it."""
    import torch
    from tensordict import NonTensorData, NonTensorStack

    out: List[Dict[str, Any]] = []
    items = list(batch.items())
    for i in range(len(batch)):
        prompt: Dict[str, Any] = {}
        for k, v in items:
            if isinstance(v, torch.Tensor):
                prompt[k] = v[i]
            elif isinstance(v, NonTensorStack):
                prompt[k] = v[i].data
            elif isinstance(v, NonTensorData):
                prompt[k] = v.data
        out.append(prompt)
    return out
