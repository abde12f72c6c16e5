"""Read trajflow's trajectory files in a trainer (docs/trainers.md); emit gateway events from a gateway of
your own (trajflow.emit, docs/gateways.md)."""

from .collective import torch_broadcast
from .files import DataFile, list_data_files
from .cursor import Cursor, CursorStore
from .emit import DeliveryError, Emitter, EventBuilder, Session
from .reader import Batch, TrajectoryReader
from .tensors import grpo_advantages, to_packed, to_torch, to_verl

__all__ = [
    "Batch",
    "Cursor",
    "CursorStore",
    "DataFile",
    "DeliveryError",
    "Emitter",
    "EventBuilder",
    "Session",
    "TrajectoryReader",
    "grpo_advantages",
    "list_data_files",
    "to_packed",
    "to_torch",
    "to_verl",
    "torch_broadcast",
]
