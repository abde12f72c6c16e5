import { z } from "zod";

/** Configuration of the `parquet` sink. */
export const parquetSinkConfigSchema = z.strictObject({
  path: z.string().min(1).describe("Output directory; files are named part-NNNNN.parquet."),
  compression: z
    .enum(["zstd", "snappy", "gzip", "lz4", "none"])
    .default("zstd")
    .describe("Parquet compression codec for every column."),
  max_rows_per_file: z.int().positive().default(50_000).describe("A file is closed after this many rows."),
  max_tokens_per_file: z
    .int()
    .positive()
    .default(64_000_000)
    .describe("A file is closed once its rows hold this many tokens (prompt + response), bounding memory."),
  row_group_size: z.int().positive().default(4_096).describe("Rows per Parquet row group."),
});

export type ParquetSinkConfig = z.output<typeof parquetSinkConfigSchema>;
export type ParquetSinkConfigInput = z.input<typeof parquetSinkConfigSchema>;
