/**
 * Stateless map at the source edge: raw bytes → a typed gateway event, or a dead letter with a stable
 * code. Transforms after this one trust their input.
 *
 * This module loads no zod: the events gateways send all day pass fast-events.ts's checks, and what they
 * hand over goes to the zod schemas given as `SchemaCheck` (decode.ts gives events.ts's). A decode worker
 * gives none and sends such an event back to the ingest thread, which has zod loaded anyway.
 */
import { preview } from "../../../core/preview.ts";
import { crc32 } from "node:zlib";
import type { ZodError } from "zod";
import type { ErrorCode } from "../../../core/errors.ts";
import { makeDeadLetter, type RawRecord } from "../../../core/records.ts";
import type { DeadLetter } from "../../../schemas/dead-letter.ts";
import {
  CONTROL_EVENT_TYPES,
  EVENT_TYPES,
  MAX_TIME_MS,
  PROTOCOL_VERSION,
  type CodedIssueParams,
  type EventType,
} from "../../../schemas/event-constants.ts";
import type { GatewayEvent, PolicyUpdateEvent } from "../../../schemas/events.ts";
import { fastEvent } from "../../../schemas/fast-events.ts";
import type { PromptPrefixes } from "./prompt-prefix.ts";
import { formatOrigin } from "../../../schemas/origin.ts";
import { describeLayout, sameLayout } from "../../../schemas/routed-experts.ts";
import { firstInfinite } from "../../../schemas/tokens.ts";

export const COMPONENT = "decode";

/** A decoded event with its provenance. `digest` identifies the exact bytes (to tell true duplicates). */
export interface DecodedEvent {
  event: GatewayEvent;
  record: RawRecord;
  digest: number;
}

/**
 * The envelope of an event that was rejected after its session and seq could be read. The session still
 * counts that seq as used, so one bad event does not strand every later event of its session.
 */
export interface RejectedEnvelope {
  uid: string;
  session_id: string;
  seq: number;
  ts: number;
  digest: number;
}

/** A session event, a control event (not part of any session), or a rejection. */
export type DecodeResult =
  | { kind: "event"; value: DecodedEvent }
  | { kind: "control"; control: PolicyUpdateEvent; record: RawRecord }
  | { kind: "rejected"; deadLetter: DeadLetter; envelope?: RejectedEnvelope };

// Fatal: a replacement character would make distinct ids equal.
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The largest logprob accepted: log-probabilities are at most 0, and a float32 log_softmax can round to a
 * hair above it; anything larger is a broken gateway (probabilities above 1).
 */
export const MAX_LOGPROB = 1e-5;

function firstAbove(values: Float32Array, limit: number): number {
  for (let i = 0; i < values.length; i++) if (values[i]! > limit) return i;
  return -1;
}

/** Deeper free-form fields are rejected: later stages (and structured clone) would recurse that deep. */
export const MAX_NESTING = 64;
const FREE_FORM = ["messages", "tools", "tool_calls", "metadata", "info"] as const;

/** Whether `value` nests deeper than `limit` arrays/objects, found without recursion or allocation per node. */
function nestsDeeper(value: unknown, limit: number): boolean {
  if (typeof value !== "object" || value === null) return false;
  const stack: object[] = [value];
  const depths: number[] = [1];
  while (stack.length > 0) {
    const v = stack.pop()!;
    const depth = depths.pop()!;
    if (depth > limit) return true;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const c: unknown = v[i];
        if (typeof c === "object" && c !== null) {
          stack.push(c);
          depths.push(depth + 1);
        }
      }
    } else {
      for (const k in v) {
        const c = (v as Record<string, unknown>)[k];
        if (typeof c === "object" && c !== null) {
          stack.push(c);
          depths.push(depth + 1);
        }
      }
    }
  }
  return false;
}

/**
 * Why an event was rejected, without where it came from: a decode worker does not know the record's
 * origin, so the thread that does turns this into the dead letter (`rejectedResult`) without decoding
 * the event again.
 */
export interface Rejection {
  code: ErrorCode;
  /** The problem, without the origin (the dead letter's message is `origin: reason`). */
  reason: string;
  details?: Record<string, unknown>;
  uid?: string;
  session_id?: string;
  seq?: number;
  envelope?: RejectedEnvelope;
}

/**
 * An event decoded, a control event, or why neither: what a decode worker sends back; `schema`: the
 * event needs the zod schemas, which this decode was given none of; `obj` is it parsed, for
 * `resumeOutcome` to validate where the schemas are (it is not parsed twice), or null when it nests too
 * deep to be handed to another thread (structured cloning 100,000 levels overflows the stack): such an
 * event, invalid anyway, is decoded again from its bytes.
 */
export type DecodeOutcome =
  | { kind: "event"; value: DecodedEvent }
  | { kind: "control"; control: PolicyUpdateEvent; record: RawRecord }
  | { kind: "rejection"; rejection: Rejection }
  | { kind: "schema"; obj: Record<string, unknown> | null };

type SafeParse<T> = (obj: unknown) => { success: true; data: T } | { success: false; error: ZodError };

/** The zod schemas (events.ts): the authority on what the fast path hands over, and its error messages. */
export interface SchemaCheck {
  control: SafeParse<PolicyUpdateEvent>;
  event: (type: EventType) => SafeParse<GatewayEvent>;
}

function reject(
  code: ErrorCode,
  reason: string,
  record: RawRecord,
  obj?: Record<string, unknown>,
  details?: Record<string, unknown>,
): DecodeOutcome {
  const rejection: Rejection = { code, reason };
  if (details !== undefined) rejection.details = details;
  if (obj !== undefined) {
    const { uid, session_id, seq, ts } = obj;
    if (typeof uid === "string") rejection.uid = uid;
    if (typeof session_id === "string") rejection.session_id = session_id;
    if (typeof seq === "number") rejection.seq = seq;
    if (
      typeof uid === "string" &&
      uid.length > 0 &&
      typeof session_id === "string" &&
      session_id.length > 0 &&
      Number.isInteger(seq) &&
      (seq as number) >= 0 &&
      typeof ts === "number" &&
      Number.isFinite(ts) &&
      ts >= 0 &&
      ts <= MAX_TIME_MS
    ) {
      rejection.envelope = { uid, session_id, seq: seq as number, ts, digest: digestOf(record) };
    }
  }
  return { kind: "rejection", rejection };
}

/** The dead letter of a rejected record, its message prefixed with where the record came from. */
export function rejectedResult(rejection: Rejection, record: RawRecord): DecodeResult {
  const { code, reason, envelope, ...extras } = rejection;
  const deadLetter = makeDeadLetter(
    code,
    `${formatOrigin(record.origin)}: ${reason}`,
    COMPONENT,
    record,
    extras,
  );
  return envelope === undefined
    ? { kind: "rejected", deadLetter }
    : { kind: "rejected", deadLetter, envelope };
}

function describeIssues(error: ZodError): { code: ErrorCode; message: string; issues: unknown[] } {
  let code: ErrorCode = "INVALID_EVENT";
  const issues = error.issues.map((issue) => {
    const params = (issue as { params?: Partial<CodedIssueParams> }).params;
    if (params?.trajflowCode !== undefined && code === "INVALID_EVENT") code = params.trajflowCode;
    return { code: issue.code, path: issue.path.map(String), message: issue.message };
  });
  const message = issues
    .map((i) => `${i.path.length > 0 ? i.path.join(".") : "(event)"}: ${i.message}`)
    .join("; ");
  return { code, message, issues };
}

/**
 * Decodes one raw record, a rejection left as its reason (decode workers). Never throws on bad input: a
 * failure nobody foresaw (a bug meeting a hostile event) rejects that event alone, so one line never
 * costs the valid ones. Without `schemas`, an event the fast path hands over comes back as `schema`.
 */
export function decodeOutcome(
  record: RawRecord,
  schemas: SchemaCheck | null,
  prefixes: PromptPrefixes | null = null,
): DecodeOutcome {
  if (prefixes !== null && typeof record.raw !== "string") {
    // A full prompt that continues its session's last one: only the new tokens parsed. Anything but an
    // accepted event is read again the usual way, so rejections are exactly what they always were, and so
    // is anything that throws here (nothing should; it was an INVALID_EVENT rejection). An event for the
    // zod schemas is not prepared for them here: walking its known ids cost more than reading it again.
    try {
      const read = prefixes.read(record.raw);
      if (read !== null) {
        const outcome = checkObject(read.obj, record) ?? validateEvent(read.obj, record, null, false);
        if (outcome.kind === "event") {
          prefixes.accepted(outcome.value.event, read);
          return outcome;
        }
      }
    } catch {
      // The usual way below.
    }
  }
  try {
    const parsed = parseObject(record);
    const outcome = "kind" in parsed ? parsed : validateEvent(parsed.obj, record, schemas);
    if (prefixes !== null && outcome.kind === "event") prefixes.accepted(outcome.value.event, null);
    return outcome;
  } catch (err) {
    return undecodable(err, record);
  }
}

/**
 * Finishes decoding an event a decode worker parsed and handed back (`schema`): validated with the
 * schemas from where its bytes had been parsed, never parsed again. Never throws on bad input.
 */
export function resumeOutcome(
  obj: Record<string, unknown>,
  record: RawRecord,
  schemas: SchemaCheck,
): DecodeOutcome {
  try {
    return validateEvent(obj, record, schemas);
  } catch (err) {
    return undecodable(err, record);
  }
}

function undecodable(err: unknown, record: RawRecord): DecodeOutcome {
  const message = String((err as Error)?.message ?? err).slice(0, 200);
  return reject("INVALID_EVENT", `the event could not be decoded (${message})`, record);
}

/** Bytes → a JSON object of a supported protocol version with no free-form field nested too deep. */
function parseObject(record: RawRecord): { obj: Record<string, unknown> } | DecodeOutcome {
  let text: string;
  try {
    text = typeof record.raw === "string" ? record.raw : utf8.decode(record.raw);
  } catch {
    return reject("INVALID_UTF8", "the event is not valid UTF-8", record);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    return reject("MALFORMED_JSON", `not valid JSON (${(err as Error).message})`, record);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    return reject("NOT_AN_OBJECT", "an event must be a JSON object", record);
  }
  const obj = parsed as Record<string, unknown>;
  return checkObject(obj, record) ?? { obj };
}

/** A parsed object's protocol version and nesting: a rejection, or null when they are fine. */
function checkObject(obj: Record<string, unknown>, record: RawRecord): DecodeOutcome | null {
  if (obj.v !== PROTOCOL_VERSION) {
    return obj.v === undefined
      ? reject("INVALID_EVENT", `missing protocol version "v" (expected 1)`, record, obj)
      : reject(
          "UNSUPPORTED_VERSION",
          `protocol version ${preview(obj.v)} is not supported (expected 1)`,
          record,
          obj,
        );
  }
  for (const key of FREE_FORM) {
    if (nestsDeeper(obj[key], MAX_NESTING)) {
      return reject("NESTING_TOO_DEEP", `${key} nests deeper than ${MAX_NESTING} levels`, record, obj, {
        field: key,
      });
    }
  }
  return null;
}

/** An event for the zod schemas, as a decode worker hands it back (the free-form fields' limit, plus one). */
function handOver(obj: Record<string, unknown>): DecodeOutcome {
  return { kind: "schema", obj: nestsDeeper(obj, MAX_NESTING + 1) ? null : obj };
}

/** What validateEvent says of an event it would hand over, when the caller reads such events again. */
const NOT_HANDED_OVER: DecodeOutcome = { kind: "schema", obj: null };

/**
 * A parsed object → a typed event (the fast path, else the zod schema) with its cross-field checks.
 * `handOverable` false: an event for the zod schemas is not prepared for them (the caller reads it again).
 */
function validateEvent(
  obj: Record<string, unknown>,
  record: RawRecord,
  schemas: SchemaCheck | null,
  handOverable = true,
): DecodeOutcome {
  const type = obj.type;
  if (type === "policy.update") {
    if (schemas === null) return handOverable ? handOver(obj) : NOT_HANDED_OVER;
    const control = schemas.control(obj);
    if (control.success) return { kind: "control", control: control.data, record };
    const { code, message, issues } = describeIssues(control.error);
    return reject(code, `invalid policy.update event: ${message}`, record, obj, { issues });
  }
  if (typeof type !== "string" || !(EVENT_TYPES as readonly string[]).includes(type)) {
    return reject(
      "UNKNOWN_EVENT_TYPE",
      `event type ${preview(type)} is not one of ${[...EVENT_TYPES, ...CONTROL_EVENT_TYPES].join(", ")}`,
      record,
      obj,
    );
  }
  let event = fastEvent(type as EventType, obj);
  if (event === null) {
    if (schemas === null) return handOverable ? handOver(obj) : NOT_HANDED_OVER;
    const result = schemas.event(type as EventType)(obj);
    if (!result.success) {
      const { code, message, issues } = describeIssues(result.error);
      return reject(code, `invalid ${type} event: ${message}`, record, obj, { issues });
    }
    event = result.data as GatewayEvent;
  }
  if (event.type === "request" || event.type === "response") {
    const problem = checkPromptForm(event);
    if (problem !== null) return reject("INVALID_EVENT", problem, record, obj);
  }
  if (event.type === "response" && event.logprobs !== undefined) {
    const problem = checkLogprobs(event, event.logprobs, obj);
    if (problem !== null) return reject(problem.code, problem.reason, record, obj, problem.details);
  }
  if (event.type === "response" && event.output_versions !== undefined) {
    const versions = event.output_versions.length;
    const outputs = event.output_ids.length;
    if (versions !== outputs) {
      return reject(
        "OUTPUT_VERSIONS_LENGTH_MISMATCH",
        `response of call ${event.call_id} has ${versions} output_versions for ${outputs} output ids; ` +
          `send one policy version per output id, or none`,
        record,
        obj,
        { output_versions: versions, output_ids: outputs },
      );
    }
  }
  if (event.type === "request" || event.type === "response") {
    const problem = checkRoutingLengths(event);
    if (problem !== null) return reject(problem.code, problem.reason, record, obj, problem.details);
  }
  return { kind: "event", value: { event, record, digest: digestOf(record) } };
}

/**
 * Routed experts cover at most the positions their call has: one per output id (the last may be absent:
 * it was never an input), and at most the prompt's length. All of an event's routing shares one layout.
 * A delta-form prompt's length is known only in its session: assembly checks it.
 */
function checkRoutingLengths(
  event: Extract<GatewayEvent, { type: "request" | "response" }>,
): Pick<Rejection, "code" | "reason" | "details"> | null {
  const call = `${event.type} of call ${event.call_id}`;
  const prompt = event.prompt_routed_experts;
  const output = event.type === "response" ? event.routed_experts : undefined;
  if (prompt !== undefined && output !== undefined && !sameLayout(prompt, output)) {
    return {
      code: "INVALID_ROUTED_EXPERTS",
      reason:
        `${call} has prompt_routed_experts ${describeLayout(prompt)} and routed_experts ` +
        `${describeLayout(output)}; one call's routing has one dtype, layer count and top_k`,
    };
  }
  if (output !== undefined && event.type === "response") {
    const n = event.output_ids.length;
    if (output.tokens !== n && output.tokens !== n - 1) {
      return {
        code: "ROUTED_EXPERTS_LENGTH_MISMATCH",
        reason:
          `${call} has routed_experts for ${output.tokens} tokens and ${n} output ids; ` +
          `send one per output id (or one less: the last token was never an input)`,
        details: { routed_experts: output.tokens, output_ids: n },
      };
    }
  }
  if (prompt !== undefined && event.prompt_ids !== undefined && prompt.tokens > event.prompt_ids.length) {
    return {
      code: "ROUTED_EXPERTS_LENGTH_MISMATCH",
      reason:
        `${call} has prompt_routed_experts for ${prompt.tokens} tokens and a prompt of ` +
        `${event.prompt_ids.length}; they cover the prompt's last positions, at most all of them`,
      details: { prompt_routed_experts: prompt.tokens, prompt_ids: event.prompt_ids.length },
    };
  }
  return null;
}

/** One logprob per output id, each finite (or NaN: missing) and at most MAX_LOGPROB. */
function checkLogprobs(
  event: Extract<GatewayEvent, { type: "response" }>,
  logprobs: Float32Array,
  obj: Record<string, unknown>,
): Pick<Rejection, "code" | "reason" | "details"> | null {
  const call = `response of call ${event.call_id}`;
  if (logprobs.length !== event.output_ids.length) {
    return {
      code: "LOGPROBS_LENGTH_MISMATCH",
      reason:
        `${call} has ${logprobs.length} logprobs for ${event.output_ids.length} output ids; ` +
        `send exactly one logprob per output id, or none`,
      details: { logprobs: logprobs.length, output_ids: event.output_ids.length },
    };
  }
  const bad = firstInfinite(logprobs);
  if (bad >= 0) {
    // The value as sent (a JSON -1e39 becomes -Infinity only in the float32 column).
    const sent = Array.isArray(obj.logprobs) ? (obj.logprobs[bad] as unknown) : logprobs[bad];
    return {
      code: "LOGPROBS_NOT_FINITE",
      reason: `${call} has logprob ${String(sent)} at position ${bad}; logprobs must be finite float32 values (null, or NaN packed, for a token without one)`,
      details: { position: bad },
    };
  }
  const positive = firstAbove(logprobs, MAX_LOGPROB);
  if (positive >= 0) {
    return {
      code: "INVALID_LOGPROBS",
      reason: `${call} has logprob ${logprobs[positive]} at position ${positive}; a log-probability is at most 0`,
      details: { position: positive },
    };
  }
  return null;
}

/** 2^21: an event's length modulo this and its CRC-32 make one exact integer (53 bits). */
const DIGEST_LENGTH_MODULUS = 2 ** 21;

/**
 * Identifies an event's exact bytes, to tell a redelivery from a reused seq: the CRC-32 (hardware-
 * accelerated in zlib; a cryptographic digest cost ~8% of ingest) and the length modulo 2^21, in one
 * number. Two different events of one session with the same seq, the same CRC-32 and the same length
 * modulo 2 MiB (a 1 in 2^32 chance) would be taken for a redelivery. A number, not a string: a string per
 * event cost its formatting, a structured clone to the ingest thread and a heap object per seq held for
 * the session's life (BENCHMARKS.md). A string and its UTF-8 bytes give the same digest.
 */
export function digestOf(record: RawRecord): number {
  const raw = record.raw;
  const length = typeof raw === "string" ? Buffer.byteLength(raw) : raw.length;
  return crc32(raw) * DIGEST_LENGTH_MODULUS + (length % DIGEST_LENGTH_MODULUS);
}

/** The prompt is given either in full or as parent + delta, never both; a response may omit both. */
function checkPromptForm(event: Extract<GatewayEvent, { type: "request" | "response" }>): string | null {
  const full = event.prompt_ids !== undefined;
  const hasParent = event.parent_call_id !== undefined;
  const hasDelta = event.prompt_delta_ids !== undefined;
  if (full && (hasParent || hasDelta)) {
    return `call ${event.call_id} sends both prompt_ids and the delta form; send one of them`;
  }
  if (hasParent !== hasDelta) {
    return `call ${event.call_id}: parent_call_id and prompt_delta_ids go together; one of them is missing`;
  }
  if (event.type === "request" && !full && !hasParent) {
    return `request of call ${event.call_id} has no prompt: send prompt_ids, or parent_call_id with prompt_delta_ids`;
  }
  return null;
}
