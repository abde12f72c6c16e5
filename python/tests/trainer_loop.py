"""A trainer loop as a trainer would write it, for the kill-and-resume tests.

    python trainer_loop.py OUT CKPT_DIR [--follow] [--idle S] [--step S]

Its "model" is the list of row keys it trained on, saved with the reader's cursor in one checkpoint file
after every optimizer step. Every delivered batch is also logged (seq and keys) before training.
"""
import argparse
import json
import os
import time

from trajflow import TrajectoryReader


def save_atomically(path, doc):
    temp = f"{path}.tmp"
    with open(temp, "w") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("ckpt")
    ap.add_argument("--follow", action="store_true")
    ap.add_argument("--idle", type=float, default=None)
    ap.add_argument("--step", type=float, default=0.05)
    args = ap.parse_args()
    os.makedirs(args.ckpt, exist_ok=True)
    model_path = os.path.join(args.ckpt, "model.json")
    model = {"trained": [], "cursor": None}
    if os.path.exists(model_path):
        with open(model_path) as f:
            model = json.load(f)
    reader = TrajectoryReader(args.out, cursor=os.path.join(args.ckpt, "cursor.json"), batch_units=2, unit="group")
    if model["cursor"] is not None:
        reader.load_state_dict(model["cursor"])
    log = open(os.path.join(args.ckpt, "deliveries.log"), "a")
    for batch in reader.batches(follow=args.follow, poll_interval=0.2, idle_timeout=args.idle):
        log.write(json.dumps([batch.seq, batch.keys]) + "\n")
        log.flush()
        time.sleep(args.step)  # the forward and backward pass
        model["trained"].extend(batch.keys)
        reader.commit(batch)
        model["cursor"] = reader.state_dict()
        save_atomically(model_path, model)


if __name__ == "__main__":
    main()
