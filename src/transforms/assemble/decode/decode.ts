/**
 * Decoding with the whole protocol: decode-core.ts's fast path and checks, and events.ts's zod schemas
 * for what the fast path hands over. Every thread but a decode worker decodes through here.
 */
import type { RawRecord } from "../../../core/records.ts";
import { eventSchemas, policyUpdateEvent } from "../../../schemas/events.ts";
import {
  decodeOutcome,
  rejectedResult,
  resumeOutcome,
  type DecodeOutcome,
  type DecodeResult,
  type SchemaCheck,
} from "./decode-core.ts";
import { PromptPrefixes } from "./prompt-prefix.ts";

export {
  COMPONENT,
  MAX_LOGPROB,
  MAX_NESTING,
  rejectedResult,
  type DecodedEvent,
  type DecodeOutcome,
  type DecodeResult,
  type Rejection,
  type RejectedEnvelope,
} from "./decode-core.ts";

const SCHEMAS: SchemaCheck = {
  control: (obj) => policyUpdateEvent.safeParse(obj),
  event: (type) => (obj) => eventSchemas[type].safeParse(obj),
};

/** Sessions' last long prompts, for events decoded on this thread (prompt-prefix.ts). */
const PREFIXES = new PromptPrefixes();

/**
 * Decodes one raw record. Never throws on bad input: a failure nobody foresaw (a bug meeting a hostile
 * event) rejects that event alone, so one line never costs the valid ones.
 */
export function decodeEvent(record: RawRecord): DecodeResult {
  return result(decodeOutcome(record, SCHEMAS, PREFIXES), record);
}

/**
 * Finishes an event a decode worker parsed and handed back for the zod schemas (which workers do not
 * load): validated here, not decoded again.
 */
export function finishDecode(obj: Record<string, unknown>, record: RawRecord): DecodeResult {
  return result(resumeOutcome(obj, record, SCHEMAS), record);
}

function result(outcome: DecodeOutcome, record: RawRecord): DecodeResult {
  if (outcome.kind === "rejection") return rejectedResult(outcome.rejection, record);
  if (outcome.kind === "schema") throw new Error("unreachable: the schemas were given");
  return outcome;
}
