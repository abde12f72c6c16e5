/** `trajflow gateway`: the OpenAI-compatible gateway that records every call as events. */
import { resolve } from "node:path";
import { ConfigProblems } from "../../core/config.ts";
import { createLogger } from "../../core/logger.ts";
import { checkedGatewayConfigSchema, type GatewayConfig } from "../../gateway/config.ts";
import type { Plan } from "../../runtime/plan.ts";
import { isTrajflowError } from "../../core/errors.ts";
import { ExitCode, intOption, parse, takeFlagProblems, usageError } from "../args.ts";
import { embeddedPlan } from "../presets.ts";
import { runReport } from "../report.ts";
import {
  ASSEMBLE_AND_FILE_FLAGS,
  checkPolicyFlags,
  CONNECTION_FLAGS,
  CONNECTION_HELP,
  connectionOptions,
  presetOptions,
  SHAPE_FLAGS,
} from "./shared.ts";

// `--engine` names the inference engine here; the Parquet engine of the embedded pipeline's files is
// `--parquet-engine`.
const { engine: _parquetEngine, ...FILE_FLAGS } = ASSEMBLE_AND_FILE_FLAGS;

export const GATEWAY_HELP = `trajflow gateway --upstream <url> [--upstream <url>]... (--out <dir> | --topic <t>) [options]

Serves agents the OpenAI Chat Completions and Completions, Anthropic Messages and OpenAI Responses APIs
(streamed or not) in front of one or more inference servers, and records every call as protocol-v1 events:
the prompt's token ids (in the delta form when it extends an earlier call), the sampled ids, their
logprobs, the raw finish reason and the policy version. A call's answer is released only once its events
are durable. docs/gateway.md (a section per harness: Claude Code, Codex, the Agents SDKs).

The agent's base URL: http://<listen>/sessions/<session-id>/v1 (or a key from POST /sessions, or an
X-Session-Id header on /v1). Rewards: POST /sessions/<id>/reward; the end: POST /sessions/<id>/end.

Options:
  --upstream <url>          an inference server's base URL (repeat for several; a session sticks to one)
  --engine <e>              vllm (default), sglang or llamacpp: which server the upstreams run
  --listen <host:port>      where to serve agents (default 127.0.0.1:8000)
  --out <dir>               the embedded mode: record to a local event log in <dir>/_events (fsynced
                            before each answer) and write training rows to <dir> from it, in this
                            process, as \`consume\` writes a topic (exactly once, recovered on restart)
  --event-log <dir>         the event log's directory (default <out>/_events); alone (no --out): only
                            the log, for a pipeline elsewhere (trajflow run with an event_log source)
  --topic <t>               record to this Kafka topic instead, keyed by uid
${CONNECTION_HELP}
  --ack <mode>              all (default): answer once the in-sync replicas have the events;
                            async: answer at once, events sent from a bounded buffer
  --replica-id <name>       one replica of a fleet on --topic behind a session-hashing proxy: sessions
                            it does not hold are rebuilt from the topic and claimed (docs/gateway.md)
  --no-implicit-sessions    a call for a session not started with POST /sessions is answered 404
  --max-in-flight <n>       calls forwarded at once (default 1024); more are answered 429
  --max-body-bytes <n>      largest request body (default 32 MiB); larger ones are answered 413
  --upstream-timeout-ms <n> longest a call may take upstream (default 600000); past it, 504
  --max-in-flight-per-session <n>  calls of one session forwarded at once (default 64)
  --max-sessions <n>        sessions whose branch tips are kept (default 100000)
  --session-idle-ms <n>     a session with no call this long is forgotten; later calls: 409 (default 3600000)
  --restore-window-ms <n>   Kafka: events this recent are read back at start (default 600000)
  --async-buffer-events <n> Kafka --ack async: events waiting before calls are refused (default 10000)
  --segment-bytes <n>       event log: bytes per segment (default 256 MiB)
  --engine-option <k=v>     an engine adapter option (repeatable; docs/engines.md), e.g. streams=relay
                            (llamacpp), routed_experts.layers=48 (sglang)
  --model <name>            the upstream model every call is sent with, whatever the agent names
                            (claude-sonnet-4-5, gpt-5-codex); for engines that check names (vLLM, SGLang)
  --model-map <agent=up>    the upstream model for an agent's model name or pattern with * (repeatable)
  --untrained-model <name>  calls naming this model (or pattern with *) are recorded with train: false,
                            never trained: a harness's side calls (repeatable), e.g. 'claude-haiku-*'
  --hosted-tools <mode>     refuse (default): a hosted tool (web_search...) in a call is answered 400;
                            drop: it is left out of the tools offered (counted)
  --stored-responses <n>    Responses kept per session for previous_response_id (default 4)
  --prompt-mode <mode>      engine (default): the engine renders each call's whole history; tokens: a
                            call continuing a branch is sent as its sampled ids plus the new messages
  --tool-parser <name>      prompt mode tokens: the tool-call format (hermes, qwen3_coder, llama3_json,
                            mistral, openai, none)
  --reasoning-parser <name> prompt mode tokens: think (<think>...</think>) or none (default)
  --tokenizer-dir <dir>     prompt mode tokens: render and tokenize in the gateway from this model
                            directory (tokenizer.json, tokenizer_config.json), not the engine's routes
  --control-listen <host:port>  serve the control routes (sessions, rewards, ends, /weights) on this
                            address alone; the agents' listener then answers 404 on them
  --control-token-file <f>  the control token is this file's first line (or $TRAJFLOW_CONTROL_TOKEN):
                            the control routes then need Authorization: Bearer <token>
  --log-level <level>       trace, debug, info (default), warn, error, silent
  $TRAJFLOW_UPSTREAM_API_KEY  sent to every upstream as Authorization: Bearer (engines run with --api-key)
  $TRAJFLOW_CONTROL_TOKEN   the trainer's token for the control routes (never a flag; docs/gateway.md#security)
  --parquet-engine <e>      the embedded pipeline's Parquet writer (trajflow, parquet-wasm or parquetjs-lite)
  --decode-workers, --encode-workers, --max-open-sessions, --max-buffered-bytes, --max-policy-lag,
  --current-policy          the embedded pipeline's, as for consume
  --drift-policy, --idle-timeout-ms, --reward-grace-ms, --await-rewards, --max-tokens, --rewards,
  --grpo, --group-size, --group-timeout-ms, --partition-by, --format, --compression, --rows-per-file,
  --tokens-per-file, --file-age-ms, --dead-letter-dir   the embedded pipeline's, as for consume
  --max-memory <size>       size the embedded pipeline's buffers for this much memory (as for consume)
  --json                    print the embedded pipeline's final report as JSON
  -h, --help                show this help

Exit codes: 0 stopped by SIGTERM or SIGINT (calls in flight finished and recorded), 1 failed, 2 usage.
`;

const GATEWAY_FLAGS = {
  upstream: { type: "string", multiple: true },
  engine: { type: "string" },
  listen: { type: "string" },
  out: { type: "string" },
  "event-log": { type: "string" },
  topic: { type: "string" },
  ...CONNECTION_FLAGS,
  ack: { type: "string" },
  "no-implicit-sessions": { type: "boolean" },
  "max-in-flight": { type: "string" },
  "max-body-bytes": { type: "string" },
  "upstream-timeout-ms": { type: "string" },
  "max-in-flight-per-session": { type: "string" },
  "max-sessions": { type: "string" },
  "session-idle-ms": { type: "string" },
  "restore-window-ms": { type: "string" },
  "replica-id": { type: "string" },
  "async-buffer-events": { type: "string" },
  "segment-bytes": { type: "string" },
  "engine-option": { type: "string", multiple: true },
  model: { type: "string" },
  "model-map": { type: "string", multiple: true },
  "untrained-model": { type: "string", multiple: true },
  "hosted-tools": { type: "string" },
  "stored-responses": { type: "string" },
  "prompt-mode": { type: "string" },
  "tool-parser": { type: "string" },
  "reasoning-parser": { type: "string" },
  "tokenizer-dir": { type: "string" },
  "control-listen": { type: "string" },
  "control-token-file": { type: "string" },
  "log-level": { type: "string" },
  "parquet-engine": { type: "string" },
  "max-memory": { type: "string" },
  json: { type: "boolean" },
  ...SHAPE_FLAGS,
  ...FILE_FLAGS,
  help: { type: "boolean", short: "h" },
} as const;

export async function runGateway(argv: string[]): Promise<number> {
  const { values } = parse(argv, GATEWAY_FLAGS);
  if (values.help === true) {
    process.stdout.write(GATEWAY_HELP);
    return ExitCode.OK;
  }
  if (values.upstream === undefined) throw usageError("gateway needs --upstream <url>");
  if ((values.out === undefined && values["event-log"] === undefined) === (values.topic === undefined))
    throw usageError(
      "gateway needs one of --out <dir> or --event-log <dir> (a local event log) or --topic <t> (Kafka)",
    );
  const input = gatewayInput(values);
  // Every problem at once: the gateway's settings, the embedded pipeline's and the flags'.
  const problems = new ConfigProblems();
  const config = problems.check("gateway", checkedGatewayConfigSchema.safeParse(stripUndefined(input)));
  let plan: Plan | null = null;
  if (values.out !== undefined) {
    checkPolicyFlags(values);
    const { baseDir: _baseDir, ...options } = presetOptions(
      { ...values, engine: values["parquet-engine"] },
      values.grpo === true,
    );
    try {
      const logDir = (input.output as { dir: string }).dir;
      plan = embeddedPlan(logDir, intOption("decode-workers", values["decode-workers"]), {
        ...options,
        files: { ...options.files, path: values.out },
      });
    } catch (err) {
      if (!(isTrajflowError(err) && err.code === "CONFIG_INVALID")) throw err;
      for (const p of err.details.problems as string[]) problems.add(p);
    }
  }
  for (const p of takeFlagProblems()) problems.add(p);
  problems.throwIfAny();
  return serve(config!, plan, values.json === true, values["log-level"]);
}

type GatewayValues = ReturnType<typeof parse<typeof GATEWAY_FLAGS>>["values"];

/** The gateway's settings the flags give (checked by the config's schema, every problem listed). */
function gatewayInput(values: GatewayValues): Record<string, unknown> {
  const output: Record<string, unknown> =
    values.topic !== undefined
      ? {
          type: "kafka",
          topic: values.topic,
          connection: { ...connectionOptions(values), client_id: "trajflow-gateway" },
          ...(values.ack !== undefined ? { ack: values.ack } : {}),
          restore_window_ms: intOption("restore-window-ms", values["restore-window-ms"]),
          async_buffer_events: intOption("async-buffer-events", values["async-buffer-events"]),
        }
      : {
          type: "log",
          dir: resolve(values["event-log"] ?? `${values.out}/_events`),
          segment_bytes: intOption("segment-bytes", values["segment-bytes"]),
        };
  return {
    upstreams: values.upstream,
    ...(values.engine !== undefined ? { engine: values.engine } : {}),
    ...(values.listen !== undefined ? { listen: values.listen } : {}),
    ...(values["replica-id"] !== undefined ? { replica_id: values["replica-id"] } : {}),
    output,
    ...(values["no-implicit-sessions"] === true ? { implicit_sessions: false } : {}),
    max_in_flight: intOption("max-in-flight", values["max-in-flight"]),
    max_body_bytes: intOption("max-body-bytes", values["max-body-bytes"]),
    upstream_timeout_ms: intOption("upstream-timeout-ms", values["upstream-timeout-ms"]),
    max_in_flight_per_session: intOption("max-in-flight-per-session", values["max-in-flight-per-session"]),
    max_sessions: intOption("max-sessions", values["max-sessions"]),
    session_idle_ms: intOption("session-idle-ms", values["session-idle-ms"]),
    ...(values["engine-option"] !== undefined
      ? { engine_options: engineOptions(values["engine-option"]) }
      : {}),
    ...(values.model !== undefined ? { model: values.model } : {}),
    ...(values["model-map"] !== undefined ? { model_map: modelMap(values["model-map"]) } : {}),
    ...(values["untrained-model"] !== undefined ? { untrained_models: values["untrained-model"] } : {}),
    ...(values["hosted-tools"] !== undefined ? { hosted_tools: values["hosted-tools"] } : {}),
    stored_responses: intOption("stored-responses", values["stored-responses"]),
    ...(values["prompt-mode"] !== undefined ? { prompt_mode: values["prompt-mode"] } : {}),
    ...(values["tool-parser"] !== undefined ? { tool_parser: values["tool-parser"] } : {}),
    ...(values["reasoning-parser"] !== undefined ? { reasoning_parser: values["reasoning-parser"] } : {}),
    ...(values["tokenizer-dir"] !== undefined ? { tokenizer_dir: resolve(values["tokenizer-dir"]) } : {}),
    ...(values["control-listen"] !== undefined ? { control_listen: values["control-listen"] } : {}),
    ...(values["control-token-file"] !== undefined
      ? { control_token_file: resolve(values["control-token-file"]) }
      : {}),
    ...(process.env.TRAJFLOW_CONTROL_TOKEN ? { control_token: process.env.TRAJFLOW_CONTROL_TOKEN } : {}),
    // Never a flag: command lines are visible to other users of the host.
    ...(process.env.TRAJFLOW_UPSTREAM_API_KEY
      ? { upstream_api_key: process.env.TRAJFLOW_UPSTREAM_API_KEY }
      : {}),
  };
}

/**
 * Runs the gateway (and in the embedded mode the pipeline on its log) until SIGTERM or SIGINT: the
 * gateway stops taking calls and finishes those in flight, then the pipeline stops (sessions still open
 * are read again from the log at the next start).
 */
async function serve(
  config: GatewayConfig,
  plan: Plan | null,
  json: boolean,
  logLevel: string | undefined,
): Promise<number> {
  const { startGateway } = await import("../../gateway/gateway.ts");
  const { Runtime } = await import("../../runtime/runtime.ts");
  const logger = createLogger({ level: logLevel });
  let stopPipeline!: () => void;
  const pipelineStop = new Promise<void>((r) => (stopPipeline = r));
  const runtime =
    plan === null ? null : new Runtime(plan, { logger, baseDir: process.cwd(), stopSignal: pipelineStop });
  const gateway = await startGateway(
    config,
    logger,
    runtime?.metrics,
    runtime === null ? undefined : (uid, sessionId) => runtime.sessionFinalized(uid, sessionId),
  );
  process.stdout.write(
    `trajflow gateway: serving on http://${gateway.address} (events to ${gateway.output.where})\n`,
  );
  const signalled = new Promise<void>((resolveStop) => {
    process.once("SIGTERM", () => resolveStop());
    process.once("SIGINT", () => resolveStop());
  });
  const pipeline = runtime?.run() ?? null;
  pipeline?.catch(() => {});
  try {
    // A failed pipeline stops the gateway too: calls would be recorded that no pipeline writes.
    await Promise.race([signalled, pipeline ?? new Promise(() => {})]);
  } finally {
    logger.info("Stopping: calls in flight finish and their events are recorded.");
    await gateway.close();
    stopPipeline();
  }
  if (pipeline !== null) process.stdout.write(runReport("gateway", await pipeline, json));
  return ExitCode.OK;
}

/** `--engine-option key=value` (a dotted key sets a nested option; the value is YAML-ish: numbers, true). */
function engineOptions(pairs: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const pair of pairs) {
    const at = pair.indexOf("=");
    if (at <= 0) throw usageError(`--engine-option takes key=value, got ${JSON.stringify(pair)}`);
    const keys = pair.slice(0, at).split(".");
    const raw = pair.slice(at + 1);
    const value = /^-?\d+(\.\d+)?$/.test(raw)
      ? Number(raw)
      : raw === "true"
        ? true
        : raw === "false"
          ? false
          : raw;
    let node = out;
    for (const k of keys.slice(0, -1)) node = (node[k] ??= {}) as Record<string, unknown>;
    node[keys.at(-1)!] = value;
  }
  return out;
}

/** `--model-map agent=upstream` pairs (the agent's side may hold * patterns), in the order given. */
function modelMap(pairs: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const at = pair.lastIndexOf("=");
    if (at <= 0 || at === pair.length - 1)
      throw usageError(`--model-map takes agent-model=upstream-model, got ${JSON.stringify(pair)}`);
    out[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return out;
}

function stripUndefined(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}
