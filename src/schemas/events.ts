/**
 * Gateway event protocol v1: one JSON object per event (a JSONL line, or a Kafka message value).
 * docs/events.md is the prose version of this file; schemas/events.v1.schema.json is generated from it.
 *
 * Unknown extra fields are stripped, not rejected: gateways add fields of their own.
 */
import { z } from "zod";
import {
  CONTROL_EVENT_TYPES,
  EVENT_TYPES,
  INT32_MAX,
  LOGPROBS_MODES,
  MAX_TIME_MS,
  PROTOCOL_VERSION,
  type CodedIssueParams,
  type EventType,
} from "./event-constants.ts";
import { decodeRoutedExperts } from "./routed-experts.ts";
import { decodeLogprobs, decodeTokenIds } from "./tokens.ts";

export {
  CONTROL_EVENT_TYPES,
  EVENT_TYPES,
  INT32_MAX,
  MAX_TIME_MS,
  PROTOCOL_VERSION,
  type CodedIssueParams,
  type EventType,
};

// Token and logprob fields are built per field (each with its description) and remembered here, so the
// JSON Schema generator can describe their wire forms precisely.
const tokenFields = new WeakSet<object>();
const logprobFields = new WeakSet<object>();
const routedExpertFields = new WeakSet<object>();

/** Token ids: a JSON array of int32 ids or `{ "b64": ... }`, decoded into an Int32Array. */
export function tokenIds(description: string) {
  const schema = z
    .unknown()
    .transform((value, ctx) => {
      const decoded = decodeTokenIds(value);
      if (typeof decoded === "string") {
        const params: CodedIssueParams = { trajflowCode: "INVALID_TOKENS" };
        ctx.issues.push({ code: "custom", message: decoded, input: value, params });
        return z.NEVER;
      }
      return decoded;
    })
    .describe(description);
  tokenFields.add(schema);
  return schema;
}

/**
 * Logprobs: a JSON array of numbers or `{ "b64": ... }`, decoded into a Float32Array. A token the engine
 * gave no logprob for is `null` (packed: NaN) and decodes to NaN: kept as missing, never filled in.
 */
export function logprobValues(description: string) {
  const schema = z
    .unknown()
    .transform((value, ctx) => {
      const decoded = decodeLogprobs(value);
      if (typeof decoded === "string") {
        const params: CodedIssueParams = { trajflowCode: "INVALID_LOGPROBS" };
        ctx.issues.push({ code: "custom", message: decoded, input: value, params });
        return z.NEVER;
      }
      return decoded;
    })
    .describe(description);
  logprobFields.add(schema);
  return schema;
}

/** MoE routed experts: packed bytes with dtype and shape, decoded and range-checked (routed-experts.ts). */
export function routedExperts(description: string) {
  const schema = z
    .unknown()
    .transform((value, ctx) => {
      const decoded = decodeRoutedExperts(value);
      if ("code" in decoded) {
        const params: CodedIssueParams = { trajflowCode: decoded.code };
        ctx.issues.push({ code: "custom", message: decoded.message, input: value, params });
        return z.NEVER;
      }
      return decoded;
    })
    .describe(description);
  routedExpertFields.add(schema);
  return schema;
}

/**
 * The sampling settings of a call, for importance-sampling corrections and rescoring. Every field is
 * optional: a gateway sends what it knows, and nothing is assumed for what it does not.
 */
export const samplingSettings = z
  .object({
    temperature: z.number().nonnegative().optional().describe("0 means greedy"),
    top_p: z.number().gt(0).max(1).optional(),
    top_k: z.int().min(-1).optional().describe("-1 or 0: disabled, as engines write it"),
    min_p: z.number().min(0).max(1).optional(),
    repetition_penalty: z.number().positive().optional(),
    logprobs_mode: z
      .enum(LOGPROBS_MODES)
      .optional()
      .describe(
        "raw: logprobs of the model's distribution; processed: after temperature, penalties, top-p/k",
      ),
    engine: z.string().optional().describe("free-form: the engine and its version, e.g. vllm-0.11.0"),
  })
  .describe("the call's sampling settings, as sent to the engine");
export type SamplingSettings = z.output<typeof samplingSettings>;

const identifier = z.string().min(1);

/** An OpenAI chat message. Only role, content, tool_calls and tool_call_id are read (to tell drift from edits). */
export const chatMessage = z.looseObject({
  role: z.string().describe("system, user, assistant, tool, ..."),
  content: z.unknown().optional().describe("a string, null, or an array of content parts"),
  tool_calls: z.array(z.unknown()).optional(),
});

const int32Count = () => z.int().nonnegative().max(INT32_MAX);

const envelope = {
  v: z.literal(PROTOCOL_VERSION).describe("protocol version, always 1"),
  session_id: identifier.describe("the agent session (one rollout); unique within its uid"),
  uid: identifier.describe("the dataset prompt / GRPO group id; Kafka messages are keyed by it"),
  seq: z.int().nonnegative().describe("0,1,2,... contiguous per session, assigned by the gateway"),
  ts: z.number().nonnegative().max(MAX_TIME_MS).describe("event time, milliseconds since the Unix epoch"),
  gen: z
    .int()
    .positive()
    .optional()
    .describe(
      "the owner generation of the gateway replica that wrote it (a fleet of replicas; absent: 0): an event " +
        "whose gen is greater than the session's is a claim, which fences the older owners' later events " +
        "(docs/gateway.md#a-fleet-of-replicas)",
    ),
};

/** Fields describing a call's prompt; on `request`, or inline on a `response` that had no request event. */
const promptFields = {
  prompt_ids: tokenIds("the full prompt's token ids").optional(),
  parent_call_id: identifier
    .optional()
    .describe("delta form: the prompt is this call's prompt + its output + prompt_delta_ids"),
  prompt_delta_ids: tokenIds("delta form: tokens appended after the parent's output").optional(),
  messages: z.array(chatMessage).optional().describe("the OpenAI chat messages the prompt was rendered from"),
  tools: z.array(z.unknown()).optional().describe("the tool definitions offered to the model"),
  choice_index: z
    .int()
    .nonnegative()
    .optional()
    .describe(
      "declares a deliberate extra sample of the same prompt (best-of-N); such calls are never retries",
    ),
};

export const sessionStartEvent = z.object({
  ...envelope,
  type: z.literal("session.start"),
  sample_index: int32Count().optional().describe("this session's index within its GRPO group"),
  group_size: int32Count().positive().optional().describe("n: how many sessions (rollouts) the uid has"),
  metadata: z
    .record(z.string(), z.unknown())
    .optional()
    .describe("free-form task metadata (references, ...)"),
});

export const requestEvent = z.object({
  ...envelope,
  type: z.literal("request"),
  call_id: identifier.describe("unique within the session"),
  ...promptFields,
  api: z
    .string()
    .optional()
    .describe(
      "the API the agent called: chat, completions, messages (Anthropic) or responses (OpenAI); messages and " +
        "tools are then the canonical chat form the call was translated to",
    ),
  api_details: z
    .record(z.string(), z.unknown())
    .optional()
    .describe(
      "what the API's request said beyond the messages (Responses: response_id, store, instructions)",
    ),
  train: z
    .boolean()
    .optional()
    .describe(
      "false: recorded but never trained (a side call such as a title or a quota probe): its sampled tokens " +
        "are context wherever they appear, and a row that would train nothing else is not written",
    ),
  prompt_mode: z
    .enum(["continued", "rendered", "engine"])
    .optional()
    .describe(
      "how the gateway made the prompt in prompt mode tokens: continued (the parent branch's sampled tokens " +
        "plus the new messages rendered as a continuation), rendered (the whole conversation rendered by the " +
        "engine's template), engine (sent to the engine's chat route); absent: the engine's chat route",
    ),
  messages_offset: int32Count()
    .optional()
    .describe(
      "with parent_call_id: `messages` are the conversation's messages from this index on; the earlier ones " +
        "(and the tools) are the parent call's, followed by its answer",
    ),
  weight_version: int32Count().optional().describe("the policy version that will sample"),
  sampling: samplingSettings.optional(),
  prompt_routed_experts: routedExperts(
    "the routed experts of the prompt's last `shape[0]` positions (usually all of them), as the prefill chose them",
  ).optional(),
});

export const responseEvent = z.object({
  ...envelope,
  type: z.literal("response"),
  call_id: identifier.describe("the call this answers"),
  output_ids: tokenIds("the sampled token ids"),
  logprobs: logprobValues("one logprob per output id, of the sampled token").optional(),
  finish_reason: z.string().describe("the backend's raw finish reason: stop, length, tool_calls, abort, ..."),
  stop_reason: z
    .string()
    .optional()
    .describe(
      "the stop reason the agent was given in its API's terms (Messages: end_turn, tool_use, max_tokens...; " +
        "Responses: completed, max_output_tokens...), beside the raw finish_reason",
    ),
  malformed_tool_calls: int32Count()
    .optional()
    .describe(
      "prompt mode tokens: tool-call blocks in the output that could not be parsed; their text was given to " +
        "the agent as content",
    ),
  weight_version: int32Count().optional().describe("the policy version that sampled"),
  output_versions: tokenIds(
    "per output token, the policy version that sampled it (a rollout interrupted by a weight update and " +
      "resumed holds several); absent: every token has weight_version",
  ).optional(),
  routed_experts: routedExperts(
    "the routed experts of the output tokens, one per output id; the last may be absent (it was never an input)",
  ).optional(),
  prompt_routed_experts: routedExperts(
    "as on request; used when the request did not carry them (engines return them with the response)",
  ).optional(),
  sampling: samplingSettings.optional().describe("as on request; the request's win"),
  text: z.string().optional().describe("the decoded output text"),
  tool_calls: z.array(z.unknown()).optional().describe("tool calls parsed from the output (OpenAI format)"),
  ...promptFields,
});

export const rewardEvent = z.object({
  ...envelope,
  type: z.literal("reward"),
  value: z.number().describe("the score, a finite number"),
  target: identifier.default("session").describe('"session" (the default) or a call_id'),
  stage: identifier.default("env").describe("who scored it"),
  key: identifier.optional().describe("idempotency key: a reward with a repeated key is applied once"),
  finished: z.boolean().optional().describe("false: the episode did not finish"),
  info: z.record(z.string(), z.unknown()).optional().describe("free-form details kept for auditing"),
});

export const sessionEndEvent = z.object({
  ...envelope,
  type: z.literal("session.end"),
  status: z.enum(["ok", "aborted", "failed"]).describe("how the session ended"),
});

/**
 * A control event, not part of any session: the trainer (or gateway) announces the current policy
 * version, which the staleness filter compares rows against.
 */
export const policyUpdateEvent = z.object({
  v: envelope.v,
  type: z.literal("policy.update"),
  weight_version: int32Count().describe("the policy version now being trained/served"),
  ts: envelope.ts,
});
export type PolicyUpdateEvent = z.output<typeof policyUpdateEvent>;

/** Per-type schemas, looked up by `type` before parsing (faster than trying a union). */
export const eventSchemas = {
  "session.start": sessionStartEvent,
  request: requestEvent,
  response: responseEvent,
  reward: rewardEvent,
  "session.end": sessionEndEvent,
} as const satisfies Record<EventType, z.ZodType>;

/** The whole protocol as one discriminated union (used to generate the JSON Schema). */
export const gatewayEvent = z.discriminatedUnion("type", [
  sessionStartEvent,
  requestEvent,
  responseEvent,
  rewardEvent,
  sessionEndEvent,
]);

export type SessionStartEvent = z.output<typeof sessionStartEvent>;
export type RequestEvent = z.output<typeof requestEvent>;
export type ResponseEvent = z.output<typeof responseEvent>;
export type RewardEvent = z.output<typeof rewardEvent>;
export type SessionEndEvent = z.output<typeof sessionEndEvent>;
export type GatewayEvent = z.output<typeof gatewayEvent>;
export type ChatMessage = z.output<typeof chatMessage>;
/** The wire form of an event, before decoding (what producers write). */
export type GatewayEventInput = z.input<typeof gatewayEvent>;

/** The JSON Schema of the protocol (draft 2020-12), with token arrays described precisely. */
export function eventJsonSchema(): Record<string, unknown> {
  const tokenForm = {
    oneOf: [
      { type: "array", items: { type: "integer", minimum: 0, maximum: 2147483647 } },
      {
        type: "object",
        properties: { b64: { type: "string", description: "base64 of little-endian int32" } },
        required: ["b64"],
      },
    ],
  };
  const logprobForm = {
    oneOf: [
      {
        type: "array",
        items: { type: ["number", "null"] },
        description: "null: the engine gave no logprob for that token",
      },
      {
        type: "object",
        properties: {
          b64: {
            type: "string",
            description: "base64 of little-endian float32; NaN: no logprob for that token",
          },
        },
        required: ["b64"],
      },
    ],
  };
  const routedExpertsForm = {
    type: "object",
    properties: {
      b64: {
        type: "string",
        description: "base64 of the little-endian ids, row-major [tokens, layers, top_k]",
      },
      dtype: { enum: ["uint8", "uint16", "int16", "int32"] },
      shape: {
        type: "array",
        items: { type: "integer", minimum: 0 },
        minItems: 3,
        maxItems: 3,
        description: "[tokens, layers, top_k]",
      },
      num_experts: { type: "integer", minimum: 1, description: "optional: every id is below it" },
    },
    required: ["b64", "dtype", "shape"],
  };
  return z.toJSONSchema(z.union([gatewayEvent, policyUpdateEvent]), {
    io: "input",
    unrepresentable: "any",
    override: (ctx) => {
      if (tokenFields.has(ctx.zodSchema)) Object.assign(ctx.jsonSchema, tokenForm);
      if (logprobFields.has(ctx.zodSchema)) Object.assign(ctx.jsonSchema, logprobForm);
      if (routedExpertFields.has(ctx.zodSchema)) Object.assign(ctx.jsonSchema, routedExpertsForm);
    },
  }) as Record<string, unknown>;
}
