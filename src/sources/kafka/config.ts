import { z } from "zod";
import type { SharedSettings } from "../../contract/components.ts";
import { decodeWorkersFor } from "../../core/memory-limit.ts";
import { kafkaConnectionSchema, shareConnection } from "../../kafka/connection.ts";
import { FETCH_DEFAULTS } from "../../kafka/topic-consumer.ts";

/** Configuration of the `kafka` source. */
export const kafkaSourceConfigSchema = z.strictObject({
  connection: kafkaConnectionSchema,
  topic: z.string().min(1).describe("Topic of gateway events, keyed by uid."),
  group_id: z.string().min(1).describe("Consumer group: processes sharing it split the topic's partitions."),
  from_beginning: z
    .boolean()
    .default(true)
    .describe("Where a group without committed offsets starts: the earliest (default) or the latest offset."),
  commit_interval_ms: z.int().positive().default(2_000).describe("How often settled offsets are committed."),
  decode_workers: z
    .int()
    .nonnegative()
    .optional()
    .describe(
      "Worker threads that decode events (JSON, validation, token unpacking) while the consumer thread " +
        "fetches and assembles the batch before; 0 decodes on the consumer thread. Default: 2 on a host " +
        "with 8 or more cores, 1 with 2-7, else 0. A worker pays where it has a core of its own; on 2 cores " +
        "shared with a broker one measured -6% to +30% by workload, on 16 cores a second one +9-18% " +
        "(BENCHMARKS.md), each at 12-60 MiB more memory.",
    ),
  session_timeout_ms: z.int().positive().default(30_000).describe("Consumer group session timeout."),
  idle_advance_ms: z
    .int()
    .nonnegative()
    .default(1_000)
    .describe(
      "A partition that is caught up (its high watermark read, asked of the broker) and received nothing " +
        "for this long moves its clock on with wall-clock time, so reward grace, idle and group timeouts " +
        'elapse on a quiet topic (docs/assembly.md, "Time"). 0: pure event time, as a replay.',
    ),
  cut_files_when_quiet: z
    .boolean()
    .default(true)
    .describe(
      "A partition caught up and quiet for idle_advance_ms writes its buffered rows at once instead of " +
        "waiting for max_file_age_ms: in an RL loop the topic is quiet because the trainer waits for " +
        "them. false: files are cut by size and age only (fewer, larger files on a trickling topic).",
    ),
  fetch_max_bytes: z
    .int()
    .positive()
    .optional()
    .describe(
      "Most bytes one fetch returns, per partition and in all (kafkajs's maxBytesPerPartition and " +
        "maxBytes; defaults 256 KiB and 1 MiB, kafka/topic-consumer.ts FETCH_DEFAULTS). Counted compressed: " +
        "a fetch is held decompressed while it is applied (~24x for zstd JSON events with full prompts). " +
        "Smaller: less memory per fetch, more round trips. With librdkafka also its prefetch queue " +
        "(queued.max.messages.kbytes), which it fills ahead of the consumer: one fetch's worth, 1 MiB by " +
        "default (librdkafka's own default is 64 MiB).",
    ),
  lag_interval_ms: z
    .int()
    .positive()
    .default(5_000)
    .describe("How often the partitions' high watermarks are fetched, for the lag gauge and the watchdog."),
  watchdog_ms: z
    .int()
    .nonnegative()
    .default(120_000)
    .describe(
      "Restart the consumer when it received nothing for this long while its partitions have lag (kafkajs " +
        "and librdkafka clients have both had silent stalls); 0 turns the watchdog off.",
    ),
});
export type KafkaSourceConfig = z.output<typeof kafkaSourceConfigSchema>;
export type KafkaSourceConfigInput = z.input<typeof kafkaSourceConfigSchema>;

/**
 * Defaults under a memory limit (core/memory-limit.ts): below 1 GiB, fetches of the default per partition
 * in all too (256 KiB: a fetch's batches are held compressed and decompressed, 5-24x for JSON under zstd,
 * and the client fetches ahead while a batch is applied), and no decode worker below 512 MiB.
 */
export function kafkaSourceSizing(limit: number): Partial<KafkaSourceConfigInput> {
  return {
    ...(limit < 2 ** 30 ? { fetch_max_bytes: FETCH_DEFAULTS.perPartition } : {}),
    ...decodeWorkersFor(limit),
  };
}

/** What the source shares with the pipeline's topics: its connection, their default. */
export const kafkaSourceShares = (config: KafkaSourceConfig): SharedSettings =>
  shareConnection(config.connection);
