"""Trainer adapters: the rollout driver's groups in a trainer's own types, through the trainer's own plug-in
points (docs/trainers.md, "Trainer adapters").

- ``trajflow.integrations.verl``: an agent loop registered as ``trajflow`` (``AgentLoopOutput`` per
  session) and a v1 rollout manager for ``agent_loop_manager_class`` (every row into TransferQueue);
- ``trajflow.integrations.areal``: a ``RolloutWorkflow`` whose episode is one GRPO group, in AReaL's tensors;
- ``trajflow.integrations.slime``: ``generate_rollout`` for ``--rollout-function-path`` (``list[list[Sample]]``).

Each module imports its trainer only when a trainer type is needed; the converters (``agent_loop_output``,
``episode_tensors``, ``samples``) take a group or a row as the driver or the reader gives them. Nothing is
retokenized, and no logprob, mask or version is invented: where the rows have none, the trainer's type
says so (NaN logprobs, -1 versions, a null reward) and the step's figures count it.
"""
from .common import AdapterConfig, StepStats, final_rows, group_rows, session_rows

__all__ = ["AdapterConfig", "StepStats", "final_rows", "group_rows", "session_rows"]
