"""Which files of an output directory are data, and in which order they are read.

trajflow commits a file by renaming it into place, so a listed name is always a complete file; in-flight
temporaries start with ``.`` and are skipped, as are names starting with ``_``. Data files are
``*.parquet`` and ``*.arrow`` in the root and in hive partition directories (``key=value/``); any other
directory (``_dead-letter/``, or one named otherwise) is never read, so dead letters never reach a trainer as data.

The order is deterministic: files written from Kafka (``<topic>-<partition>-<first>-<last>``) by topic,
partition and offsets; replay files (``part-NNNNN``) by cut number; partition directories of one cut
after each other.

Files belong to *lanes*: a directory and an input range (a Kafka partition, or a replay's cuts), each file
with a position in its lane (its first offset, or its cut number). A file records in
``trajflow.low_water`` the lowest position any file of its lane committed after it can have, so a reader
that consumed it can stop listing, and remembering, everything below (cursor.py's high-water marks).
On S3 the listing of a lane then starts after its mark (``StartAfter``) instead of at the bucket's first
file.
"""
from __future__ import annotations

import os
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import pyarrow.fs as pafs

_KAFKA = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)-(?P<first>\d{20})-(?P<last>\d{20})$")
_PART = re.compile(r"^part-(?P<cut>\d+)$")
DATA_SUFFIXES = (".parquet", ".arrow")


@dataclass(frozen=True)
class DataFile:
    """A committed data file: its path relative to the root, and its format."""

    path: str
    format: str  # "parquet" or "arrow"

    @property
    def sort_key(self) -> Tuple:
        parts = self.path.split("/")
        name = parts[-1].rsplit(".", 1)[0]
        directory = "/".join(parts[:-1])
        m = _KAFKA.match(name)
        if m is not None:
            return (0, m["topic"], int(m["partition"]), int(m["first"]), int(m["last"]), directory)
        m = _PART.match(name)
        if m is not None:
            return (1, "", int(m["cut"]), 0, 0, directory)
        return (2, name, 0, 0, 0, directory)


def lane_of(path: str) -> Optional[Tuple[str, int]]:
    """The lane of a data file (``directory|range``) and its position in it; None for other names."""
    parts = path.split("/")
    name = parts[-1].rsplit(".", 1)[0]
    directory = "/".join(parts[:-1])
    m = _KAFKA.match(name)
    if m is not None:
        return f"{directory}|{m['topic']}-{m['partition']}", int(m["first"])
    m = _PART.match(name)
    if m is not None:
        return f"{directory}|part", int(m["cut"])
    return None


def _hidden(name: str) -> bool:
    return name.startswith(".") or name.startswith("_")


def list_data_files(root: str, filesystem: Optional[pafs.FileSystem] = None) -> List[DataFile]:
    """Committed data files under ``root`` in reading order (an absent root has none yet)."""
    fs, base = _resolve(root, filesystem)
    out: List[DataFile] = []
    _walk(fs, base, "", out)
    out.sort(key=lambda f: f.sort_key)
    return out


def _walk(fs: pafs.FileSystem, base: str, rel: str, out: List[DataFile]) -> None:
    where = f"{base}/{rel}" if rel else base
    try:
        infos = fs.get_file_info(pafs.FileSelector(where, allow_not_found=True))
    except FileNotFoundError:
        return
    for info in infos:
        name = info.base_name
        if _hidden(name):
            continue
        child = f"{rel}/{name}" if rel else name
        if info.type == pafs.FileType.Directory:
            # Only hive partitions hold data; dead-letter directories and anything else are not read.
            if "=" in name:
                _walk(fs, base, child, out)
        elif info.type == pafs.FileType.File and name.endswith(DATA_SUFFIXES):
            out.append(DataFile(child, "parquet" if name.endswith(".parquet") else "arrow"))


def _resolve(root: str, filesystem: Optional[pafs.FileSystem]) -> Tuple[pafs.FileSystem, str]:
    if filesystem is not None:
        return filesystem, root.rstrip("/")
    fs, path = pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(), root)
    if isinstance(fs, pafs.LocalFileSystem):
        import os

        path = os.path.abspath(path)
    return fs, path.rstrip("/")


class Lister:
    """Lists an output's data files past per-lane marks: everything below a lane's mark is known read.

    On a local (or any pyarrow) filesystem every listing walks the directories and drops what is below
    the marks. On S3 (with boto3 installed) a lane already known is listed from its mark on
    (``ListObjectsV2`` with ``StartAfter``: Kafka lanes' names sort by offset), and the whole prefix is
    walked only to discover new lanes and partition directories: at the first listing and then every
    ``rediscover_s`` seconds. A lane discovered late is read from its start, so nothing is missed, only
    seen later.
    """

    def __init__(self, root: str, filesystem: Optional[pafs.FileSystem], rediscover_s: float = 30.0):
        self.fs, self.base = _resolve(root, filesystem)
        self.rediscover_s = rediscover_s
        self._known: Dict[str, str] = {}  # lane -> its listing prefix (relative to base)
        self._discovered_at: Optional[float] = None
        self._s3 = None
        if isinstance(self.fs, pafs.S3FileSystem):
            try:
                import boto3  # noqa: F401

                self._s3 = _S3Listing(self.base)
            except ImportError:
                warnings.warn(
                    "boto3 is not installed: every poll lists the whole S3 prefix (pip install 'trajflow[s3]')",
                    stacklevel=3,
                )

    def list(self, marks: Dict[str, int]) -> List[DataFile]:
        now = time.monotonic()
        if self._s3 is None or self._discovered_at is None or now - self._discovered_at >= self.rediscover_s:
            files = list_data_files(self.base, self.fs)
            self._discovered_at = now
            for f in files:
                lane = lane_of(f.path)
                if lane is not None:
                    self._known[lane[0]] = _lane_prefix(f.path)
        else:
            files = []
            for lane, prefix in self._known.items():
                mark = marks.get(lane, 0)
                start = f"{prefix}{mark:020d}" if not lane.endswith("|part") else None
                for path in self._s3.list(prefix, start):
                    name = path.rsplit("/", 1)[-1]
                    if name.endswith(DATA_SUFFIXES) and not _hidden(name):
                        files.append(DataFile(path, "parquet" if name.endswith(".parquet") else "arrow"))
            files.sort(key=lambda f: f.sort_key)
        out = []
        for f in files:
            lane = lane_of(f.path)
            if lane is None or lane[1] >= marks.get(lane[0], 0):
                out.append(f)
        return out


def _lane_prefix(path: str) -> str:
    """The listing prefix of a file's lane: its directory and range, up to the offsets or cut number."""
    directory, _, name = path.rpartition("/")
    stem = name.rsplit(".", 1)[0]
    m = _KAFKA.match(stem)
    lane = f"{m['topic']}-{m['partition']}-" if m is not None else "part-"
    return f"{directory}/{lane}" if directory else lane


class _S3Listing:
    """Prefix listings through boto3 (pyarrow's S3 filesystem cannot start a listing after a key)."""

    def __init__(self, base: str):
        import boto3

        bucket, _, prefix = base.partition("/")
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        # Credentials, region and endpoint (AWS_ENDPOINT_URL_S3) from the standard chain, as pyarrow's.
        self.client = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL_S3") or None)

    def list(self, rel_prefix: str, start_after_rel: Optional[str]) -> List[str]:
        kwargs: Dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + rel_prefix}
        if start_after_rel is not None:
            kwargs["StartAfter"] = self.prefix + start_after_rel
        out = []
        for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
            for o in page.get("Contents", []):
                out.append(o["Key"][len(self.prefix):])
        return out
