"""Read trajflow's trajectory files in a trainer (docs/trainers.md)."""

from .collective import torch_broadcast
from .files import DataFile, list_data_files
from .cursor import Cursor, CursorStore
from .reader import Batch, TrajectoryReader
from .tensors import grpo_advantages, to_packed, to_torch, to_verl

__all__ = [
    "Batch",
    "Cursor",
    "CursorStore",
    "DataFile",
    "TrajectoryReader",
    "grpo_advantages",
    "list_data_files",
    "to_packed",
    "to_torch",
    "to_verl",
    "torch_broadcast",
]
