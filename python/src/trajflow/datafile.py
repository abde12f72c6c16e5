"""Reading one committed data file (Parquet or Arrow IPC) and cutting it into the units a reader never splits."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

Units = List[Tuple[int, int, str]]  # (first row, end row, uid) of each unit of a file
# A loaded file: its table, its units, its low water, and each row's tokens (prompt + response).
Loaded = Tuple[pa.Table, Units, Optional[int], List[int]]


def read_data_file(fs: pafs.FileSystem, path: str, columns: Optional[List[str]] = None) -> Tuple[pa.Table, Dict[bytes, bytes]]:
    """The file's table (only ``columns`` when given) and trajflow's key-value metadata."""
    with fs.open_input_file(path) as source:
        if path.endswith(".parquet"):
            parquet = pq.ParquetFile(source)
            # trajflow's keys are in the footer's key-value metadata (not the embedded Arrow schema).
            return parquet.read(columns=columns), parquet.metadata.metadata or {}
        arrow = ipc.open_file(source)
        table = arrow.read_all()
        return (table if columns is None else table.select(columns)), arrow.schema.metadata or {}


def load_units(table: pa.Table, meta: Dict[bytes, bytes], unit: str) -> Loaded:
    """The file's units (``row``, ``session`` or ``group``: runs of rows with one uid, and one session),
    its low water (files.py) and each row's tokens."""
    uids = table.column("uid").to_pylist()
    sessions = table.column("session_id").to_pylist() if unit == "session" else None
    units: Units = []
    start = 0
    for i in range(1, len(uids) + 1):
        if (
            i == len(uids)
            or unit == "row"
            or uids[i] != uids[start]
            or (sessions is not None and sessions[i] != sessions[start])
        ):
            units.append((start, i, uids[start]))
            start = i
    tokens = pc.add(
        pc.list_value_length(table.column("prompt_ids")), pc.list_value_length(table.column("response_ids"))
    ).to_pylist()
    low = meta.get(b"trajflow.low_water")
    return table, units, None if low is None else int(low), tokens
