"""The trainer's position in an output directory, and the journal of the batches handed out after it.

A cursor says which files are fully consumed (per lane, a high-water mark and the few files read above
it), and how far into the file being read the trainer got. The trainer's own checkpoint holds the cursor
(``state_dict()``): it is the truth about what the model has trained on, since a trainer checkpoints every
N steps and a batch committed after its last checkpoint died with the process that trained it.

The cursor file beside it holds the *journal*: every batch handed out since a base cursor, as its plan
(which rows of which files) and the cursor after it, written before the batch is returned. A trainer
restarted from a checkpoint whose cursor is in the journal receives the batches after it again exactly,
the same rows in the same batches, even if more files landed meanwhile; from a cursor outside the journal
the batches are planned anew (every row still once, a batch's composition possibly different). The file
also keeps the last committed cursor, for a trainer without model state that resumes from the file
(``resume="file"``).

Written atomically (a temporary name, then a rename), through any pyarrow filesystem.
"""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pyarrow.fs as pafs

from .files import DataFile, lane_of

VERSION = 3


@dataclass(frozen=True)
class Cursor:
    """Where a trainer is: per lane a high-water mark (every file of the lane below it is read), the files
    read above the marks (each with its low water, files.py), the file being read and the next row in
    it, and batches committed so far.

    A mark moves up to a read file's low water once no file of the lane below it is left unread, and the
    names below a mark are forgotten: the cursor stays a few entries per lane however many files the
    output holds (version 1 kept every name ever read).
    """

    done: Mapping[str, Optional[int]] = field(default_factory=dict)
    current: Optional[str] = None
    row: int = 0
    batches: int = 0
    marks: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        return {
            "marks": dict(sorted(self.marks.items())),
            "done": dict(sorted(self.done.items())),
            "current": self.current,
            "row": self.row,
            "batches": self.batches,
        }

    @staticmethod
    def from_json(d: Dict[str, Any]) -> "Cursor":
        done = d.get("done", {})
        # Version 1 listed names without low waters.
        done = {name: None for name in done} if isinstance(done, list) else {k: v for k, v in done.items()}
        marks = {k: int(v) for k, v in d.get("marks", {}).items()}
        return Cursor(done, d.get("current"), int(d.get("row", 0)), int(d.get("batches", 0)), marks)


# One planned batch: (file, first row, end row) ranges delivered, and the cursor after it.
Plan = List[Tuple[str, int, int]]


@dataclass
class Pending:
    """A planned batch. A step-synchronized reader (``sync="step"``) plans the job's global batch: one
    plan entry per unit, with ``tokens`` holding each unit's rows' token counts, from which every rank
    derives its part (balance.py) without reading the others' files; restarted with another world size,
    the same global batch is split anew."""

    plan: Plan
    after: Cursor
    stats: Dict[str, int] = field(default_factory=dict)
    tokens: Optional[List[List[int]]] = None

    def to_json(self) -> Dict[str, Any]:
        doc = {"plan": [list(p) for p in self.plan], "after": self.after.to_json(), "stats": self.stats}
        if self.tokens is not None:
            doc["tokens"] = self.tokens
        return doc

    @staticmethod
    def from_json(d: Dict[str, Any]) -> "Pending":
        tokens = d.get("tokens")
        return Pending(
            [(p[0], int(p[1]), int(p[2])) for p in d["plan"]],
            Cursor.from_json(d["after"]),
            d.get("stats", {}),
            None if tokens is None else [[int(t) for t in unit] for unit in tokens],
        )


@dataclass
class Journal:
    """The batches handed out after ``base``, oldest first: ``batches[i]`` was planned from the cursor
    after ``batches[i - 1]`` (``base`` for the first), and ``batches[i].after.batches`` is its seq."""

    base: Cursor = field(default_factory=Cursor)
    batches: List[Pending] = field(default_factory=list)

    def since(self, cursor: Cursor) -> Optional[List[Pending]]:
        """The journal's batches after ``cursor``, oldest first; None when ``cursor`` is not in the journal
        (neither its base nor a batch's cursor after)."""
        if cursor == self.base:
            return list(self.batches)
        for i, p in enumerate(self.batches):
            if p.after == cursor:
                return self.batches[i + 1 :]
        return None

    def drop_through(self, seq: int) -> None:
        """Forgets the batches up to seq ``seq``: the base moves to the cursor after the last one dropped."""
        while self.batches and self.batches[0].after.batches <= seq:
            self.base = self.batches.pop(0).after

    def to_json(self) -> Dict[str, Any]:
        return {"base": self.base.to_json(), "batches": [p.to_json() for p in self.batches]}

    @staticmethod
    def from_json(d: Dict[str, Any]) -> "Journal":
        return Journal(Cursor.from_json(d["base"]), [Pending.from_json(p) for p in d.get("batches", [])])


class CursorStore:
    """A JSON document at ``path`` holding the last committed cursor and the journal, replaced atomically.

    Versions 1 and 2 (a committed cursor and one pending batch) are read as a journal based at that cursor
    holding that batch."""

    def __init__(self, path: str, filesystem: Optional[pafs.FileSystem] = None):
        if filesystem is None:
            if "://" in path:
                filesystem, path = pafs.FileSystem.from_uri(path)
            else:
                filesystem, path = pafs.LocalFileSystem(), os.path.abspath(path)
        self.fs = filesystem
        self.path = path

    def load(self) -> Tuple[Cursor, Journal]:
        """The committed cursor and the journal (both empty when the file does not exist yet)."""
        info = self.fs.get_file_info(self.path)
        if info.type == pafs.FileType.NotFound:
            return Cursor(), Journal()
        with self.fs.open_input_stream(self.path) as f:
            doc = json.loads(f.read().decode("utf-8"))
        version = doc.get("version")
        if version not in (1, 2, VERSION):
            raise ValueError(f"{self.path}: cursor version {version} is not 1, 2 or {VERSION}")
        committed = Cursor.from_json(doc["cursor"])
        if version == VERSION:
            return committed, Journal.from_json(doc["journal"])
        pending = doc.get("pending")
        return committed, Journal(committed, [] if pending is None else [Pending.from_json(pending)])

    def save(self, cursor: Cursor, journal: Journal) -> None:
        doc = {"version": VERSION, "cursor": cursor.to_json(), "journal": journal.to_json()}
        data = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        parent = self.path.rsplit("/", 1)[0] if "/" in self.path else ""
        if parent:
            self.fs.create_dir(parent, recursive=True)
        temp = f"{parent}/.{self.path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex}.tmp" if parent else f".cursor.{uuid.uuid4().hex}.tmp"
        if isinstance(self.fs, pafs.LocalFileSystem):
            # Durable before the rename, and the rename durable too: a power loss keeps one of the two.
            with open(temp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, self.path)
            fd = os.open(parent or ".", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            with self.fs.open_output_stream(temp) as f:
                f.write(data)
            self.fs.move(temp, self.path)


# --- the marks: what a listing shows below them is read ----------------------------------------------


def raise_marks(listed: List[DataFile], done: Dict[str, Optional[int]], marks: Dict[str, int]) -> None:
    """Moves lanes' marks up past what is read, and forgets the names below them.

    A file read in an earlier round, with low water ``w``: every file of its lane positioned below ``w``
    was committed before it (files.py), so this listing, made after that file was seen, shows them all.
    Below both ``w`` and the lowest unread file of the lane listed now, everything is read: the mark can
    move there.
    """
    unread: Dict[str, int] = {}
    for f in listed:
        lane = lane_of(f.path)
        if lane is not None and f.path not in done:
            unread[lane[0]] = min(unread.get(lane[0], lane[1]), lane[1])
    for name, low in done.items():
        lane = lane_of(name)
        if low is None or lane is None:
            continue
        candidate = min(low, unread.get(lane[0], low))
        if candidate > marks.get(lane[0], 0):
            marks[lane[0]] = candidate
    for name in [n for n in done if below_mark(n, marks)]:
        del done[name]


def below_mark(name: str, marks: Dict[str, int]) -> bool:
    lane = lane_of(name)
    return lane is not None and lane[1] < marks.get(lane[0], 0)
