"""Load trajflow output the way a verl-style GRPO trainer does.

    python examples/trainer/load_batches.py out/            # prints a JSON summary of the batch

Builds the tensors verl expects (left-padded `prompts`, right-padded `responses`, `response_mask`,
`rollout_log_probs`, `rm_scores` with the reward on the last trained token) and GRPO advantages over the
sessions of each uid. Rows with `sample_mask` 0 (group placeholders) count towards the group size but are
never trained; rows without logprobs are dropped from importance-ratio training.
"""
import json
import sys
import urllib.parse
from collections import defaultdict

import numpy as np
import pyarrow.dataset as ds

PAD = 0


def load(path: str):
    # exclude_invalid_files: a dead-letter directory chosen under the output root holds JSON lines.
    table = ds.dataset(path, format="parquet", exclude_invalid_files=True).to_table()
    rows = sorted(table.to_pylist(), key=lambda r: r["key"])

    # Keys split back into (uid, session_id, index); session ids had "_" escaped as %5F in the key.
    for r in rows:
        uid, sid, index = r["key"].rsplit("_", 2)
        assert (uid, urllib.parse.unquote(sid), int(index)) == (r["uid"], r["session_id"], r["index"])

    # GRPO: the advantage of a session is its reward normalised within its uid's group (one reward per
    # session, broadcast to its rows). Placeholders (sample_mask 0) have no reward and are left out.
    rewards = defaultdict(dict)
    for r in rows:
        if r["sample_mask"] == 1 and r["reward"] is not None:
            rewards[r["uid"]][r["session_id"]] = r["reward"]
    advantage = {}
    for uid, by_session in rewards.items():
        values = np.array(list(by_session.values()), dtype=np.float32)
        std = values.std() if len(values) > 1 else 1.0
        for sid, v in by_session.items():
            advantage[(uid, sid)] = float((v - values.mean()) / (std + 1e-6))

    train = [r for r in rows if r["sample_mask"] == 1 and r["rollout_log_probs"] is not None]
    n = len(train)
    max_prompt = max((len(r["prompt_ids"]) for r in train), default=0)
    max_response = max((len(r["response_ids"]) for r in train), default=0)
    prompts = np.full((n, max_prompt), PAD, dtype=np.int64)
    responses = np.full((n, max_response), PAD, dtype=np.int64)
    response_mask = np.zeros((n, max_response), dtype=np.int64)
    log_probs = np.zeros((n, max_response), dtype=np.float32)
    rm_scores = np.zeros((n, max_response), dtype=np.float32)
    advantages = np.zeros((n, max_response), dtype=np.float32)
    for i, r in enumerate(train):
        p, resp = r["prompt_ids"], r["response_ids"]
        prompts[i, max_prompt - len(p):] = p  # left padding, as verl does
        responses[i, : len(resp)] = resp
        mask = np.asarray(r["response_mask"], dtype=np.int64)
        response_mask[i, : len(resp)] = mask
        log_probs[i, : len(resp)] = r["rollout_log_probs"]
        trained = np.nonzero(mask)[0]
        if len(trained) > 0 and r["reward"] is not None:
            rm_scores[i, trained[-1]] = r["reward"]  # the reward sits on the last trained token
        advantages[i, : len(resp)] = mask * advantage.get((r["uid"], r["session_id"]), 0.0)

    return {
        "rows": len(rows),
        "trained_rows": n,
        "placeholders": sum(1 for r in rows if r["sample_mask"] == 0),
        "groups": len({r["uid"] for r in rows}),
        "prompts_shape": list(prompts.shape),
        "responses_shape": list(responses.shape),
        "trained_tokens": int(response_mask.sum()),
        "rm_scores_sum": round(float(rm_scores.sum()), 6),
        "logprob_at_mask0": float(np.abs(log_probs[response_mask == 0]).sum()),
    }


if __name__ == "__main__":
    print(json.dumps(load(sys.argv[1])))
