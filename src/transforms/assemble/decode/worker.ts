/**
 * Worker thread: decodes chunks of raw events (UTF-8, JSON, validation, token unpacking, digest) so the
 * ingest thread only fetches and assembles. Decoding is the largest per-event cost; off the event loop
 * it also no longer holds back the consumer's heartbeats.
 */
import { parentPort } from "node:worker_threads";
import type { GatewayEvent, PolicyUpdateEvent } from "../../../schemas/events.ts";
import type { RoutedExperts } from "../../../schemas/routed-experts.ts";
import { ThreadMeter, type ThreadUsage } from "../../../core/thread-usage.ts";
import { ArrayArena, useArrayArena } from "../../../schemas/tokens.ts";
import { decodeOutcome, type DecodeOutcome, type Rejection } from "./decode-core.ts";
import { PromptPrefixes } from "./prompt-prefix.ts";
import { EventPacker, packedArrays, type PackedEvents } from "./reply-codec.ts";

export interface DecodeJob {
  id: number;
  /** The chunk's raw events, back to back. */
  bytes: Uint8Array;
  /** End offset of each event in `bytes`. */
  ends: Uint32Array;
  /** Start offset of each event in `bytes` when there are bytes between them; else each starts where the one before ends. */
  starts?: Uint32Array;
}

/**
 * Per event: the decoded event and its digest, a control event, or why it was rejected (the ingest
 * thread, which knows where the event came from, makes the dead letter); `schema`: an event the fast path
 * handed over (a policy.update, or one its checks do not cover), parsed, which the ingest thread
 * validates with the zod schemas (this thread never loads zod: 20-50 MiB less, BENCHMARKS.md); null when
 * it nests too deep to send, and the ingest thread decodes its bytes again.
 */
export type DecodedItem =
  | { event: GatewayEvent; digest: number }
  | { control: PolicyUpdateEvent }
  | { rejection: Rejection }
  | { schema: Record<string, unknown> | null };

export interface DecodeReply {
  id: number;
  /** Per record, in order: 1 when it is the next of `events` (with the next of `digests`), else 0. */
  packed: Uint8Array;
  /** The chunk's events, packed (reply-codec.ts). */
  events: PackedEvents;
  /** Each packed event's digest, in order (transferred). */
  digests: Float64Array;
  /** The records not packed, in order: rejections, control events, and events that cannot be packed. */
  items: DecodedItem[];
  /** This worker's CPU and memory so far (the run report's per-thread figures). */
  usage: ThreadUsage;
  /** The job's buffer, read and handed back for the next job (nothing decoded refers to it). */
  spent: ArrayBuffer;
}

// Never read: rejections go back as reasons, and the ingest thread adds the real origin.
const ORIGIN = { kind: "kafka", topic: "", partition: 0, offset: "0" } as const;

/**
 * Buffers of a decoded event's typed arrays allocated for that array alone (packed arrays, and JSON arrays
 * too large for the arena's blocks), so they can move; the arena's shared blocks are listed once per chunk.
 */
function addBuffers(event: GatewayEvent, out: ArrayBuffer[]): void {
  // for...in, not Object.values: no array made per event.
  for (const key in event) {
    const value = (event as unknown as Record<string, unknown>)[key];
    // Routed experts are an object around their bytes (routed-experts.ts), always a buffer of their own.
    const view = isRoutedExperts(value) ? value.data : value;
    if (ArrayBuffer.isView(view) && view.byteLength === view.buffer.byteLength) {
      out.push(view.buffer as ArrayBuffer);
    }
  }
}

const isRoutedExperts = (v: unknown): v is RoutedExperts =>
  typeof v === "object" && v !== null && (v as Partial<RoutedExperts>).data instanceof Uint8Array;

const arena = new ArrayArena();
useArrayArena(arena);
const meter = new ThreadMeter();
const prefixes = new PromptPrefixes();

const packer = new EventPacker();

parentPort!.on("message", (job: DecodeJob) => {
  // Every record is decoded before any is packed: packing needs the arena's blocks for the whole chunk.
  const outcomes: DecodeOutcome[] = [];
  let start = 0;
  const starts = job.starts;
  for (let i = 0; i < job.ends.length; i++) {
    if (starts !== undefined) start = starts[i]!;
    const end = job.ends[i]!;
    outcomes.push(decodeOutcome({ raw: job.bytes.subarray(start, end), origin: ORIGIN }, null, prefixes));
    start = end;
  }
  const items: DecodedItem[] = [];
  const digests = new Float64Array(outcomes.length);
  let digested = 0;
  const packed = new Uint8Array(outcomes.length);
  // Every buffer the chunk's events lie in moves with the reply: the arena's blocks and the arrays' own.
  const buffers = arena.take();
  for (const result of outcomes) if (result.kind === "event") addBuffers(result.value.event, buffers);
  packer.begin(buffers);
  for (let i = 0; i < outcomes.length; i++) {
    const result = outcomes[i]!;
    if (result.kind === "event") {
      if (packer.add(result.value.event)) {
        packed[i] = 1;
        digests[digested++] = result.value.digest;
      } else {
        items.push({ event: result.value.event, digest: result.value.digest });
      }
    } else if (result.kind === "control") {
      items.push({ control: result.control });
    } else if (result.kind === "rejection") {
      items.push({ rejection: result.rejection });
    } else {
      items.push({ schema: result.obj });
    }
  }
  const events = packer.take();
  const spent = job.bytes.buffer as ArrayBuffer;
  const transfer = [...events.buffers, ...packedArrays(events), packed.buffer, digests.buffer, spent];
  const reply: DecodeReply = { id: job.id, packed, events, digests, items, usage: meter.sample(), spent };
  parentPort!.postMessage(reply, transfer);
});
