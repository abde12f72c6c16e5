"""A trainer loop as docs/trainers.md shows it, for the kill-and-resume tests.

    python trainer_loop.py OUT CKPT_DIR [--follow] [--idle S] [--checkpoint-every K] [--kill-at POINT:SEQ]

Its "model" is the list of row keys it trained on, kept in memory and saved with the reader's state_dict()
in one checkpoint file every K steps (and at the end), as trainers checkpoint: whatever it trained after
its last checkpoint dies with the process. Every delivered batch is logged (seq and keys) before training.

--kill-at kills the process itself with SIGKILL at a named point of the step whose batch has that seq:
``delivered`` (logged, not trained), ``committed`` (reader.commit done, before any checkpoint of that
step) or ``checkpointed`` (that step's checkpoint written). Killing at a named point, not at a random
time, makes the test's outcome the same on an idle host and a loaded one.
"""
import argparse
import json
import os
import signal

from trajflow import TrajectoryReader

POINTS = ("delivered", "committed", "checkpointed")


def save_atomically(path, doc):
    temp = f"{path}.tmp"
    with open(temp, "w") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def load_checkpoint(path):
    """The checkpoint, or None before the first one (step 0)."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def kill_point(spec):
    point, _, seq = spec.partition(":")
    if point not in POINTS or not seq.isdigit():
        raise argparse.ArgumentTypeError(f"--kill-at takes POINT:SEQ with POINT one of {', '.join(POINTS)}")
    return point, int(seq)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("ckpt")
    ap.add_argument("--follow", action="store_true")
    ap.add_argument("--idle", type=float, default=None)
    ap.add_argument("--checkpoint-every", type=int, default=3)
    ap.add_argument("--kill-at", type=kill_point, default=None)
    args = ap.parse_args()
    os.makedirs(args.ckpt, exist_ok=True)
    model_path = os.path.join(args.ckpt, "model.json")

    def maybe_die(point, seq):
        if args.kill_at == (point, seq):
            os.kill(os.getpid(), signal.SIGKILL)

    # docs/trainers.md's loop: the checkpoint decides where reading resumes; none (step 0) needs no `if`.
    checkpoint = load_checkpoint(model_path) or {}
    trained = list(checkpoint.get("trained", []))
    reader = TrajectoryReader(args.out, cursor=os.path.join(args.ckpt, "cursor.json"), batch_units=2, unit="group")
    reader.load_state_dict(checkpoint.get("data"))
    log = open(os.path.join(args.ckpt, "deliveries.log"), "a")
    for batch in reader.batches(follow=args.follow, poll_interval=0.05, idle_timeout=args.idle):
        log.write(json.dumps([batch.seq, batch.keys]) + "\n")
        log.flush()
        maybe_die("delivered", batch.seq)
        trained.extend(batch.keys)  # the forward and backward pass, and the optimizer step
        reader.commit(batch)
        maybe_die("committed", batch.seq)
        if batch.seq % args.checkpoint_every == 0:
            save_atomically(model_path, {"trained": trained, "data": reader.state_dict()})
            maybe_die("checkpointed", batch.seq)
    save_atomically(model_path, {"trained": trained, "data": reader.state_dict()})


if __name__ == "__main__":
    main()
