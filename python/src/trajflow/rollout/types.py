"""What the rollout driver hands an agent, and what it hands back to the trainer."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import pyarrow as pa

# How a session ended, as the gateway records it (session.end's status).
OK, FAILED, ABORTED = "ok", "failed", "aborted"


@dataclass(frozen=True)
class AgentContext:
    """One session's handle, the single argument every agent is called with.

    An SDK agent points its client at ``openai_base_url`` / ``anthropic_base_url`` (the session is in the
    path, so any key works; ``api_key`` is the session's own key for clients that must send one); a CLI
    agent gets ``env`` as its environment (OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL,
    ANTHROPIC_API_KEY)."""

    session_id: str
    uid: str
    sample_index: int
    task: Dict[str, Any]
    openai_base_url: str
    anthropic_base_url: str
    api_key: str
    attempt: int = 0

    @property
    def env(self) -> Dict[str, str]:
        return {
            "OPENAI_BASE_URL": self.openai_base_url,
            "OPENAI_API_KEY": self.api_key,
            "ANTHROPIC_BASE_URL": self.anthropic_base_url,
            "ANTHROPIC_API_KEY": self.api_key,
        }


@dataclass
class SessionResult:
    """One session of a group: how it ended and what it was worth.

    ``status`` is the session's end (ok, failed, aborted); ``reason`` says why when it is not ok
    (``raised``, ``timeout``, ``oversampled``, ``driver_restarted``); ``rows`` how many rows it has in
    the group's table (0 for a session that made no model call, ``no_calls``)."""

    session_id: str
    sample_index: int
    attempt: int
    status: str
    reward: Optional[float] = None
    info: Optional[Dict[str, Any]] = None
    reason: Optional[str] = None
    error: Optional[str] = None
    calls: int = 0
    sampled_tokens: int = 0
    seconds: float = 0.0
    rows: int = 0
    kept: bool = True  # in the group (False: resampled, or oversampled away: never trained)

    def to_json(self) -> Dict[str, Any]:
        return dict(self.__dict__)

    @staticmethod
    def from_json(d: Dict[str, Any]) -> "SessionResult":
        return SessionResult(**d)


@dataclass
class Group:
    """One task's group: its sessions and exactly their rows (``table``, in the output's columns).

    ``dropped``: the failure policy dropped the group (``table`` then has no rows, ``sessions`` says why).
    ``incomplete``: a kept session has no row (it made no model call, or its rows never came): GRPO's
    group is then smaller than n."""

    uid: str
    task: Dict[str, Any]
    table: pa.Table
    sessions: List[SessionResult] = field(default_factory=list)
    dropped: bool = False
    incomplete: bool = False
    stale_rows: int = 0

    @property
    def kept_sessions(self) -> List[SessionResult]:
        return [s for s in self.sessions if s.kept]

    @property
    def rewards(self) -> List[Optional[float]]:
        return [s.reward for s in self.kept_sessions]


class Groups(list):
    """The groups of one step, one per task in task order, with the step's figures in ``stats`` (keys in
    the ``rollout/...`` form trainers' loggers take: wandb, tensorboard)."""

    def __init__(self, groups: List[Group], stats: Dict[str, float]):
        super().__init__(groups)
        self.stats = stats

    def kept(self) -> List[Group]:
        """The groups the failure policy kept."""
        return [g for g in self if not g.dropped]
