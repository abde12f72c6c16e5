/**
 * The gateway's settings: the `gateway` section of a pipeline file, and what `trajflow gateway`'s flags
 * build. Strict (an unknown key is a typo and fails), every field described where it is defined.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { kafkaConnectionSchema } from "../kafka/connection.ts";
import { ENGINE_NAMES } from "./engines/engine.ts";
import { ENGINE_OPTIONS } from "./engines/index.ts";
import type { ApiSettings } from "./apis/api.ts";
import { tokenProblems } from "./control-auth.ts";
import { REASONING_PARSERS, TOOL_PARSERS } from "./parsers/parser.ts";

const upstreamUrl = z
  .string()
  .url()
  .refine((u) => /^https?:\/\//.test(u), "an upstream is an http:// or https:// URL")
  .transform((u) => u.replace(/\/+$/, "").replace(/\/v1$/, ""));

export const logOutputSchema = z.strictObject({
  type: z.literal("log"),
  dir: z
    .string()
    .min(1)
    .describe(
      "Directory of the local event log (segments events-NNNNNNNN.jsonl). A call's events are fsynced " +
        "here before its answer is released; the embedded pipeline follows the log.",
    ),
  segment_bytes: z
    .int()
    .positive()
    .default(256 * 1024 * 1024)
    .describe("A segment is closed and a new one begun once it holds this many bytes."),
});

export const kafkaOutputSchema = z.strictObject({
  type: z.literal("kafka"),
  topic: z.string().min(1).describe("The topic events are produced to, keyed by uid."),
  connection: kafkaConnectionSchema,
  ack: z
    .enum(["all", "async"])
    .default("all")
    .describe(
      "all: a call's answer is released once the in-sync replicas acknowledged its events. async: the " +
        "answer is released at once and the events are sent from a bounded buffer (a crash loses what it holds).",
    ),
  async_buffer_events: z
    .int()
    .positive()
    .default(10_000)
    .describe("With ack async: events waiting to be acknowledged before new calls are refused with 503."),
  restore_window_ms: z
    .int()
    .nonnegative()
    .default(10 * 60_000)
    .describe(
      "At start, events this recent are read back from the topic to rebuild open sessions (their seq " +
        "counters and branch tips). Match the pipeline's --idle-timeout-ms: an older session is finalized there anyway.",
    ),
});

export const gatewayConfigSchema = z.strictObject({
  listen: z.string().min(1).default("127.0.0.1:8000").describe("host:port the gateway serves on."),
  replica_id: z
    .string()
    .regex(/^[A-Za-z0-9._:@-]{1,100}$/, "1-100 letters, digits and . _ : @ -")
    .optional()
    .describe(
      "Makes this gateway one replica of a fleet writing one Kafka topic behind a session-hashing proxy " +
        "(docs/gateway.md#a-fleet-of-replicas): a session it does not hold is rebuilt from the topic on its " +
        "first call and claimed (an owner generation in its events), and a call whose session another " +
        "replica took meanwhile is answered 503 session_moved. Needs output kafka with ack all.",
    ),
  upstreams: z
    .array(upstreamUrl)
    .min(1)
    .describe("Base URLs of the inference servers (a trailing /v1 is dropped). A session sticks to one."),
  upstream_api_key: z
    .string()
    .min(1)
    .optional()
    .describe(
      "Sent as Authorization: Bearer to every upstream (an engine started with --api-key). Write ${VAR} in " +
        "a pipeline file; the CLI reads $TRAJFLOW_UPSTREAM_API_KEY. Never logged; the agent's own Authorization " +
        "header is never forwarded.",
    ),
  engine: z
    .enum(ENGINE_NAMES)
    .default("vllm")
    .describe("Which engine the upstreams run: vllm, sglang or llamacpp."),
  engine_options: z
    .record(z.string(), z.unknown())
    .default({})
    .describe(
      "Options of the engine's adapter (docs/engines.md): sglang {routed_experts: {layers, top_k, dtype}}, " +
        "llamacpp {streams: whole | relay}; checked against the engine's own list.",
    ),
  output: z.discriminatedUnion("type", [logOutputSchema, kafkaOutputSchema]).describe("Where events go."),
  implicit_sessions: z
    .boolean()
    .default(true)
    .describe("A call for a session nobody started with POST /sessions starts it; false answers 404."),
  max_body_bytes: z
    .int()
    .positive()
    .default(32 * 1024 * 1024)
    .describe("Largest request body accepted; a larger one is refused with 413."),
  max_in_flight: z
    .int()
    .positive()
    .default(1024)
    .describe("Calls forwarded at once over all sessions; more are refused with 429 and Retry-After."),
  max_in_flight_per_session: z
    .int()
    .positive()
    .default(64)
    .describe("Calls of one session forwarded at once; more are refused with 429 and Retry-After."),
  max_sessions: z
    .int()
    .positive()
    .default(100_000)
    .describe(
      "Open sessions kept in memory; past it, the longest idle one is forgotten (its next call uses the full prompt form).",
    ),
  session_idle_ms: z
    .int()
    .positive()
    .default(60 * 60_000)
    .describe(
      "A session with no call for this long is forgotten (not ended; keep it above the pipeline's " +
        "--idle-timeout-ms, which finalizes it first); a later call for it is answered 409 session_expired.",
    ),
  upstream_timeout_ms: z
    .int()
    .positive()
    .default(10 * 60_000)
    .describe("Longest a call may take upstream before it is cancelled and answered 504."),
  max_tips_per_session: z
    .int()
    .positive()
    .default(8)
    .describe("Branch tips remembered per session for the delta form; older tips fall back to full prompts."),
  model: z
    .string()
    .min(1)
    .optional()
    .describe(
      "The upstream model every call is sent with, whatever the agent names (claude-sonnet-4-5, " +
        "gpt-5-codex): for an engine that checks names (vLLM, SGLang). Answers carry the agent's name. " +
        "Unset: the agent's name goes upstream as it is (llama.cpp ignores it).",
    ),
  model_map: z
    .record(z.string().min(1), z.string().min(1))
    .default({})
    .describe(
      "The upstream model for the names agents use, each key a name or a pattern with * (first match in " +
        "order; `model` covers the rest). E.g. {claude-haiku-*: Qwen/Qwen3-1.7B, '*': Qwen/Qwen3-32B}.",
    ),
  hosted_tools: z
    .enum(["refuse", "drop"])
    .default("refuse")
    .describe(
      "A hosted tool in a Messages or Responses call (web_search, code execution...), which an open model " +
        "cannot run: refuse (400 naming it) or drop it from the tools offered (counted, " +
        "gateway_hosted_tools_dropped).",
    ),
  untrained_models: z
    .array(z.string().min(1))
    .default([])
    .describe(
      "Model names (or patterns with *) whose calls are recorded with train: false, never trained: a " +
        "harness's side calls, e.g. Claude Code's small-model calls for titles (['claude-haiku-*']). A call " +
        "can also say so itself with the header X-Trajflow-Train: false.",
    ),
  control_token: z
    .string()
    .min(1)
    .optional()
    .describe(
      "The trainer's token: with it, the control routes (start, read, reward, end, delete sessions; " +
        "POST /weights) require Authorization: Bearer <token>. Write ${VAR} in a pipeline file; the CLI " +
        "reads $TRAJFLOW_CONTROL_TOKEN. Never a command-line value, never logged.",
    ),
  control_token_file: z
    .string()
    .min(1)
    .optional()
    .describe("A file whose first line is the control token (a mounted secret), instead of control_token."),
  control_listen: z
    .string()
    .min(1)
    .optional()
    .describe(
      "host:port of a listener for the control routes alone: the agents' listener then answers 404 on them, " +
        "so the network the agents see has no control routes at all.",
    ),
  prompt_mode: z
    .enum(["engine", "tokens"])
    .default("engine")
    .describe(
      "engine: each call's messages go to the engine's chat route, which renders and tokenizes the whole " +
        "history again. tokens: a call that extends a branch of its session is sent as ids, the branch's " +
        "sampled tokens plus only the new messages rendered (docs/gateway.md#prompt-modes); needs tool_parser.",
    ),
  tool_parser: z
    .enum(TOOL_PARSERS)
    .optional()
    .describe(
      "Prompt mode tokens: the model family's tool-call format the output is parsed in (vLLM's names): " +
        "hermes (Hermes, Qwen2.5, Qwen3), qwen3_coder, llama3_json, mistral, openai (gpt-oss harmony), none.",
    ),
  tokenizer_dir: z
    .string()
    .min(1)
    .optional()
    .describe(
      "Prompt mode tokens: a model directory (tokenizer.json, tokenizer_config.json with the chat template) " +
        "the gateway renders and tokenizes prompts with itself, instead of the engine's routes " +
        "(docs/gateway.md#rendering-in-the-gateway). The same files the engine serves.",
    ),
  reasoning_parser: z
    .enum(REASONING_PARSERS)
    .default("none")
    .describe("Prompt mode tokens: think reads <think>...</think> reasoning (Qwen3, DeepSeek-R1); none."),
  stored_responses: z
    .int()
    .nonnegative()
    .default(4)
    .describe(
      "OpenAI Responses kept per session (store left true) for previous_response_id and GET " +
        "/v1/responses/{id}: the latest ones; 0 keeps none. Each holds its conversation and its Response, " +
        "which repeats the request's tools: memory grows with this times the sessions held.",
    ),
});

/** A name pattern with `*` (any characters) as a regular expression matching whole names. */
export function namePattern(pattern: string): RegExp {
  const escaped = pattern.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*");
  return new RegExp(`^${escaped}$`);
}

/** What the API codecs need of the settings (apis/api.ts). */
export function apiSettings(config: GatewayConfig): ApiSettings {
  const rules = Object.entries(config.model_map).map(([k, v]) => ({ match: namePattern(k), to: v }));
  const cache = new Map<string, string>();
  return {
    upstreamModel(agentModel) {
      let to = cache.get(agentModel);
      if (to === undefined) {
        to = rules.find((r) => r.match.test(agentModel))?.to ?? config.model ?? agentModel;
        // Bounded: the codecs refuse names past 256 characters, and the cache holds 1,024 of them.
        if (cache.size < 1024) cache.set(agentModel, to);
      }
      return to;
    },
    hostedTools: config.hosted_tools,
    storedResponses: config.stored_responses,
  };
}

/**
 * Whether a call is trained: not when its X-Trajflow-Train header says false, nor when its model matches
 * `untrained_models`.
 */
export function trainRule(
  config: GatewayConfig,
): (agentModel: string | undefined, header: string | undefined) => boolean {
  const untrained = config.untrained_models.map(namePattern);
  return (agentModel, header) => {
    if (header !== undefined && /^(false|0|no)$/i.test(header.trim())) return false;
    return agentModel === undefined || !untrained.some((p) => p.test(agentModel));
  };
}
/** The gateway's config with its engine options checked against the engine's own list. */
export const checkedGatewayConfigSchema = gatewayConfigSchema.superRefine((c, ctx) => {
  if (c.control_token !== undefined) {
    for (const message of tokenProblems(c.control_token))
      ctx.addIssue({ code: "custom", message, path: ["control_token"] });
    if (c.control_token_file !== undefined)
      ctx.addIssue({
        code: "custom",
        message: "set control_token or control_token_file, not both",
        path: ["control_token_file"],
      });
  }
  if (c.control_listen !== undefined && c.control_listen === c.listen)
    ctx.addIssue({
      code: "custom",
      message: "the control listener needs an address of its own",
      path: ["control_listen"],
    });
  for (const file of ["tokenizer.json", "tokenizer_config.json"])
    if (c.tokenizer_dir !== undefined && !existsSync(join(c.tokenizer_dir, file)))
      ctx.addIssue({
        code: "custom",
        message: `${join(c.tokenizer_dir, file)} does not exist (a model directory has tokenizer.json and tokenizer_config.json)`,
        path: ["tokenizer_dir"],
      });
  if (c.tokenizer_dir !== undefined && c.prompt_mode !== "tokens")
    ctx.addIssue({
      code: "custom",
      message:
        "tokenizer_dir renders prompts for prompt_mode tokens: set prompt_mode tokens, or leave it out",
      path: ["tokenizer_dir"],
    });
  if (c.prompt_mode === "tokens") {
    if (c.tool_parser === undefined)
      ctx.addIssue({
        code: "custom",
        message: `prompt_mode tokens reads tool calls from the sampled text: set tool_parser to the model family's format (${TOOL_PARSERS.join(", ")})`,
        path: ["tool_parser"],
      });
  }
  if (c.replica_id !== undefined && (c.output.type !== "kafka" || c.output.ack !== "all"))
    ctx.addIssue({
      code: "custom",
      message:
        "a replica of a fleet writes a Kafka topic with ack all (it confirms where its events landed before it answers): set output kafka, ack all; the local event log is one process",
      path: ["replica_id"],
    });
  const checked = ENGINE_OPTIONS[c.engine].safeParse(c.engine_options);
  if (checked.success) return;
  for (const issue of checked.error.issues) {
    const keys = issue.code === "unrecognized_keys" ? issue.keys : [undefined];
    for (const key of keys)
      ctx.addIssue({
        code: "custom",
        message: key === undefined ? issue.message : `unknown option of engine ${c.engine}`,
        path: ["engine_options", ...issue.path, ...(key === undefined ? [] : [key])],
      });
  }
});

export type GatewayConfig = z.output<typeof gatewayConfigSchema>;
export type GatewayConfigInput = z.input<typeof gatewayConfigSchema>;
export type LogOutputConfig = z.output<typeof logOutputSchema>;
export type KafkaOutputConfig = z.output<typeof kafkaOutputSchema>;
