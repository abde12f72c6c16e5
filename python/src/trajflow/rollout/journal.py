"""The step journal: what a driver killed mid-step needs to finish the same step without running a
finished session again.

One JSON file per step (``<journal_dir>/step-<step>.json``), replaced atomically after every change: the
run's id (so the restarted driver's new sessions get ids no earlier run used), the files that were in the
output when the step began (never read for its rows), and every session started, with its result once it
has ended. Just before a session's end is posted, the result it is about to end with is journaled too
(``ending``): a driver killed after the gateway recorded the end but before the journal took the result
resumes with that result (the end posted again, or the gateway's answer that it had ended so) instead of
cutting a session whose rows are in the output as ended. A session journaled as started with neither was
cut by the driver's death: the restarted driver ends it ``aborted`` (reason ``driver_restarted``) and runs
its sample again as a new attempt.
"""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .types import SessionResult

VERSION = 1


@dataclass
class SessionEntry:
    task_index: int
    sample_index: int
    attempt: int
    result: Optional[SessionResult] = None  # None: started, not ended (as far as the journal knows)
    # The result the driver was posting as the session's end (its calls not yet known); None once
    # ``result`` is set, or before the agent finished. Absent from journals written before it existed.
    ending: Optional[SessionResult] = None

    def to_json(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "task_index": self.task_index, "sample_index": self.sample_index, "attempt": self.attempt,
            "result": None if self.result is None else self.result.to_json(),
        }
        if self.ending is not None and self.result is None:
            d["ending"] = self.ending.to_json()
        return d

    @staticmethod
    def from_json(d: Dict[str, Any]) -> "SessionEntry":
        r, ending = d.get("result"), d.get("ending")
        return SessionEntry(
            d["task_index"], d["sample_index"], d["attempt"], None if r is None else SessionResult.from_json(r),
            None if ending is None else SessionResult.from_json(ending),
        )


@dataclass
class StepJournal:
    path: Optional[str]
    run_id: str
    uids: List[str]
    before: List[str] = field(default_factory=list)
    sessions: Dict[str, SessionEntry] = field(default_factory=dict)
    resumed: bool = False

    @staticmethod
    def open(journal_dir: Optional[str], step: Any, uids: List[str]) -> "StepJournal":
        """The step's journal: the one a killed driver left (``resumed``), else a new one (in memory only
        without ``journal_dir`` or ``step``)."""
        if journal_dir is None or step is None:
            return StepJournal(None, uuid.uuid4().hex[:10], uids)
        path = os.path.join(journal_dir, f"step-{step}.json")
        if os.path.exists(path):
            with open(path) as f:
                doc = json.load(f)
            if doc.get("version") != VERSION:
                raise ValueError(f"{path}: step journal version {doc.get('version')} is not {VERSION}")
            if doc["uids"] != uids:
                raise ValueError(
                    f"{path}: step {step} was begun with other tasks ({len(doc['uids'])} uids, first "
                    f"{doc['uids'][:3]}); run it with the same tasks, or use a new step"
                )
            sessions = {k: SessionEntry.from_json(v) for k, v in doc["sessions"].items()}
            return StepJournal(path, doc["run_id"], uids, doc["before"], sessions, resumed=True)
        os.makedirs(journal_dir, exist_ok=True)
        return StepJournal(path, uuid.uuid4().hex[:10], uids)

    def save(self) -> None:
        if self.path is None:
            return
        doc = {
            "version": VERSION, "run_id": self.run_id, "uids": self.uids, "before": self.before,
            "sessions": {k: v.to_json() for k, v in self.sessions.items()},
        }
        temp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        with open(temp, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, self.path)
