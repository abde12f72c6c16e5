"""Tensors a trainer consumes, from a batch's rows.

``to_verl``: verl's padded layout. ``prompts`` left-padded, ``responses`` right-padded (everything after
the prompt: sampled tokens and the tool/user tokens between turns), ``response_mask`` (1 = sampled and
trained), ``rollout_log_probs`` aligned with ``responses``, ``rm_scores`` (zeros, the row's reward at its
``last_trained_index``), ``input_ids``/``attention_mask``/``position_ids`` over prompt + response,
``sample_mask`` (0 for GRPO placeholders) and ``uid``; ``token_policy_versions`` aligned with
``responses`` (the policy that sampled each token, -1 where the model did not sample it and on padding) for
decoupled PPO and staleness masks, with ``has_policy_versions`` False for a row whose versions are unknown
(all -1 then, never guessed) or read from files older than schema version 3; ``temperatures`` aligned
with ``responses`` (the temperature each trained token was sampled at, from its turn's ``sampling``; NaN
where unknown or not trained); ``routed_experts`` [batch, prompt + response, layers, top_k] int32 aligned
with ``input_ids`` (verl's and NeMo-RL's router-replay layout; -1 on padding and on positions no event
covered) with ``has_routed_experts`` True for a row whose every position is covered.

Nothing is invented: a row without logprobs has NaN logprobs and ``has_log_probs`` False (0.0 would mean
probability 1); a row without a reward (a failed reward stage) has no score in ``rm_scores`` and
``has_reward`` False.

``to_packed``: the same rows without padding, for varlen attention: ``input_ids`` concatenated,
``cu_seqlens``, ``position_ids`` restarting per row, ``loss_mask`` and ``log_probs`` aligned with
``input_ids``, plus the shared-prefix hints (``parent_index``, ``shared_prefix_len``) that tree training
uses to compute a shared prefix once.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict

import numpy as np
import pyarrow as pa


def _lists(table: pa.Table, name: str):
    return table.column(name).to_pylist()


def _versions(table: pa.Table):
    """Per row, the token policy versions or None (unknown, or a file from before schema version 3)."""
    if "token_policy_versions" not in table.column_names:
        return [None] * table.num_rows
    return _lists(table, "token_policy_versions")


_DTYPES = {"uint8": "<u1", "uint16": "<u2", "int16": "<i2", "int32": "<i4"}


def _routing(table: pa.Table):
    """Per row, its routed experts as an int32 [seq, layers, top_k] array (-1 where not covered) or None,
    and the batch's (layers, top_k); a batch mixing layouts is refused (one model per training step)."""
    n = table.num_rows
    if "routed_experts" not in table.column_names:
        return [None] * n, (0, 0)
    blobs = table.column("routed_experts").to_pylist()
    dtypes = _lists(table, "routed_experts_dtype")
    layers = _lists(table, "routed_experts_layers")
    top_k = _lists(table, "routed_experts_top_k")
    layouts = {(layers[i], top_k[i]) for i in range(n) if blobs[i] is not None}
    if len(layouts) > 1:
        raise ValueError(f"routed experts of different layouts in one batch: {sorted(layouts)}")
    out = [None if blobs[i] is None else decode_routing(blobs[i], dtypes[i], layers[i], top_k[i]) for i in range(n)]
    return out, (layouts.pop() if layouts else (0, 0))


def decode_routing(blob: bytes, dtype: str, layers: int, top_k: int) -> np.ndarray:
    """One row's ``routed_experts`` as an int32 [seq, layers, top_k] array, -1 where no event covered a position."""
    raw = np.frombuffer(blob, dtype=_DTYPES[dtype])
    ids = raw.astype(np.int32).reshape(-1, layers, top_k)
    if dtype.startswith("uint"):
        ids[raw.reshape(ids.shape) == np.iinfo(raw.dtype).max] = -1  # the "not covered" mark
    return ids


def _temperatures(i: int, ends, masks_l, sampling_l, length: int) -> np.ndarray:
    """Row i's temperature per response token: its trained turn's, NaN elsewhere or where unknown."""
    out = np.full(length, np.nan, dtype=np.float32)
    if sampling_l is None:
        return out
    turn_ends = ends[i]
    mask = np.asarray(masks_l[i], dtype=bool)
    start = 0
    for k, end in enumerate(turn_ends):
        settings = sampling_l[i][k]
        t = None if settings is None else settings.get("temperature")
        if t is not None:
            span = slice(start, end + 1)
            out[span] = np.where(mask[span], t, np.nan)
        start = end + 1
    return out


def to_verl(table: pa.Table, pad_token_id: int = 0) -> Dict[str, np.ndarray]:
    n = table.num_rows
    prompts_l = _lists(table, "prompt_ids")
    responses_l = _lists(table, "response_ids")
    masks_l = _lists(table, "response_mask")
    logprobs_l = _lists(table, "rollout_log_probs")
    versions_l = _versions(table)
    rewards = _lists(table, "reward")
    last = _lists(table, "last_trained_index")
    p_len = max((len(p) for p in prompts_l), default=0)
    r_len = max((len(r) for r in responses_l), default=0)
    prompts = np.full((n, p_len), pad_token_id, dtype=np.int64)
    responses = np.full((n, r_len), pad_token_id, dtype=np.int64)
    response_mask = np.zeros((n, r_len), dtype=np.int64)
    log_probs = np.zeros((n, r_len), dtype=np.float32)
    rm_scores = np.zeros((n, r_len), dtype=np.float32)
    attention = np.zeros((n, p_len + r_len), dtype=np.int64)
    has_log_probs = np.zeros(n, dtype=bool)
    has_reward = np.zeros(n, dtype=bool)
    versions = np.full((n, r_len), -1, dtype=np.int64)
    has_versions = np.zeros(n, dtype=bool)
    routing_l, (n_layers, n_top_k) = _routing(table)
    routed = np.full((n, p_len + r_len, n_layers, n_top_k), -1, dtype=np.int32)
    has_routed = np.zeros(n, dtype=bool)
    missing = _lists(table, "routed_experts_missing") if "routed_experts_missing" in table.column_names else None
    ends = _lists(table, "turn_end_indices")
    sampling_l = _lists(table, "sampling") if "sampling" in table.column_names else None
    temperatures = np.full((n, r_len), np.nan, dtype=np.float32)
    for i in range(n):
        p, r = prompts_l[i], responses_l[i]
        if p:
            prompts[i, p_len - len(p) :] = p  # left padding, as verl does
        responses[i, : len(r)] = r
        response_mask[i, : len(r)] = masks_l[i]
        attention[i, p_len - len(p) : p_len + len(r)] = 1
        if logprobs_l[i] is None:
            log_probs[i, : len(r)] = np.nan
        else:
            log_probs[i, : len(r)] = logprobs_l[i]
            has_log_probs[i] = True
        if versions_l[i] is not None:
            versions[i, : len(r)] = versions_l[i]
            has_versions[i] = True
        if rewards[i] is not None and last[i] is not None:
            rm_scores[i, last[i]] = rewards[i]
            has_reward[i] = True
        if routing_l[i] is not None:
            routed[i, p_len - len(p) : p_len + len(r)] = routing_l[i]
            has_routed[i] = missing[i] == 0
        temperatures[i, : len(r)] = _temperatures(i, ends, masks_l, sampling_l, len(r))
    position_ids = np.clip(np.cumsum(attention, axis=1) - 1, 0, None)
    return {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_mask,
        "rollout_log_probs": log_probs,
        "has_log_probs": has_log_probs,
        "rm_scores": rm_scores,
        "has_reward": has_reward,
        "token_policy_versions": versions,
        "has_policy_versions": has_versions,
        "temperatures": temperatures,
        "routed_experts": routed,
        "has_routed_experts": has_routed,
        "input_ids": np.concatenate([prompts, responses], axis=1),
        "attention_mask": attention,
        "position_ids": position_ids,
        "sample_mask": np.asarray(_lists(table, "sample_mask"), dtype=np.int64),
        "uid": np.asarray(_lists(table, "uid"), dtype=object),
        "key": np.asarray(_lists(table, "key"), dtype=object),
    }


def to_packed(table: pa.Table) -> Dict[str, np.ndarray]:
    n = table.num_rows
    prompts_l = _lists(table, "prompt_ids")
    responses_l = _lists(table, "response_ids")
    masks_l = _lists(table, "response_mask")
    logprobs_l = _lists(table, "rollout_log_probs")
    versions_l = _versions(table)
    lengths = np.array([len(p) + len(r) for p, r in zip(prompts_l, responses_l)], dtype=np.int64)
    cu = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu[1:])
    total = int(cu[-1])
    input_ids = np.empty(total, dtype=np.int64)
    loss_mask = np.zeros(total, dtype=np.int8)
    log_probs = np.zeros(total, dtype=np.float32)
    position_ids = np.empty(total, dtype=np.int64)
    policy_versions = np.full(total, -1, dtype=np.int64)
    routing_l, (n_layers, n_top_k) = _routing(table)
    routed = np.full((total, n_layers, n_top_k), -1, dtype=np.int32)
    for i in range(n):
        p, r = prompts_l[i], responses_l[i]
        at = int(cu[i])
        input_ids[at : at + len(p)] = p
        input_ids[at + len(p) : at + len(p) + len(r)] = r
        loss_mask[at + len(p) : at + len(p) + len(r)] = masks_l[i]
        log_probs[at + len(p) : at + len(p) + len(r)] = np.nan if logprobs_l[i] is None else logprobs_l[i]
        position_ids[at : at + len(p) + len(r)] = np.arange(len(p) + len(r))
        if versions_l[i] is not None:
            policy_versions[at + len(p) : at + len(p) + len(r)] = versions_l[i]
        if routing_l[i] is not None:
            routed[at : at + len(p) + len(r)] = routing_l[i]
    parent = [-1 if v is None else v for v in _lists(table, "parent_index")]
    return {
        "input_ids": input_ids,
        "cu_seqlens": cu,
        "position_ids": position_ids,
        "loss_mask": loss_mask,
        "log_probs": log_probs,
        # -1 on prompt tokens, on tokens the model did not sample, and on rows whose versions are unknown.
        "policy_versions": policy_versions,
        # [total, layers, top_k], aligned with input_ids; -1 where no event covered a position.
        "routed_experts": routed,
        "prompt_lens": np.array([len(p) for p in prompts_l], dtype=np.int64),
        "parent_index": np.asarray(parent, dtype=np.int64),
        "shared_prefix_len": np.asarray(_lists(table, "shared_prefix_len"), dtype=np.int64),
        "sample_mask": np.asarray(_lists(table, "sample_mask"), dtype=np.int64),
        "uid": np.asarray(_lists(table, "uid"), dtype=object),
        "key": np.asarray(_lists(table, "key"), dtype=object),
    }


def grpo_advantages(table: pa.Table, eps: float = 1e-6) -> np.ndarray:
    """Each row's GRPO advantage: its session's reward normalised over the sessions of its uid in the batch.

    Placeholders (sample_mask 0) and rows without a reward get 0 and do not count towards the statistics.
    """
    uids = _lists(table, "uid")
    sessions = _lists(table, "session_id")
    rewards = _lists(table, "reward")
    sample = _lists(table, "sample_mask")
    by_uid: Dict[str, Dict[str, float]] = defaultdict(dict)
    for u, s, r, m in zip(uids, sessions, rewards, sample):
        if m == 1 and r is not None:
            by_uid[u][s] = r
    stats = {}
    for u, by_session in by_uid.items():
        values = np.array(list(by_session.values()), dtype=np.float64)
        stats[u] = (values.mean(), values.std() if len(values) > 1 else 1.0)
    out = np.zeros(len(uids), dtype=np.float32)
    for i, (u, s, r, m) in enumerate(zip(uids, sessions, rewards, sample)):
        if m == 1 and r is not None:
            mean, std = stats[u]
            out[i] = (by_uid[u][s] - mean) / (std + eps)
    return out


def to_torch(arrays: Dict[str, np.ndarray]):
    """The same dict as torch tensors (string columns stay numpy); needs ``pip install trajflow[torch]``."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("to_torch needs torch: pip install 'trajflow[torch]'") from err
    return {k: v if v.dtype == object else torch.from_numpy(v) for k, v in arrays.items()}
