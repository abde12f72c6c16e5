import { z } from "zod";
import { clampSize, dataBudget } from "../../core/memory-limit.ts";
import { outputLocationSchema } from "../shared/location-schema.ts";
import { s3OptionsSchema } from "../shared/s3-options.ts";
import { ENGINE_CODECS } from "./encoders/types.ts";

/** Tokens a file holds by default, and at most under a memory limit (`fileSinkSizing`). */
const TOKENS_PER_FILE = 500_000;

/**
 * Configuration of the file sinks (`parquet` and `arrow`). Unknown keys are rejected so a typo fails
 * loudly; engine and codec are checked together.
 */
export const fileSinkConfigSchema = z
  .strictObject({
    path: outputLocationSchema.describe(
      "Output directory, or s3://bucket/prefix (objects committed exactly once, docs/sinks.md).",
    ),
    s3: s3OptionsSchema
      .prefault({})
      .describe(
        "The S3 client when `path` is s3:// (endpoint, path style, part size, uploads at once, retries).",
      ),
    format: z
      .enum(["parquet", "arrow"])
      .default("parquet")
      .describe("parquet, or arrow (Arrow IPC file format, for trainers that memory-map batches)."),
    engine: z
      .enum(["trajflow", "parquet-wasm", "parquetjs-lite"])
      .default("trajflow")
      .describe(
        "Parquet engine: trajflow (default: the project's own writer, pages straight from the token arrays, Node's native zstd), parquet-wasm (Rust's parquet crate as WebAssembly) or parquetjs-lite (pure JavaScript, slow).",
      ),
    compression: z
      .enum(["zstd", "snappy", "gzip", "lz4", "none"])
      .optional()
      .describe("Parquet codec; default zstd (snappy for parquetjs-lite). Ignored for arrow."),
    max_rows_per_file: z.int().positive().default(10_000).describe("A file is cut after this many rows."),
    max_tokens_per_file: z
      .int()
      .positive()
      // measured (bench:kafka workload): 16M tokens per file gave 3.8 M tokens/s end to end, 4M gave 6.1:
      // smaller files let the encoder work while ingest goes on instead of at the end. 1M (issue 46, the
      // shared harness's 880,000-event backlog): 7.6 M tokens/s against 5.8 at 4M, and a peak RSS 444 MiB
      // lower, the two files in flight no longer holding 4M tokens each. 500k (issue 46, once a file's
      // chunks went out in one write): the harness's short workload at the same speed, 25-30 MiB less peak
      // RSS (every partition's rows waiting and in flight at the catch-up's first cut).
      .default(TOKENS_PER_FILE)
      .describe("A file is cut once its rows hold this many tokens; bounds the memory of buffered rows."),
    max_bytes_per_file: z
      .int()
      .positive()
      .default(256 * 1024 * 1024)
      .describe(
        "A file is cut once its rows' column data (token, logprob, version and routed-experts arrays) reach this many bytes; bounds buffered memory when rows are heavy (MoE routing is 768 bytes a token at 48 layers x top-8).",
      ),
    max_buffered_bytes: z
      .int()
      .positive()
      .default(256 * 1024 * 1024)
      .describe(
        "Bytes of rows waiting for a file over every lane (partition) at once; past it the lane holding the most is cut early. Bounds buffered memory however many partitions a consumer is assigned (each buffers up to max_bytes_per_file / max_tokens_per_file on its own).",
      ),
    max_file_age_ms: z
      .int()
      .positive()
      .optional()
      .describe(
        "Wall-clock age after which buffered rows are written even if the file is small (off by default, so replays stay deterministic).",
      ),
    row_group_size: z.int().positive().default(4_096).describe("Rows per Parquet row group."),
    partition_by: z
      .enum(["none", "date", "policy"])
      .default("none")
      .describe(
        "Hive-style subdirectories: date=YYYY-MM-DD (UTC, from ended_at_ms) or policy=<weight_version_max>.",
      ),
    encode_workers: z
      .int()
      .min(1)
      .max(16)
      .default(1)
      .describe("Worker threads encoding files, so ingest never waits on compression."),
    max_in_flight: z
      .int()
      .positive()
      .default(2)
      .describe("Files being encoded or written at once; a writer waits beyond this (backpressure)."),
  })
  .superRefine((c, ctx) => {
    if (
      c.format === "parquet" &&
      c.compression !== undefined &&
      !ENGINE_CODECS[c.engine].includes(c.compression)
    ) {
      ctx.addIssue({
        code: "custom",
        path: ["compression"],
        message: `${c.engine} cannot write ${c.compression}; choose one of ${ENGINE_CODECS[c.engine].join(", ")}`,
      });
    }
  })
  .transform((c) => ({
    ...c,
    compression: c.compression ?? (c.engine === "parquetjs-lite" ? ("snappy" as const) : ("zstd" as const)),
  }));

export type FileSinkConfig = z.output<typeof fileSinkConfigSchema>;

/**
 * Defaults under a memory limit (core/memory-limit.ts): a file's rows are held up to three times while
 * they are written (waiting, handed to the encoder, encoded): measured, ~80 bytes of peak RSS a token of
 * the file in all (BENCHMARKS.md). Half the data budget bounds them; one file in flight below 1 GiB.
 */
export function fileSinkSizing(limit: number): Partial<FileSinkConfigInput> {
  const budget = dataBudget(limit);
  return {
    max_tokens_per_file: Math.floor(Math.min(TOKENS_PER_FILE, Math.max(128 * 1024, budget / 2 / 80))),
    max_bytes_per_file: clampSize(budget / 4, 4 * 2 ** 20, 256 * 2 ** 20),
    max_buffered_bytes: clampSize(budget / 4, 4 * 2 ** 20, 256 * 2 ** 20),
    ...(limit < 2 ** 30 ? { max_in_flight: 1 } : {}),
  };
}
export type FileSinkConfigInput = z.input<typeof fileSinkConfigSchema>;
