"""Finding exactly some sessions' rows in an output that other runs may be writing too.

A pipeline writes a session's rows in one file (sinks.md: rows handed over in one write land in one
file), committed by a rename, so a session's rows are all there once one of them is. The watcher lists
the output (a directory or an s3:// prefix, files.py), reads only the ``session_id`` column of each file
it has not seen, and the whole file only when it holds a session it waits for. Files present before a step
began cannot hold its sessions (their ids are new) and are never read.
"""
from __future__ import annotations

import threading
import time
from typing import Dict, Iterable, List, Optional, Set

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from ..datafile import read_data_file
from ..files import _resolve, list_data_files


class RowWatcher:
    """Rows of chosen sessions from an output directory or prefix, each file read at most once."""

    def __init__(self, output: str, filesystem: Optional[pafs.FileSystem] = None):
        self.output = output
        self.fs, self.base = _resolve(output, filesystem)
        self._seen: Set[str] = set()
        self._where: Dict[str, str] = {}  # session id -> the file holding its rows (of sessions waited for)
        self._found: Dict[str, pa.Table] = {}
        # Every session whose rows may land (registered before it starts): a file is read once, so its rows
        # are kept for any of them, not only for the group that happened to look.
        self._wanted: Set[str] = set()
        self._schema: Optional[pa.Schema] = None
        # Scans run in worker threads, several steps' at once: one at a time, each file read once.
        self._lock = threading.Lock()
        self._listed = float("-inf")  # when the output was last listed (time.monotonic)

    def files(self) -> List[str]:
        try:
            return [f.path for f in list_data_files(self.base, self.fs)]
        except FileNotFoundError:
            return []  # the pipeline has not written its first file yet

    def skip(self, paths: Iterable[str]) -> None:
        """Never reads these files (they were there before the sessions about to be waited for began).

        Only while no session is waited for: a file listed before a new group began may still hold the
        rows of a group already running (steps of astream, a trainer's agent loops side by side), and
        skipping it unread would lose them. Those files are then read once like any other."""
        with self._lock:
            if not self._wanted:
                self._seen.update(paths)

    def want(self, sessions: Iterable[str]) -> None:
        """Keeps the rows of these sessions from the files read from now on."""
        with self._lock:
            self._wanted.update(sessions)

    def scan(self, wanted: Set[str], fresh_s: float = 0.0) -> Dict[str, pa.Table]:
        """Looks at the files not seen yet (keeping the rows of every session wanted); answers the rows of
        the sessions of ``wanted`` found so far. A listing younger than ``fresh_s`` is not made again: the
        groups waiting at once share one listing per interval instead of one each."""
        with self._lock:
            if time.monotonic() - self._listed >= fresh_s:
                self._listed = time.monotonic()
                self._scan()
            return {sid: self._found[sid] for sid in wanted if sid in self._found}

    def schema(self) -> Optional[pa.Schema]:
        """The rows' schema, once a file with wanted rows was read."""
        return self._schema

    def forget(self, sessions: Iterable[str]) -> None:
        """Drops the rows kept for these sessions (their group has taken them)."""
        with self._lock:
            for sid in sessions:
                self._found.pop(sid, None)
                self._wanted.discard(sid)

    def _scan(self) -> None:
        for path in self.files():
            if path in self._seen:
                continue
            self._seen.add(path)
            ids = self._read(path, ["session_id"]).column("session_id")
            hits = set(pc.unique(ids).to_pylist()) & self._wanted
            if not hits:
                continue
            table = self._read(path, None)
            if self._schema is None:
                self._schema = table.schema
            for sid in hits:
                self._found[sid] = table.filter(pc.equal(table.column("session_id"), sid))

    def _read(self, path: str, columns: Optional[List[str]]) -> pa.Table:
        return read_data_file(self.fs, f"{self.base}/{path}", columns)[0]
