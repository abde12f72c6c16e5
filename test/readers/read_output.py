"""Reads a trajflow output directory with independent readers (pyarrow's dataset API and, for Parquet,
DuckDB) and prints what they saw as JSON, for the Node tests to compare against trajflow's own rows.

usage: read_output.py <dir | s3://bucket/prefix> [--format parquet|ipc] [--hive]

An s3:// path takes its endpoint and credentials from the environment, as a trainer's reader does:
AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (never on the command line, where
ps shows them and a secret beginning with '-' reads as an option).

An s3:// path is read through pyarrow's S3 filesystem alone: DuckDB reads S3 through its httpfs
extension, which it downloads from extensions.duckdb.org (not a package registry; PyPI's
duckdb-extension-httpfs stops at DuckDB 1.5), so the tests' offline machines cannot load it.
"""
import argparse
import json
import os

import duckdb
import pyarrow.dataset as ds
from pyarrow import fs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--format", default="parquet")
    parser.add_argument("--hive", action="store_true")
    args = parser.parse_args()

    remote = args.path.startswith("s3://")
    filesystem = None
    path = args.path
    if remote:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3")
        filesystem = fs.S3FileSystem(
            endpoint_override=endpoint,
            access_key=os.environ["AWS_ACCESS_KEY_ID"],
            secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
            region=os.environ.get("AWS_REGION", "us-east-1"),
            scheme="http" if (endpoint or "").startswith("http://") else "https",
        )
        path = args.path[len("s3://") :]
    dataset = ds.dataset(
        path,
        format=args.format,
        filesystem=filesystem,
        partitioning="hive" if args.hive else None,
        # Dead letters and temporaries start with _ or . and are skipped as for a directory.
        exclude_invalid_files=False,
    )
    table = dataset.to_table()
    rows = sorted(table.to_pylist(), key=lambda r: r["key"])
    view = {
        "files": sorted(dataset.files),
        "schema": {f.name: str(f.type) for f in table.schema},
        "nullable": {f.name: f.nullable for f in table.schema},
        "rows": rows,
        "keys": [r["key"].rsplit("_", 2) for r in rows],
    }
    if args.format == "parquet" and not remote:
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
