"""One rank of an SPMD trainer loop (torchrun-style, gloo on CPU), for the multi-rank tests.

    python spmd_loop.py OUT CKPT_DIR RANK WORLD_SIZE INIT_FILE [--follow] [--idle S] [--batch-units N]
        [--micro-tokens N] [--step S] [--checkpoint-every K] [--pause-at POINT:SEQ]

Every step does what a data-parallel trainer does between reading and committing: a real all_reduce
(of the step's token count, standing in for the gradients). The "model" is the list of row keys trained
on, gathered to rank 0, kept in memory and saved there with the reader's state_dict() in one checkpoint
file every K steps and at the end: what it trained after its last checkpoint dies with the job.
Each rank logs every batch it receives (seq, keys, tokens, the all-reduced sum, the balance figures) to
CKPT_DIR/rank-<world>-<rank>.log before training on it. With --pause-at POINT:SEQ, rank 0 stops at that
named point of step SEQ (``delivered``: logged, not trained; ``committed``: committed, before that step's
checkpoint), writes CKPT_DIR/paused, and waits until it is killed: a test's kill then lands at that point
for sure, on a slow machine too.
"""
import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist

from trainer_loop import save_atomically  # this script's directory is on sys.path
from trajflow import TrajectoryReader


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("ckpt")
    ap.add_argument("rank", type=int)
    ap.add_argument("world", type=int)
    ap.add_argument("init_file")
    ap.add_argument("--follow", action="store_true")
    ap.add_argument("--idle", type=float, default=None)
    ap.add_argument("--batch-units", type=int, default=8)
    ap.add_argument("--micro-tokens", type=int, default=None)
    ap.add_argument("--step", type=float, default=0.0)
    ap.add_argument("--checkpoint-every", type=int, default=1)
    ap.add_argument("--pause-at", default=None)
    args = ap.parse_args()
    # A rank that never reaches a collective fails the others after 30 s instead of hanging the test.
    dist.init_process_group(
        "gloo", init_method=f"file://{args.init_file}", rank=args.rank, world_size=args.world,
        timeout=datetime.timedelta(seconds=30),
    )
    model_path = os.path.join(args.ckpt, "model.json")
    checkpoint = {}
    if os.path.exists(model_path):  # every rank, the same checkpoint
        with open(model_path) as f:
            checkpoint = json.load(f)
    trained = list(checkpoint.get("trained", []))
    pause = None
    if args.pause_at is not None:
        point, seq = args.pause_at.split(":")
        pause = (point, int(seq))

    def maybe_pause(point, seq):
        if args.rank == 0 and pause == (point, seq):
            with open(os.path.join(args.ckpt, "paused"), "w") as f:
                f.write(args.pause_at)
            while True:  # killed here
                time.sleep(1)
    reader = TrajectoryReader(
        args.out, cursor=os.path.join(args.ckpt, "cursor.json"), batch_units=args.batch_units, unit="group",
        rank=args.rank, world_size=args.world, max_tokens_per_micro_batch=args.micro_tokens,
    )
    reader.load_state_dict(checkpoint.get("data"))  # None before the first checkpoint: from the start
    with open(os.path.join(args.ckpt, f"ready-{args.world}-{args.rank}"), "w"):
        pass
    log = open(os.path.join(args.ckpt, f"rank-{args.world}-{args.rank}.log"), "a")
    seq = 0
    for batch in reader.batches(follow=args.follow, poll_interval=0.05, idle_timeout=args.idle):
        tokens = torch.tensor([batch.stats["tokens"]], dtype=torch.int64)
        dist.all_reduce(tokens)  # the gradient all-reduce: every rank must reach it at every step
        entry = {
            "seq": batch.seq, "keys": batch.keys, "tokens": batch.stats["tokens"], "reduced": int(tokens.item()),
            "global_tokens": batch.stats["global_tokens"], "rank_tokens": batch.rank_tokens, "bound": batch.bound,
            "imbalance": batch.imbalance, "waited_s": batch.waited_s,
        }
        if batch.micro_batches is not None:
            entry["micro"] = [m.column("key").to_pylist() for m in batch.micro_batches]
        log.write(json.dumps(entry) + "\n")
        log.flush()
        maybe_pause("delivered", batch.seq)
        time.sleep(args.step)  # the forward and backward pass
        gathered = [None] * args.world
        dist.all_gather_object(gathered, batch.keys)
        reader.commit(batch)
        seq = batch.seq
        if args.rank == 0:
            trained.extend(k for keys in gathered for k in keys)
        maybe_pause("committed", batch.seq)
        if args.rank == 0 and batch.seq % args.checkpoint_every == 0:
            save_atomically(model_path, {"trained": trained, "steps": seq, "data": reader.state_dict()})
    if args.rank == 0:
        save_atomically(model_path, {"trained": trained, "steps": seq, "data": reader.state_dict()})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
