"""Reads a trajflow output directory with independent readers (pyarrow's dataset API and, for Parquet,
DuckDB) and prints what they saw as JSON, for the Node tests to compare against trajflow's own rows.

usage: read_output.py <dir> [--format parquet|ipc] [--hive]
"""
import argparse
import json

import duckdb
import pyarrow.dataset as ds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--format", default="parquet")
    parser.add_argument("--hive", action="store_true")
    args = parser.parse_args()

    dataset = ds.dataset(args.path, format=args.format, partitioning="hive" if args.hive else None)
    table = dataset.to_table()
    rows = sorted(table.to_pylist(), key=lambda r: r["key"])
    view = {
        "files": sorted(dataset.files),
        "schema": {f.name: str(f.type) for f in table.schema},
        "nullable": {f.name: f.nullable for f in table.schema},
        "rows": rows,
        "keys": [r["key"].rsplit("_", 2) for r in rows],
    }
    if args.format == "parquet":
        con = duckdb.connect()
        glob = f"{args.path}/**/*.parquet"
        view["duckdb"] = {
            "types": {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{glob}')").fetchall()},
            "rows": [
                list(r)
                for r in con.execute(
                    f"SELECT key, len(prompt_ids) + len(response_ids) AS n, list_sum(response_mask) AS trained "
                    f"FROM read_parquet('{glob}') ORDER BY key"
                ).fetchall()
            ],
        }
    # Bytes (routed_experts) as a list of byte values, as the Node side's plain rows hold them.
    print(json.dumps(view, default=lambda v: list(v) if isinstance(v, bytes) else str(v)))


if __name__ == "__main__":
    main()
