"""A step's progress while it runs, and its figures for the trainer's logger once it is done.

On a terminal: one live line (tqdm when it is installed, as trainers' users expect); elsewhere: a
structured log line (``trajflow.rollout``) every ``log_every_s`` seconds and one at the end. ``stats()``
gives the same figures under ``rollout/...`` keys, as verl and AReaL log their rollout metrics."""
from __future__ import annotations

import logging
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

from .types import ABORTED, FAILED, Group, SessionResult

log = logging.getLogger("trajflow.rollout")


class Progress:
    def __init__(self, groups: int, n: int, *, enabled: bool = True, step: Any = None, log_every_s: float = 10.0):
        self.groups, self.n, self.step = groups, n, step
        self.t0 = time.monotonic()
        self.counts: Dict[str, int] = {
            "groups_done": 0, "groups_dropped": 0, "groups_incomplete": 0, "sessions_started": 0,
            "sessions_done": 0, "sessions_failed": 0, "sessions_aborted": 0, "sessions_resampled": 0,
            "sessions_oversampled": 0, "sessions_without_rows": 0, "calls": 0, "sampled_tokens": 0, "rows": 0,
            "stale_rows": 0,
        }
        self.slowest_s = 0.0
        self.rows_wait_s: List[float] = []
        self.rewards: List[float] = []
        self.enabled = enabled
        self.log_every_s = log_every_s
        self._logged = self.t0
        self._bar = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=groups, desc=f"rollout step {step}" if step is not None else "rollout", unit="group")
            except ImportError:
                self._bar = None

    def count(self, name: str, by: int = 1) -> None:
        self.counts[name] += by
        self._show()

    def session_started(self) -> None:
        self.count("sessions_started")

    def session_done(self, r: SessionResult) -> None:
        c = self.counts
        c["sessions_done"] += 1
        c["calls"] += r.calls
        c["sampled_tokens"] += r.sampled_tokens
        if r.status == FAILED:
            c["sessions_failed"] += 1
        elif r.status == ABORTED:
            c["sessions_aborted"] += 1
        self.slowest_s = max(self.slowest_s, r.seconds)
        self._show()

    def group_done(self, g: Group, rows_wait_s: float) -> None:
        c = self.counts
        c["groups_done"] += 1
        c["groups_dropped"] += int(g.dropped)
        c["groups_incomplete"] += int(g.incomplete)
        c["rows"] += g.table.num_rows
        c["stale_rows"] += g.stale_rows
        c["sessions_without_rows"] += sum(1 for s in g.kept_sessions if s.rows == 0)
        self.rewards.extend(s.reward for s in g.kept_sessions if s.reward is not None)
        self.rows_wait_s.append(rows_wait_s)
        if self._bar is not None:
            self._bar.update(1)
        self._show()

    def _line(self) -> Dict[str, Any]:
        c = self.counts
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        return {
            "step": self.step, "groups": f"{c['groups_done']}/{self.groups}",
            "in_flight": c["sessions_started"] - c["sessions_done"], "failed": c["sessions_failed"],
            "aborted": c["sessions_aborted"], "calls": c["calls"],
            "tokens_per_s": round(c["sampled_tokens"] / elapsed, 1), "slowest_s": round(self.slowest_s, 2),
        }

    def _show(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            line = self._line()
            self._bar.set_postfix({k: v for k, v in line.items() if k not in ("step", "groups")}, refresh=False)
            return
        now = time.monotonic()
        if now - self._logged >= self.log_every_s:
            self._logged = now
            log.info("rollout progress %s", self._line(), extra={"rollout": self._line()})

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            log.info("rollout step done %s", self._line(), extra={"rollout": self._line()})

    def stats(self) -> Dict[str, float]:
        c = self.counts
        elapsed = time.monotonic() - self.t0
        waits = sorted(self.rows_wait_s)
        out: Dict[str, float] = {f"rollout/{k}": float(v) for k, v in c.items()}
        out.update({
            "rollout/groups": float(self.groups),
            "rollout/seconds": elapsed,
            "rollout/tokens_per_s": c["sampled_tokens"] / elapsed if elapsed > 0 else 0.0,
            "rollout/slowest_session_s": self.slowest_s,
            "rollout/rows_wait_p50_s": _quantile(waits, 0.5),
            "rollout/rows_wait_p99_s": _quantile(waits, 0.99),
            "rollout/rows_wait_max_s": waits[-1] if waits else 0.0,
            "rollout/reward_mean": statistics.fmean(self.rewards) if self.rewards else float("nan"),
        })
        return out


def _quantile(sorted_values: List[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]
