"""The trainer's position in an output directory, and where it is kept.

A cursor says which files are fully consumed (per lane, a high-water mark and the few files read above
it), and how far into the file being read the trainer got. It
advances only when the trainer commits a batch (after its optimizer step): a crash before the commit
means the batch is delivered again, never skipped. Before a batch is handed out, its plan (which rows of
which files) is written next to the cursor as the *pending* batch, so a restarted trainer receives exactly
the same batch again, even if more files landed meanwhile.

Both are written atomically (a temporary name, then a rename), through any pyarrow filesystem.
"""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pyarrow.fs as pafs

VERSION = 2


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


class CursorStore:
    """A JSON document at ``path`` holding the committed cursor and the pending batch, replaced atomically."""

    def __init__(self, path: str, filesystem: Optional[pafs.FileSystem] = None):
        if filesystem is None:
            if "://" in path:
                filesystem, path = pafs.FileSystem.from_uri(path)
            else:
                filesystem, path = pafs.LocalFileSystem(), os.path.abspath(path)
        self.fs = filesystem
        self.path = path

    def load(self) -> Tuple[Cursor, Optional[Pending]]:
        info = self.fs.get_file_info(self.path)
        if info.type == pafs.FileType.NotFound:
            return Cursor(), None
        with self.fs.open_input_stream(self.path) as f:
            doc = json.loads(f.read().decode("utf-8"))
        if doc.get("version") not in (1, VERSION):
            raise ValueError(f"{self.path}: cursor version {doc.get('version')} is not 1 or {VERSION}")
        pending = doc.get("pending")
        return Cursor.from_json(doc["cursor"]), None if pending is None else Pending.from_json(pending)

    def save(self, cursor: Cursor, pending: Optional[Pending]) -> None:
        doc = {"version": VERSION, "cursor": cursor.to_json(), "pending": None if pending is None else pending.to_json()}
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
