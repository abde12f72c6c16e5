/**
 * A leaner decoder of the record batches in kafkajs 2.2's fetch responses, put in place of its own once per
 * process (applyLeanFetchRecords, before the first fetch).
 *
 * kafkajs decodes every record through two Decoder objects and 64-bit arithmetic on BigInt-backed Longs
 * (each varlong is several Long objects), and spreads each batch's records into the partition's array.
 * Measured on the shared harness's short workload (132,000 events in zstd batches of about 1 MB): 190 MiB
 * of the ingest thread's 790 MiB of allocations and 400 ms of its CPU, most of it garbage surviving young
 * collections while the batch waits for its decoding. This reads the same bytes with plain numbers (exact:
 * 64-bit fields past 2^53 fall back to BigInt) and gives the same messages: offset and timestamp as decimal
 * strings, key and value as Buffers sharing the batch's (decompressed) bytes or null, headers as kafkajs
 * builds them, isControlRecord, batchContext, magicByte, attributes. Key, value, headers and timestamp are
 * made when read (getters on the message's prototype): four objects fewer per message, and the message
 * serves as the pipeline's record (`raw`, `origin`). Legacy message sets (magic 0 and 1) still go to kafkajs's decoder.
 */
import { createRequire } from "node:module";
import type { Origin } from "../schemas/origin.ts";

interface KafkajsDecoder {
  buffer: Buffer;
  offset: number;
  readInt32(): number;
  canReadBytes(n: number): boolean;
  readBytes(n: number): Buffer;
}

interface Codec {
  decompress(buffer: Buffer): Promise<Buffer>;
}

export interface BatchContext {
  firstOffset: string;
  firstTimestamp: string;
  partitionLeaderEpoch: number;
  inTransaction: boolean;
  isControlBatch: boolean;
  lastOffsetDelta: number;
  producerId: string;
  producerEpoch: number;
  firstSequence: number;
  maxTimestamp: string;
  timestampType: number;
  magicByte: number;
}

type Headers = Record<string, Buffer | null | Array<Buffer | null>>;

const NO_VALUE = Buffer.alloc(0);

/**
 * A record as kafkajs's messages are. Where the record's key, value and headers lie is kept (`keyAt`: the
 * key's length varint, the headers follow its key and value), and its timestamp delta; they are read on
 * demand, each read a new view of the batch's bytes.
 *
 * It is also the pipeline's record (RawRecord: `raw`, `origin`) once the source names its topic and
 * partition (`from`): a batch's records wait, from their fetch until they are applied, long enough to be
 * promoted to the old generation, and a record object, its origin and a value view each were 40 of the 90
 * MiB the ingest thread promoted on the shared harness's short workload (issue 46).
 */
export class FetchedMessage {
  readonly magicByte: number;
  readonly attributes: number;
  readonly offset: string;
  readonly isControlRecord: boolean;
  readonly batchContext: BatchContext;
  /** Set by the source that reads the record (`from`); the origin names them. */
  topic = "";
  partition = -1;
  private readonly bytes: Buffer;
  private readonly keyAt: number;
  /** Where the value starts in `bytes`; -1: null. */
  private readonly valueAt: number;
  private readonly valueLength: number;
  private readonly headersAt: number;
  private readonly end: number;
  private readonly timestampDelta: number;

  constructor(
    context: BatchContext,
    attributes: number,
    offset: string,
    at: {
      bytes: Buffer;
      keyAt: number;
      valueAt: number;
      valueLength: number;
      headersAt: number;
      end: number;
      timestampDelta: number;
    },
  ) {
    this.magicByte = context.magicByte;
    this.attributes = attributes;
    this.offset = offset;
    this.isControlRecord = context.isControlBatch;
    this.batchContext = context;
    this.bytes = at.bytes;
    this.keyAt = at.keyAt;
    this.valueAt = at.valueAt;
    this.valueLength = at.valueLength;
    this.headersAt = at.headersAt;
    this.end = at.end;
    this.timestampDelta = at.timestampDelta;
  }

  get value(): Buffer | null {
    return this.valueAt < 0 ? null : this.bytes.subarray(this.valueAt, this.valueAt + this.valueLength);
  }

  /** The value's bytes (empty for a null value), as a RawRecord has them. */
  get raw(): Buffer {
    return this.value ?? NO_VALUE;
  }

  /** The value's length (0 for null), without a view. */
  get rawLength(): number {
    return this.valueAt < 0 ? 0 : this.valueLength;
  }

  /** The buffer the value lies in (its batch's records), without a view of the value. */
  get rawBuffer(): Buffer {
    return this.bytes;
  }

  /** Where the value starts in rawBuffer (a null value: where it would, with rawLength 0). */
  get rawOffset(): number {
    return this.valueAt < 0 ? this.headersAt : this.valueAt;
  }

  /** Where the record came from, as a RawRecord says (after `from`). */
  get origin(): Extract<Origin, { kind: "kafka" }> {
    return { kind: "kafka", topic: this.topic, partition: this.partition, offset: this.offset };
  }

  /** Names the record's topic and partition: it is then a RawRecord. */
  from(topic: string, partition: number): this {
    this.topic = topic;
    this.partition = partition;
    return this;
  }

  get key(): Buffer | null {
    return new RecordReader(this.bytes, this.keyAt, this.end).bytes();
  }

  get headers(): Headers {
    return new RecordReader(this.bytes, this.headersAt, this.end).headers();
  }

  get timestamp(): string {
    const c = this.batchContext;
    if (c.timestampType === LOG_APPEND_TIME && c.maxTimestamp !== "") return c.maxTimestamp;
    const first = BigInt(c.firstTimestamp);
    return sum(exact(first), first, this.timestampDelta);
  }

  /** The fields as kafkajs's plain message object has them (tests compare the two; logs print it). */
  toJSON(): Record<string, unknown> {
    const { magicByte, attributes, timestamp, offset, key, value, headers, isControlRecord, batchContext } =
      this;
    return { magicByte, attributes, timestamp, offset, key, value, headers, isControlRecord, batchContext };
  }
}

type DecodeMessages = (decoder: KafkajsDecoder) => Promise<unknown[]>;

const MAGIC_OFFSET = 16;
const RECORD_BATCH_MAGIC = 2;
/** kafkajs stops at a tail shorter than this (a partial batch cut by the fetch's byte limit). */
const RECORD_BATCH_OVERHEAD = 49;
/** firstOffset(8) length(4) leaderEpoch(4) magic(1) crc(4) attributes(2) lastOffsetDelta(4) firstTimestamp(8)
 * maxTimestamp(8) producerId(8) producerEpoch(2) firstSequence(4) records count(4). */
const RECORDS_AT = 61;
const TIMESTAMP_TYPE_FLAG = 0x8;
const TRANSACTIONAL_FLAG = 0x10;
const CONTROL_FLAG = 0x20;
const LOG_APPEND_TIME = 1;
const CREATE_TIME = 0;

const require = createRequire(import.meta.url);
const DECODE_MESSAGES = "kafkajs/src/protocol/requests/fetch/v4/decodeMessages.js";
const FETCH_RESPONSES = [4, 5, 6, 7, 8, 9, 10, 11].map(
  (v) => `kafkajs/src/protocol/requests/fetch/v${v}/response.js`,
);

let applied: boolean | null = null;

/**
 * Puts the lean decoder in place of kafkajs's (the fetch responses load it at their first use). Returns
 * false where a fetch response module was loaded before (kafkajs's decoder then stays: slower, the same
 * messages).
 */
export function applyLeanFetchRecords(): boolean {
  if (applied !== null) return applied;
  const loaded = FETCH_RESPONSES.some((m) => require.cache[require.resolve(m)] !== undefined);
  if (loaded) return (applied = false);
  const path = require.resolve(DECODE_MESSAGES);
  const original = require(path) as DecodeMessages;
  const { lookupCodecByAttributes } = require("kafkajs/src/protocol/message/compression/index.js") as {
    lookupCodecByAttributes: (attributes: number) => Codec | null;
  };
  require.cache[path]!.exports = leanDecodeMessages(original, lookupCodecByAttributes);
  return (applied = true);
}

/** The fetch response's record set decoder: record batches here, legacy message sets by kafkajs. */
export function leanDecodeMessages(
  legacy: DecodeMessages,
  codecOf: (attributes: number) => Codec | null,
): DecodeMessages {
  return async (decoder) => {
    const start = decoder.offset;
    const size = decoder.readInt32();
    if (size <= 0 || !decoder.canReadBytes(size)) return [];
    if (
      size <= MAGIC_OFFSET ||
      decoder.buffer.readInt8(decoder.offset + MAGIC_OFFSET) !== RECORD_BATCH_MAGIC
    ) {
      decoder.offset = start;
      return legacy(decoder);
    }
    const set = decoder.readBytes(size);
    const messages: FetchedMessage[] = [];
    let at = 0;
    while (set.length - at >= RECORD_BATCH_OVERHEAD) {
      const length = set.readInt32BE(at + 8);
      const end = at + 12 + length;
      if (end > set.length || length < RECORDS_AT - 12) break; // partial: cut by the fetch's byte limit
      await decodeBatch(set, at, end, codecOf, messages);
      at = end;
    }
    return messages;
  };
}

async function decodeBatch(
  set: Buffer,
  at: number,
  end: number,
  codecOf: (attributes: number) => Codec | null,
  out: FetchedMessage[],
): Promise<void> {
  const attributes = set.readInt16BE(at + 21);
  const firstOffset = set.readBigInt64BE(at);
  const firstTimestamp = set.readBigInt64BE(at + 27);
  const maxTimestamp = set.readBigInt64BE(at + 35).toString();
  const timestampType = (attributes & TIMESTAMP_TYPE_FLAG) !== 0 ? LOG_APPEND_TIME : CREATE_TIME;
  const context: BatchContext = {
    firstOffset: firstOffset.toString(),
    firstTimestamp: firstTimestamp.toString(),
    partitionLeaderEpoch: set.readInt32BE(at + 12),
    inTransaction: (attributes & TRANSACTIONAL_FLAG) !== 0,
    isControlBatch: (attributes & CONTROL_FLAG) !== 0,
    lastOffsetDelta: set.readInt32BE(at + 23),
    producerId: set.readBigInt64BE(at + 43).toString(),
    producerEpoch: set.readInt16BE(at + 51),
    firstSequence: set.readInt32BE(at + 53),
    maxTimestamp,
    timestampType,
    magicByte: set.readInt8(at + MAGIC_OFFSET),
  };
  const count = set.readInt32BE(at + 57);
  if (count <= 0) return;
  const codec = codecOf(attributes);
  let records: Buffer;
  let from: number;
  let to: number;
  if (codec === null) {
    records = set;
    from = at + RECORDS_AT;
    to = end;
  } else {
    records = await codec.decompress(set.subarray(at + RECORDS_AT, end));
    from = 0;
    to = records.length;
  }
  const reader = new RecordReader(records, from, to);
  const offsetBase = exact(firstOffset);
  // One object for the positions, reused: the message copies them.
  const pos = {
    bytes: records,
    keyAt: 0,
    valueAt: 0,
    valueLength: 0,
    headersAt: 0,
    end: 0,
    timestampDelta: 0,
  };
  for (let i = 0; i < count; i++) {
    const recordEnd = reader.recordEnd();
    const recordAttributes = reader.int8();
    pos.timestampDelta = reader.varlong();
    const offsetDelta = reader.varint();
    pos.keyAt = reader.at;
    reader.skipBytes();
    pos.valueLength = reader.varint();
    pos.valueAt = pos.valueLength === -1 ? -1 : reader.at;
    reader.skip(pos.valueLength);
    pos.headersAt = reader.at;
    reader.skipHeaders();
    if (reader.at !== recordEnd) {
      reader.fail(`a record's fields end at ${reader.at}, its length says ${recordEnd}`);
    }
    pos.end = recordEnd;
    const offset = sum(offsetBase, firstOffset, offsetDelta);
    out.push(new FetchedMessage(context, recordAttributes, offset, pos));
  }
}

/** The 64-bit value as a number when it is exact, else null (arithmetic then goes through BigInt). */
function exact(v: bigint): number | null {
  return v >= -9007199254740991n && v <= 9007199254740991n ? Number(v) : null;
}

function sum(base: number | null, big: bigint, delta: number): string {
  if (base !== null) {
    const n = base + delta;
    if (Number.isSafeInteger(n)) return String(n);
  }
  return (big + BigInt(delta)).toString();
}

class RecordReader {
  at: number;
  private readonly buf: Buffer;
  private readonly end: number;

  constructor(buf: Buffer, from: number, to: number) {
    this.buf = buf;
    this.at = from;
    this.end = to;
  }

  fail(why: string): never {
    throw new Error(`Corrupt Kafka record batch: ${why}`);
  }

  /** Reads a record's length; returns where the record ends. */
  recordEnd(): number {
    const length = this.varint();
    const end = this.at + length;
    if (length < 0 || end > this.end)
      this.fail(`a record of ${length} bytes at ${this.at} passes its batch's end`);
    return end;
  }

  int8(): number {
    if (this.at >= this.end) this.fail("a record ends early");
    return this.buf.readInt8(this.at++);
  }

  /** A zigzag varint of up to 32 bits. */
  varint(): number {
    const buf = this.buf;
    let result = 0;
    let shift = 0;
    let byte: number;
    do {
      if (this.at >= this.end || shift > 28) this.fail(`a bad varint at ${this.at}`);
      byte = buf[this.at++]!;
      result |= (byte & 0x7f) << shift;
      shift += 7;
    } while (byte & 0x80);
    return (result >>> 1) ^ -(result & 1);
  }

  /** A zigzag varlong as a number; exact (through BigInt) past 2^53, which no real timestamp delta reaches. */
  varlong(): number {
    const buf = this.buf;
    const start = this.at;
    let result = 0;
    let scale = 1;
    let byte: number;
    do {
      if (this.at >= this.end || scale > 2 ** 63) this.fail(`a bad varlong at ${this.at}`);
      byte = buf[this.at++]!;
      result += (byte & 0x7f) * scale;
      scale *= 128;
    } while (byte & 0x80);
    if (result <= Number.MAX_SAFE_INTEGER) return result % 2 === 0 ? result / 2 : -(result + 1) / 2;
    let big = 0n;
    for (let i = start, shift = 0n; i < this.at; i++, shift += 7n) big |= BigInt(buf[i]! & 0x7f) << shift;
    const decoded = (big >> 1n) ^ -(big & 1n);
    if (decoded > BigInt(Number.MAX_SAFE_INTEGER) || decoded < BigInt(Number.MIN_SAFE_INTEGER)) {
      this.fail(`a timestamp delta of ${decoded} ms`);
    }
    return Number(decoded);
  }

  /** Varint length and bytes, sharing the batch's buffer; null for length -1. */
  bytes(): Buffer | null {
    const length = this.varint();
    if (length === -1) return null;
    const start = this.at;
    this.at += length;
    if (length < 0 || this.at > this.end) this.fail(`${length} bytes at ${start} pass the record's end`);
    return this.buf.subarray(start, this.at);
  }

  /** Past a varint length and its bytes. */
  skipBytes(): void {
    this.skip(this.varint());
  }

  /** Past `length` bytes (-1: a null, none). */
  skip(length: number): void {
    if (length === -1) return;
    const start = this.at;
    this.at += length;
    if (length < 0 || this.at > this.end) this.fail(`${length} bytes at ${start} pass the record's end`);
  }

  /** Past the headers, checking their framing. */
  skipHeaders(): void {
    const count = this.varint();
    for (let i = 0; i < count; i++) {
      this.skipBytes();
      this.skipBytes();
    }
  }

  /** Headers as kafkajs gives them: one key's repeated values become an array, in order. */
  headers(): Headers {
    const count = this.varint();
    const headers: Headers = {};
    for (let i = 0; i < count; i++) {
      const keyBytes = this.bytes();
      const key = keyBytes === null ? "null" : keyBytes.toString("utf8");
      const value = this.bytes();
      const seen = headers[key];
      if (seen === undefined) headers[key] = value;
      else if (Array.isArray(seen)) seen.push(value);
      else headers[key] = [seen, value];
    }
    return headers;
  }
}
