"""Which files of an output directory are data, and in which order they are read.

trajflow commits a file by renaming it into place, so a listed name is always a complete file; in-flight
temporaries start with ``.`` and are skipped, as are names starting with ``_``. Data files are
``*.parquet`` and ``*.arrow`` in the root and in hive partition directories (``key=value/``); any other
directory (``_dead-letter/``, or one named otherwise) is never read, so dead letters never reach a trainer as data.

The order is deterministic: files written from Kafka (``<topic>-<partition>-<first>-<last>``) by topic,
partition and offsets; replay files (``part-NNNNN``) by cut number; partition directories of one cut
after each other.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

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
