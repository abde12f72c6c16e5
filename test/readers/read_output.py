"""Reads a trajflow output directory with independent readers (pyarrow's dataset API and DuckDB) and
prints what they saw as JSON, for the Node tests to compare against trajflow's own rows."""
import json
import sys

import duckdb
import pyarrow.dataset as ds


def main(path: str) -> None:
    dataset = ds.dataset(path, format="parquet", exclude_invalid_files=False)
    table = dataset.to_table()
    rows = sorted(table.to_pylist(), key=lambda r: (r["key"]))
    con = duckdb.connect()
    glob = f"{path}/**/*.parquet"
    duck_rows = con.execute(
        f"SELECT key, len(prompt_ids) + len(response_ids) AS n, list_sum(response_mask) AS trained "
        f"FROM read_parquet('{glob}') ORDER BY key"
    ).fetchall()
    duck_types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{glob}')").fetchall()}
    print(
        json.dumps(
            {
                "files": sorted(f for f in dataset.files),
                "schema": {f.name: str(f.type) for f in table.schema},
                "nullable": {f.name: f.nullable for f in table.schema},
                "rows": rows,
                "duckdb": {"types": duck_types, "rows": [list(r) for r in duck_rows]},
                "keys": [r["key"].rsplit("_", 2) for r in rows],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
