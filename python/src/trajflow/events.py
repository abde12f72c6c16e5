"""Gateway events (docs/events.md) built with the rules of trajflow's gateway (src/gateway/call-events.ts):
the two cannot disagree, test/vectors/gateway-events.json holds the exact events both must write for the same
calls. :mod:`trajflow.emit` sends them to Kafka; the builder here needs no Kafka: use it to write events
anywhere (a JSONL file for ``trajflow replay``, another transport).

- ``seq`` is 0, 1, 2, ... per session without gaps; ``session.start`` comes before any other event
  (written implicitly with the first one when ``start()`` was not called).
- One ``request`` and one ``response`` event per call. The prompt goes in the delta form
  (``parent_call_id`` + ``prompt_delta_ids``) against the longest branch tip it starts with, where a tip is
  an earlier call's prompt + output; the call that extends a tip replaces it; at most ``max_tips`` tips
  per session (a call extending a forgotten one goes in the full form, which is always correct).
- Token ids and logprobs travel packed (``{"b64": ...}`` of little-endian int32 / float32).
- Logprobs are one per output id or none; a token the engine gave none for is ``None`` or NaN and travels
  as NaN in the packed array (the protocol's "missing": never filled with 0.0, which means probability 1),
  counted in ``Emitter.missing_logprobs``. Rows training such a token carry no logprobs and say so.
- ``finish_reason`` is sent as the engine gave it (``abort`` stays ``abort``).
- Messages are keyed by ``uid`` (all sessions of a GRPO group in one partition).

"""
from __future__ import annotations

import base64
import contextlib
import json
import math
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["CallEvents", "EventBuilder", "encode", "now_ms", "pack_token_ids", "token_ids"]

INT32_MAX = 2**31 - 1
# Logprobs above 0 by at most this much are float rounding, which the pipeline accepts (docs/events.md).
LOGPROB_ROUNDING = 1e-5
END_STATUSES = ("ok", "aborted", "failed")
LOGPROBS_MODES = ("raw", "processed")
ROUTED_DTYPES = {"uint8": "u1", "uint16": "<u2", "int16": "<i2", "int32": "<i4"}

def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch, as integers (the TypeScript gateway's Date.now())."""
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------------------------------- packing


def _b64(a: np.ndarray) -> Dict[str, str]:
    return {"b64": base64.b64encode(a.tobytes()).decode("ascii")}


def token_ids(values: Any, what: str) -> np.ndarray:
    """Token ids as little-endian int32, checked: integers 0..2^31-1 (a float or a negative id is an error,
    not something to round or wrap)."""
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError(f"{what} must be a flat sequence of token ids, got shape {a.shape}")
    if a.size == 0:
        return np.zeros(0, dtype="<i4")
    if a.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integers, got {a.dtype} (e.g. {a[0]!r})")
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi > INT32_MAX:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{what} holds {bad}, not a token id (an integer 0..{INT32_MAX})")
    return a.astype("<i4", copy=False)


def pack_token_ids(values: Any, what: str = "token ids") -> Dict[str, str]:
    """The packed form of token ids: ``{"b64": base64 of little-endian int32}``."""
    return _b64(token_ids(values, what))


def _logprobs(values: Any, n: int) -> Tuple[Optional[np.ndarray], int]:
    """Logprobs as float32 (NaN where missing) and how many are missing (None or NaN)."""
    if values is None:
        return None, n
    # dtype=float64 turns None into NaN, so both spellings of "missing" are counted alike.
    a = np.array(values, dtype=np.float64)
    if a.ndim != 1 or a.size != n:
        raise ValueError(f"logprobs has {a.size} values but output_ids has {n}: send one per output id, or none")
    a = a.astype("<f4")
    nan = np.isnan(a)
    missing = int(nan.sum())
    present = a[~nan]
    if np.isinf(present).any():
        raise ValueError("logprobs holds an infinite value; send None for a token whose logprob is unknown")
    if present.size and float(present.max()) > LOGPROB_ROUNDING:
        raise ValueError(f"logprobs holds {float(present.max())}, above 0: a logprob is log(p) <= 0")
    return a, missing


def pack_routed_experts(value: Any, what: str) -> Dict[str, Any]:
    """An engine's ``[tokens, layers, top_k]`` expert ids (a numpy array of uint8, uint16, int16 or int32)
    as the protocol's packed form; an already packed dict is passed through."""
    if isinstance(value, Mapping):
        return dict(value)
    a = np.asarray(value)
    if a.ndim != 3 or a.dtype.name not in ROUTED_DTYPES:
        raise ValueError(f"{what} must be a [tokens, layers, top_k] array of {'/'.join(ROUTED_DTYPES)}, got {a.dtype} {a.shape}")
    return {
        "b64": base64.b64encode(np.ascontiguousarray(a.astype(ROUTED_DTYPES[a.dtype.name], copy=False)).tobytes()).decode("ascii"),
        "dtype": a.dtype.name,
        "shape": list(a.shape),
    }


def sampling_settings(sampling: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """The sampling settings as the protocol carries them: a known setting outside its range is left out
    (the engine judged it; the pipeline would otherwise reject the whole call), as the TypeScript gateway
    does. Other keys pass through."""
    if sampling is None:
        return None
    ranges: Dict[str, Callable[[Any], bool]] = {
        "temperature": lambda v: _number(v) and v >= 0,
        "top_p": lambda v: _number(v) and 0 < v <= 1,
        "top_k": lambda v: _number(v) and float(v).is_integer() and v >= -1,
        "min_p": lambda v: _number(v) and 0 <= v <= 1,
        "repetition_penalty": lambda v: _number(v) and v > 0,
        "logprobs_mode": lambda v: v in LOGPROBS_MODES,
        "engine": lambda v: isinstance(v, str),
    }
    return {k: v for k, v in sampling.items() if k not in ranges or ranges[k](v)}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _js_number(v: Union[int, float]) -> Union[int, float]:
    """An integral float as an int, so it is written as JavaScript writes it (``1``, not ``1.0``)."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def encode(event: Mapping[str, Any]) -> bytes:
    """One event as the bytes sent: compact JSON, UTF-8 (JavaScript's JSON.stringify of the same object)."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


# ---------------------------------------------------------------------------------------------- events


class CallEvents:
    """What recording one call built: ``records`` (the events' bytes, in seq order), ``missing_logprobs``
    (output tokens without a logprob: all of them when none were given) and ``delta`` (whether the prompt
    went in the delta form)."""

    __slots__ = ("records", "missing_logprobs", "delta")

    def __init__(self, records: List[bytes], missing_logprobs: int, delta: bool):
        self.records = records
        self.missing_logprobs = missing_logprobs
        self.delta = delta

    def __repr__(self) -> str:
        return f"CallEvents({len(self.records)} events, missing_logprobs={self.missing_logprobs}, delta={self.delta})"


class EventBuilder:
    """Builds the events of one session: seq numbers, the implicit ``session.start``, the delta form against
    branch tips, packed arrays. Pure (no I/O): every method returns the events' bytes and advances the
    session only after its inputs were checked, so a rejected call never leaves a seq gap.

    Args:
        uid: the dataset prompt / GRPO group id (non-empty); Kafka messages are keyed by it.
        session_id: the agent session (one rollout), unique within its uid (non-empty).
        sample_index: this session's index within its GRPO group (the rollout number), or None.
        group_size: how many sessions the uid has (n), or None.
        metadata: free-form task metadata for ``session.start`` (e.g. the reference answer), or None.
        max_tips: branch tips remembered for the delta form (the TypeScript gateway's
            ``max_tips_per_session``, default 8).
    """

    def __init__(
        self,
        uid: str,
        session_id: str,
        sample_index: Optional[int] = None,
        group_size: Optional[int] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        max_tips: int = 8,
    ):
        for name, v in (("uid", uid), ("session_id", session_id)):
            if not isinstance(v, str) or v == "":
                raise ValueError(f"{name} must be a non-empty string, got {v!r}")
        if sample_index is not None and not _count(sample_index, 0):
            raise ValueError(f"sample_index must be an integer >= 0, got {sample_index!r}")
        if group_size is not None and not _count(group_size, 1):
            raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ValueError("metadata must be a dict")
        if not _count(max_tips, 1):
            raise ValueError(f"max_tips must be an integer >= 1, got {max_tips!r}")
        self.uid = uid
        self.session_id = session_id
        self.sample_index = None if sample_index is None else int(sample_index)
        self.group_size = None if group_size is None else int(group_size)
        self.metadata = dict(metadata) if metadata is not None else None
        self.max_tips = max_tips
        #: The next event's seq.
        self.seq = 0
        #: Whether ``session.start`` was built.
        self.started = False
        #: Calls recorded, for ``c{n}`` call ids.
        self.calls = 0
        # (call_id, prompt ++ output), oldest first.
        self._tips: List[Tuple[str, np.ndarray]] = []

    @contextlib.contextmanager
    def _advancing(self) -> Iterator[None]:
        """Undoes what a build did to the session when it fails part way (an object json cannot write in
        messages, say): a seq is taken only by an event that exists."""
        saved = (self.seq, self.started, self.calls, list(self._tips))
        try:
            yield
        except BaseException:
            self.seq, self.started, self.calls, self._tips = saved
            raise

    def _base(self, type_: str, ts: Union[int, float]) -> Dict[str, Any]:
        seq = self.seq
        self.seq += 1
        return {"v": 1, "type": type_, "uid": self.uid, "session_id": self.session_id, "seq": seq, "ts": ts}

    def start(self, ts: Union[int, float]) -> List[bytes]:
        """``session.start`` at ``ts`` (ms since the epoch). A session has at most one."""
        if self.started:
            raise ValueError(f"session {self.session_id} of {self.uid} has already started")
        ts = _timestamp(ts)
        with self._advancing():
            self.started = True
            event = self._base("session.start", ts)
            if self.sample_index is not None:
                event["sample_index"] = self.sample_index
            if self.group_size is not None:
                event["group_size"] = self.group_size
            if self.metadata is not None:
                event["metadata"] = self.metadata
            return [encode(event)]

    def _started(self, ts: Union[int, float]) -> List[bytes]:
        return [] if self.started else self.start(ts)

    def parent_of(self, prompt: np.ndarray) -> Optional[Tuple[str, np.ndarray]]:
        """The longest tip the prompt starts with, or None (a prompt equal to a tip is a delta of nothing)."""
        best: Optional[Tuple[str, np.ndarray]] = None
        for tip in self._tips:
            t = tip[1]
            if t.size > prompt.size or (best is not None and t.size <= best[1].size):
                continue
            if np.array_equal(prompt[: t.size], t):
                best = tip
        return best

    def tips(self) -> List[str]:
        """The call ids of the remembered tips, oldest first."""
        return [c for c, _ in self._tips]

    def call(
        self,
        call_id: str,
        prompt_ids: Any,
        output_ids: Any,
        *,
        sent_at: Union[int, float],
        done_at: Union[int, float],
        logprobs: Any = None,
        finish_reason: str = "stop",
        messages: Optional[Sequence[Any]] = None,
        tools: Optional[Sequence[Any]] = None,
        sampling: Optional[Mapping[str, Any]] = None,
        weight_version: Optional[int] = None,
        completion_version: Optional[int] = None,
        choice_index: Optional[int] = None,
        text: Optional[str] = None,
        tool_calls: Optional[Sequence[Any]] = None,
        output_versions: Any = None,
        routed_experts: Any = None,
        prompt_routed_experts: Any = None,
    ) -> CallEvents:
        """The ``request`` and ``response`` events of one call (and ``session.start`` before them when the
        session has none). See :meth:`Session.call` for the arguments; ``sent_at`` / ``done_at`` are the
        request's and the response's ``ts``."""
        if not isinstance(call_id, str) or call_id == "":
            raise ValueError(f"call_id must be a non-empty string, got {call_id!r}")
        if not isinstance(finish_reason, str) or finish_reason == "":
            raise ValueError(f"finish_reason must be the engine's finish reason (a non-empty string), got {finish_reason!r}")
        for name, v in (("weight_version", weight_version), ("completion_version", completion_version), ("choice_index", choice_index)):
            if v is not None and not _count(v, 0):
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        # numpy integers pass the check but json cannot write them.
        weight_version, completion_version, choice_index = (
            None if v is None else int(v) for v in (weight_version, completion_version, choice_index)
        )
        sent_at, done_at = _timestamp(sent_at), _timestamp(done_at)
        prompt = token_ids(prompt_ids, "prompt_ids")
        output = token_ids(output_ids, "output_ids")
        lp, missing = _logprobs(logprobs, output.size)
        versions = None
        if output_versions is not None:
            versions = token_ids(output_versions, "output_versions")
            if versions.size != output.size:
                raise ValueError(f"output_versions has {versions.size} values but output_ids has {output.size}: one per output id")
        experts = pack_routed_experts(routed_experts, "routed_experts") if routed_experts is not None else None
        prompt_experts = (
            pack_routed_experts(prompt_routed_experts, "prompt_routed_experts") if prompt_routed_experts is not None else None
        )
        # Inputs are checked: from here on the session advances (undone if writing an event fails).
        with self._advancing():
            records = self._started(sent_at)
            parent = self.parent_of(prompt)
            request = self._base("request", sent_at)
            request["call_id"] = call_id
            if parent is None:
                request["prompt_ids"] = _b64(prompt)
            else:
                request["parent_call_id"] = parent[0]
                request["prompt_delta_ids"] = _b64(prompt[parent[1].size :])
            if messages is not None:
                request["messages"] = list(messages)
            if tools is not None:
                request["tools"] = list(tools)
            if choice_index is not None:
                request["choice_index"] = choice_index
            if weight_version is not None:
                request["weight_version"] = weight_version
            settings = sampling_settings(sampling)
            if settings is not None:
                request["sampling"] = settings
            if prompt_experts is not None:
                request["prompt_routed_experts"] = prompt_experts
            records.append(encode(request))
            response = self._base("response", done_at)
            response["call_id"] = call_id
            response["output_ids"] = _b64(output)
            if lp is not None:
                response["logprobs"] = _b64(lp)
            response["finish_reason"] = finish_reason
            if completion_version is not None:
                response["weight_version"] = completion_version
            if versions is not None:
                response["output_versions"] = _b64(versions)
            if experts is not None:
                response["routed_experts"] = experts
            if text is not None:
                response["text"] = text
            if tool_calls:
                response["tool_calls"] = list(tool_calls)
            records.append(encode(response))
            self._add_tip(call_id, np.concatenate([prompt, output]), parent[0] if parent is not None else None)
            self.calls += 1
        return CallEvents(records, missing, parent is not None)

    def _add_tip(self, call_id: str, tokens: np.ndarray, parent: Optional[str]) -> None:
        if parent is not None:
            self._tips = [t for t in self._tips if t[0] != parent]
        self._tips.append((call_id, tokens))
        if len(self._tips) > self.max_tips:
            self._tips.pop(0)

    def reward(
        self,
        ts: Union[int, float],
        value: float,
        target: Optional[str] = None,
        key: Optional[str] = None,
        stage: Optional[str] = None,
        finished: Optional[bool] = None,
        info: Optional[Mapping[str, Any]] = None,
    ) -> List[bytes]:
        """A ``reward`` event (and ``session.start`` before it when the session has none). See
        :meth:`Session.reward` for the arguments."""
        if not _number(value):
            raise ValueError(f"value must be a finite number, got {value!r}")
        for name, v in (("target", target), ("stage", stage), ("key", key)):
            if v is not None and (not isinstance(v, str) or v == ""):
                raise ValueError(f"{name} must be a non-empty string, got {v!r}")
        if finished is not None and not isinstance(finished, bool):
            raise ValueError(f"finished must be True or False, got {finished!r}")
        if info is not None and not isinstance(info, Mapping):
            raise ValueError("info must be a dict")
        ts = _timestamp(ts)
        with self._advancing():
            records = self._started(ts)
            event = self._base("reward", ts)
            # The field order of the TypeScript gateway's reward events, so equal inputs give equal bytes.
            event["value"] = _js_number(value)
            for name, v in (("target", target), ("stage", stage), ("key", key), ("finished", finished), ("info", info)):
                if v is not None:
                    event[name] = dict(v) if name == "info" else v
            records.append(encode(event))
            return records

    def end(self, ts: Union[int, float], status: str = "ok") -> List[bytes]:
        """``session.end`` with ``status`` ``ok``, ``aborted`` or ``failed`` (and ``session.start`` before it
        when the session has none)."""
        if status not in END_STATUSES:
            raise ValueError(f"status must be one of {', '.join(END_STATUSES)}, got {status!r}")
        ts = _timestamp(ts)
        with self._advancing():
            records = self._started(ts)
            event = self._base("session.end", ts)
            event["status"] = status
            records.append(encode(event))
            return records


def _count(v: Any, least: int) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and int(v) >= least


def _timestamp(ts: Any) -> Union[int, float]:
    if not _number(ts) or ts < 0:
        raise ValueError(f"a timestamp must be milliseconds since the Unix epoch (a number >= 0), got {ts!r}")
    return _js_number(ts)
