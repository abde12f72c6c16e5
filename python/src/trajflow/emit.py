"""Emit gateway events (docs/events.md) from a gateway of your own, to Kafka. The events are built by
:class:`trajflow.events.EventBuilder`, with the rules of trajflow's gateway (see :mod:`trajflow.events`);
messages are keyed by ``uid`` (all sessions of a GRPO group in one partition).

Durability: by default each emitting method returns once the broker acknowledged its events (``acks=all``
and an idempotent producer). A delivery that fails raises :class:`DeliveryError` and the events it could
not confirm stay with the session: they are sent again, byte for byte, before its next events (the broker
may have written them; the pipeline ignores an exact redelivery). With ``wait=False`` the methods return
at once and :meth:`Session.flush` / :meth:`Emitter.flush` report failures.
"""
from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

from .events import CallEvents, EventBuilder, _js_number, now_ms

__all__ = ["CallEvents", "DeliveryError", "Emitter", "EventBuilder", "Session"]

# What the emitter sets on a producer it creates, unless the caller's config says otherwise: the broker
# acknowledges only once every in-sync replica has the events, and retries never duplicate or reorder them.
PRODUCER_DEFAULTS = {"acks": "all", "enable.idempotence": True, "compression.type": "zstd"}


# ---------------------------------------------------------------------------------------------- delivery


class DeliveryError(Exception):
    """The broker did not confirm some of a session's events. They stay with the session
    (``session.unsettled``) and are sent again, byte for byte, before its next events or by
    :meth:`Session.flush`.

    Attributes:
        errors: the producer's errors (``confluent_kafka.KafkaError``, or the exception ``produce`` raised).
        unsettled: how many of the session's events now wait to be sent again.
        retryable: False when an error is fatal for the producer (then no re-send through it can succeed:
            point the session at a new :class:`Emitter`).
    """

    def __init__(self, message: str, errors: List[Any], unsettled: int):
        super().__init__(message)
        self.errors = errors
        self.unsettled = unsettled
        self.retryable = not any(_fatal(e) for e in errors)


def _fatal(error: Any) -> bool:
    # A delivery report carries a KafkaError; produce() raises a KafkaException wrapping one.
    if isinstance(error, BaseException) and error.args:
        error = error.args[0]
    fatal = getattr(error, "fatal", None)
    return bool(fatal()) if callable(fatal) else False


class _Batch:
    """One append's deliveries: how many are outstanding and which failed (by seq order)."""

    __slots__ = ("remaining", "failed", "done", "moved")

    def __init__(self, n: int):
        self.remaining = n
        # Set (under the emitter's lock) once the failed records were handed to the session's unsettled.
        self.moved = False
        self.failed: List[Tuple[int, bytes, Any]] = []
        self.done = threading.Event()
        if n == 0:
            self.done.set()


class Emitter:
    """Sends sessions' events to one Kafka topic, keyed by ``uid``.

    Args:
        producer: a ``confluent_kafka.Producer`` configuration dict (``bootstrap.servers`` at least; the
            emitter adds ``acks=all``, ``enable.idempotence=true`` and ``compression.type=zstd`` unless the
            dict sets them), or a producer you made (used as is: give it ``acks=all`` and idempotence for
            the same guarantees). Any object with confluent-kafka's ``produce(topic, key=, value=,
            on_delivery=)``, ``poll(timeout)`` and ``flush(timeout)`` works.
        topic: the topic of gateway events that ``trajflow consume`` reads.
        wait: the default for every emitting method: True (the default) returns once the broker
            acknowledged the events (``message.timeout.ms``, 300 s by default, bounds the wait); False
            returns at once, and :meth:`flush` reports failures.
        max_tips: branch tips remembered per session for the delta form (default 8, as the gateway).
        clock: the event time source, milliseconds since the epoch (default: the wall clock).
    """

    def __init__(
        self,
        producer: Any,
        topic: str,
        *,
        wait: bool = True,
        max_tips: int = 8,
        clock: Callable[[], Union[int, float]] = now_ms,
    ):
        if not isinstance(topic, str) or topic == "":
            raise ValueError("topic must be a non-empty string")
        if isinstance(producer, Mapping):
            from confluent_kafka import Producer  # only emitting needs confluent-kafka, not reading

            producer = Producer({**PRODUCER_DEFAULTS, **producer})
        self.producer = producer
        self.topic = topic
        self.wait = wait
        self.max_tips = max_tips
        self.clock = clock
        #: Output tokens recorded without a logprob (the gateway's ``gateway_missing_logprobs``).
        self.missing_logprobs = 0
        #: Events sent again after a failed delivery (``gateway_event_resends``).
        self.resends = 0
        #: Calls whose prompt went in the delta form (``gateway_delta_prompts``).
        self.delta_prompts = 0
        self._sessions: "weakref.WeakSet[Session]" = weakref.WeakSet()
        # Sessions holding events whose delivery failed, held here too: a session dropped by its caller
        # (after an end(wait=False), say) is still flushed and reported by flush().
        self._unsettled: "set[Session]" = set()
        self._lock = threading.Lock()

    def session(
        self,
        uid: str,
        session_id: str,
        sample_index: Optional[int] = None,
        group_size: Optional[int] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> "Session":
        """A new session emitting through this emitter (see :class:`Session`)."""
        return Session(self, uid, session_id, sample_index, group_size, metadata)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Sends every session's unsettled events again and waits for all deliveries; raises
        :class:`DeliveryError` (the first session's) when some are still not confirmed."""
        first: Optional[DeliveryError] = None
        for s in list(self._sessions):  # includes every session in self._unsettled (held strongly)
            try:
                s.flush(timeout)
            except DeliveryError as e:
                first = first or e
        if first is not None:
            raise first

    def _produce(self, key: str, records: List[Tuple[int, bytes]], batch: _Batch, on_failed: Callable[[_Batch], None]) -> None:
        """Produces ``records`` (seq, bytes) in order; the batch settles when every delivery reported."""

        def delivered(seq: int, value: bytes) -> Callable[[Any, Any], None]:
            def report(err: Any, _msg: Any) -> None:
                with self._lock:
                    if err is not None:
                        batch.failed.append((seq, value, err))
                    batch.remaining -= 1
                    done = batch.remaining == 0
                if done:
                    if batch.failed:
                        on_failed(batch)
                    batch.done.set()

            return report

        for i, (seq, value) in enumerate(records):
            while True:
                try:
                    self.producer.produce(self.topic, key=key, value=value, on_delivery=delivered(seq, value))
                    break
                except BufferError:
                    # The producer's queue is full: serve deliveries until there is room.
                    self.producer.poll(0.1)
                except Exception as e:  # the producer refused it (too large, fatal): none of the rest goes
                    with self._lock:
                        for s, v in records[i:]:
                            batch.failed.append((s, v, e))
                        batch.remaining -= len(records) - i
                        done = batch.remaining == 0
                    if done:
                        on_failed(batch)
                        batch.done.set()
                    return
        self.producer.poll(0)

    def _await(self, batch: _Batch, timeout: Optional[float]) -> bool:
        """Serves delivery reports until the batch settled (or ``timeout`` seconds passed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not batch.done.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self.producer.poll(0.05)
        return True


class Session:
    """One agent session (a rollout) emitting through an :class:`Emitter`. Methods may be called from
    several threads: a session's events are built and appended one append after another.

    Args:
        emitter: where the events go. May be replaced (``session.emitter = Emitter(...)``) after a fatal
            producer error, between calls: the unsettled events go first through the new one.
        uid: the dataset prompt / GRPO group id (non-empty); every event carries it and is keyed by it.
        session_id: the rollout's id, unique within its uid (non-empty).
        sample_index: this session's index within its GRPO group, for ``session.start``.
        group_size: how many sessions the uid has (n), for ``session.start``.
        metadata: free-form task metadata for ``session.start`` (e.g. the reference answer rule rewards use).
    """

    def __init__(
        self,
        emitter: Emitter,
        uid: str,
        session_id: str,
        sample_index: Optional[int] = None,
        group_size: Optional[int] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ):
        self.emitter = emitter
        self.events = EventBuilder(uid, session_id, sample_index, group_size, metadata, max_tips=emitter.max_tips)
        self._lock = threading.RLock()
        # Guards what delivery reports change (unsettled events), which any thread serving them may do.
        self._state = threading.Lock()
        self._unsettled: List[Tuple[int, bytes]] = []
        self._in_flight: List[_Batch] = []
        emitter._sessions.add(self)

    @property
    def uid(self) -> str:
        return self.events.uid

    @property
    def session_id(self) -> str:
        return self.events.session_id

    @property
    def unsettled(self) -> List[bytes]:
        """The events whose delivery failed, in seq order: sent again, byte for byte, before the next ones."""
        with self._state:
            return [v for _, v in sorted(self._unsettled)]

    def start(self, *, wait: Optional[bool] = None) -> None:
        """Emits ``session.start`` (with the session's sample_index, group_size and metadata). Optional: the
        first other event starts the session when this was not called. Raises ValueError when called twice.

        Args:
            wait: True: return once the broker acknowledged; False: at once; None: the emitter's default.
        """
        self._append(lambda ts: self.events.start(ts), wait)

    def call(
        self,
        prompt_ids: Any,
        output_ids: Any,
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
        *,
        call_id: Optional[str] = None,
        sent_at: Optional[Union[int, float]] = None,
        done_at: Optional[Union[int, float]] = None,
        output_versions: Any = None,
        routed_experts: Any = None,
        prompt_routed_experts: Any = None,
        wait: Optional[bool] = None,
    ) -> str:
        """Emits one model call (a ``request`` and a ``response`` event) and returns its call id.

        Args:
            prompt_ids: the full prompt's token ids as sent to the engine (a list, numpy array or CPU
                tensor of integers). Sent in the delta form when it starts with an earlier call's prompt
                + output; always pass the full prompt.
            output_ids: the sampled token ids.
            logprobs: the sampled tokens' logprobs, one per output id, or None when the engine gave none.
                A None or NaN among them (a token the engine gave no logprob for) travels as NaN, the
                protocol's "missing": never fill with 0.0. Counted in ``emitter.missing_logprobs``.
            finish_reason: the engine's raw finish reason (``stop``, ``length``, ``tool_calls``,
                ``abort``, ...), never normalised: ``abort`` and ``length`` mean something to trainers.
            messages: the OpenAI chat messages the prompt was rendered from (lets trajflow tell
                retokenization drift from an edited history).
            tools: the tool definitions offered to the model.
            sampling: the sampling settings sent to the engine: ``temperature``, ``top_p``, ``top_k``,
                ``min_p``, ``repetition_penalty``, ``logprobs_mode`` (``raw``/``processed``), ``engine``.
                A setting outside the protocol's range is left out.
            weight_version: the policy version when the call was sent (the request's).
            completion_version: the policy version when the answer came back (the response's; it wins).
            choice_index: declares a deliberate extra sample of the same prompt (best-of-N), never taken
                for a retry. Give each choice its own ``call_id``.
            text: the decoded output.
            tool_calls: the tool calls parsed from the output (OpenAI format); an empty list is left out.
            call_id: the call's id, unique within the session (default ``c1``, ``c2``, ...).
            sent_at: when the call was sent upstream (ms since the epoch; default: now). The request's ts.
            done_at: when its answer came back (ms since the epoch; default: now). The response's ts.
            output_versions: per output token, the policy version that sampled it (partial rollouts).
            routed_experts: the experts chosen for each output token, a ``[tokens, layers, top_k]``
                numpy array (uint8/uint16/int16/int32) or the protocol's packed dict.
            prompt_routed_experts: the same for the prompt's last ``shape[0]`` positions.
            wait: True: return once the broker acknowledged; False: at once; None: the emitter's default.

        Raises:
            ValueError: an argument the protocol does not accept (nothing is emitted, no seq is used).
            DeliveryError: the broker did not confirm the events (they are kept and sent again first).
        """
        missing = [0, False]
        chosen = [call_id]

        def build(ts: Union[int, float]) -> List[bytes]:
            if chosen[0] is None:
                chosen[0] = f"c{self.events.calls + 1}"
            built = self.events.call(
                chosen[0],
                prompt_ids,
                output_ids,
                sent_at=ts if sent_at is None else sent_at,
                done_at=ts if done_at is None else done_at,
                logprobs=logprobs,
                finish_reason=finish_reason,
                messages=messages,
                tools=tools,
                sampling=sampling,
                weight_version=weight_version,
                completion_version=completion_version,
                choice_index=choice_index,
                text=text,
                tool_calls=tool_calls,
                output_versions=output_versions,
                routed_experts=routed_experts,
                prompt_routed_experts=prompt_routed_experts,
            )
            missing[0], missing[1] = built.missing_logprobs, built.delta
            return built.records

        self._append(build, wait, counts=missing)
        return chosen[0]

    def reward(
        self,
        value: float,
        target: Optional[str] = None,
        key: Optional[str] = None,
        stage: Optional[str] = None,
        finished: Optional[bool] = None,
        info: Optional[Mapping[str, Any]] = None,
        *,
        wait: Optional[bool] = None,
    ) -> None:
        """Emits a ``reward`` event. Rewards may come before or after :meth:`end`.

        Args:
            value: the score (a finite number).
            target: ``"session"`` (the default when None) or the call id of one of the session's calls
                (a per-turn reward).
            key: idempotency key: a reward with a repeated key is applied once.
            stage: who scored it (the pipeline's default when None: ``env``); ``--await-rewards`` names
                the stages a session waits for.
            finished: False when the episode did not finish (e.g. it hit the turn limit).
            info: free-form details kept for auditing.
            wait: True: return once the broker acknowledged; False: at once; None: the emitter's default.
        """
        self._append(lambda ts: self.events.reward(ts, value, target, key, stage, finished, info), wait)

    def end(self, status: str = "ok", *, wait: Optional[bool] = None) -> None:
        """Emits ``session.end``. Only rewards may follow it.

        Args:
            status: ``ok``, ``aborted`` (the agent gave up or was cancelled) or ``failed``.
            wait: True: return once the broker acknowledged; False: at once; None: the emitter's default.
        """
        self._append(lambda ts: self.events.end(ts, status), wait)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Sends the unsettled events again and waits until every event of the session was delivered;
        raises :class:`DeliveryError` when some were not (they stay unsettled)."""
        self._append(None, True, timeout=timeout, settle_all=True)

    def _append(
        self,
        build: Optional[Callable[[Union[int, float]], List[bytes]]],
        wait: Optional[bool],
        counts: Optional[list] = None,
        timeout: Optional[float] = None,
        settle_all: bool = False,
    ) -> None:
        emitter = self.emitter
        with self._lock:
            # Built while holding the session: seq numbers follow the events appended before them.
            first = self.events.seq
            built = [] if build is None else build(_js_number(emitter.clock()))
            new = [(first + i, v) for i, v in enumerate(built)]
            with self._state:
                resend, self._unsettled = self._unsettled, []
                emitter._unsettled.discard(self)
                # Batches whose failures were just taken for re-sending are no longer waited for.
                self._in_flight = [b for b in self._in_flight if not b.moved]
            with emitter._lock:  # the counters are the emitter's, shared by sessions on other threads
                emitter.resends += len(resend)
                if counts is not None:
                    emitter.missing_logprobs += counts[0]
                    emitter.delta_prompts += int(counts[1])
            batch = _Batch(len(resend) + len(new))
            self._in_flight.append(batch)
            emitter._produce(self.uid, sorted(resend) + new, batch, self._failed)
            if not (emitter.wait if wait is None else wait):
                return
            pending = list(self._in_flight) if settle_all else [batch]
            for b in pending:
                if not emitter._await(b, timeout):
                    raise TimeoutError(f"events of session {self.session_id} not yet acknowledged after {timeout} s")
            self._in_flight = [b for b in self._in_flight if not b.done.is_set()]
            failed = [e for b in pending for _, _, e in b.failed]
            if failed:
                n = len(self.unsettled)
                raise DeliveryError(
                    f"{n} event(s) of session {self.session_id} (uid {self.uid}) were not acknowledged: "
                    f"{failed[0]}; they are sent again before the session's next events",
                    failed,
                    n,
                )

    def _failed(self, batch: _Batch) -> None:
        """A batch settled with failures (called from whichever thread served the delivery reports)."""
        with self._state:
            self._unsettled.extend((seq, v) for seq, v, _ in batch.failed)
            batch.moved = True
            self.emitter._unsettled.add(self)
