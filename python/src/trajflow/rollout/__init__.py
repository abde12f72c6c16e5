"""Rollouts from the trainer's side: n agent sessions per task through trajflow's gateway, each group
handed back whole with exactly its sessions' rows, durably (docs/rollouts.md)."""
from .agents import AgentError, CliResult, cli_agent
from .driver import RolloutError, Rollouts
from .types import ABORTED, FAILED, OK, AgentContext, Group, Groups, SessionResult

__all__ = [
    "ABORTED",
    "FAILED",
    "OK",
    "AgentContext",
    "AgentError",
    "CliResult",
    "Group",
    "Groups",
    "RolloutError",
    "Rollouts",
    "SessionResult",
    "cli_agent",
]
