"""Compares two Parquet files as independent readers see them: pyarrow (schema with its metadata, every
value) and DuckDB (column types, every row, and a filter that uses chunk statistics). Prints JSON with what
differs, plus facts about the first file's layout (row groups, pages per column, statistics).

usage: compare_parquet.py <a.parquet> <b.parquet>
"""
import json
import sys

import duckdb
import pyarrow.parquet as pq


def duck(path):
    con = duckdb.connect()
    rel = con.sql(f"SELECT * FROM read_parquet('{path}') ORDER BY key")
    return {"types": [str(t) for t in rel.types], "rows": [list(map(repr, r)) for r in rel.fetchall()]}


def main() -> None:
    a_path, b_path = sys.argv[1], sys.argv[2]
    a, b = pq.read_table(a_path), pq.read_table(b_path)
    meta = pq.ParquetFile(a_path).metadata
    differs = [c for c in a.column_names if c not in b.column_names or not a[c].equals(b[c])]
    stats = {}
    for i in range(meta.num_columns):
        column = meta.row_group(0).column(i)
        if column.is_stats_set and column.statistics.has_min_max:
            s = column.statistics
            stats[column.path_in_schema] = [repr(s.min), repr(s.max), s.null_count]
    con = duckdb.connect()
    filtered = con.sql(f"SELECT count(*) FROM read_parquet('{a_path}') WHERE reward > 0.5").fetchall()[0][0]
    print(
        json.dumps(
            {
                "schema_equal": a.schema.equals(b.schema, check_metadata=True),
                "schema": str(a.schema),
                "rows": [a.num_rows, b.num_rows],
                "differs": differs,
                "duckdb_equal": duck(a_path) == duck(b_path),
                "duckdb_reward_over_half": filtered,
                "row_groups": meta.num_row_groups,
                "created_by": meta.created_by,
                "stats": stats,
                "key_value": {k.decode(): v.decode() for k, v in meta.metadata.items() if k != b"ARROW:schema"},
            }
        )
    )


if __name__ == "__main__":
    main()
