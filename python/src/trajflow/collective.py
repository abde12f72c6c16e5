"""How the ranks of a step-synchronized reader agree: one broadcast from rank 0.

A *collective* here is a callable ``broadcast(obj) -> obj``: rank 0 passes a picklable object and gets it
back, every other rank passes ``None`` and gets rank 0's object. Every rank calls it the same number of
times, in the same order (the reader makes sure of that: one call per step, plus one per
``sync_interval`` while rank 0 waits for data).

``torch_broadcast()`` builds one from ``torch.distributed``. Give it a gloo group
(``dist.new_group(backend="gloo")``) in a job whose default group is NCCL: the messages are a few KB of
Python objects, which NCCL would first copy to the GPU (and needs ``torch.cuda.set_device`` for).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

Broadcast = Callable[[Any], Any]


def torch_broadcast(group: Optional[Any] = None) -> Broadcast:
    """A broadcast from the group's rank 0 over ``torch.distributed`` (already initialised)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call init_process_group first, or pass collective=")
    # broadcast_object_list names the source by its global rank.
    src = 0 if group is None else dist.get_global_rank(group, 0)

    def broadcast(obj: Any) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=src, group=group)
        return box[0]

    return broadcast


def default_broadcast(rank: int, world_size: int) -> Broadcast:
    """torch.distributed's default group when it is initialised with this reader's rank and world size."""
    try:
        import torch.distributed as dist
    except ImportError:
        dist = None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        raise ValueError(
            "sync='step' with world_size > 1 needs the ranks to agree on each step: initialise torch.distributed, "
            "or pass collective= (a broadcast from rank 0, trajflow.collective), or choose sync='uid'"
        )
    if dist.get_world_size() != world_size or dist.get_rank() != rank:
        raise ValueError(
            f"rank {rank} of {world_size} is not torch.distributed's rank {dist.get_rank()} of {dist.get_world_size()}: "
            "pass collective=torch_broadcast(group) for your data-parallel group"
        )
    return torch_broadcast()
