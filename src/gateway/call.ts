/**
 * One model call through the gateway: its canonical body (the agent's API translated, apis/) sent to the
 * session's upstream with what the engine needs to report token ids and logprobs, answered (whole, or
 * streamed chunk by chunk as it arrives, in the agent's API), and recorded as events. The answer, or a
 * stream's last events, are released only once the events are durable. A streamed call the agent leaves
 * early cancels the upstream request and is recorded with the output sampled so far and finish reason
 * `abort`. Nothing here knows which API the agent speaks: the call's codec (ApiCall) writes its bytes.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { isTrajflowError } from "../core/errors.ts";
import type { Logger } from "../core/logger.ts";
import type { Metrics } from "../core/metrics.ts";
import type { ApiCall, ApiStream, CallOutcome } from "./apis/api.ts";
import { asksTokenIds, withTokenIds } from "./apis/token-ids.ts";
import { wholeAsChunks } from "./apis/whole-as-chunks.ts";
import { callEvents, samplingOf, type RecordedCall } from "./call-events.ts";
import type { Capture, EngineAdapter, PreparedCall, UpstreamJson } from "./engines/engine.ts";
import { contextOverflow, engineMessage } from "./engine-errors.ts";
import { unrecordedMessage } from "./engines/engine-hint.ts";
import { withholdMoved } from "./fleet.ts";
import { sendError, sendJson, SseSplitter } from "./http.ts";
import type { Recorder } from "./recorder.ts";
import type { TokenPrompts } from "./continuation/token-adapter.ts";
import type { GatewaySession } from "./sessions.ts";
import { ConnectFailed, readAll, UpstreamRefused, type Upstream, type UpstreamPool } from "./upstreams.ts";

/** What a call needs from the gateway around it. */
export interface CallContext {
  adapter: EngineAdapter;
  pool: UpstreamPool;
  recorder: Recorder;
  metrics: Metrics;
  logger: Logger;
  upstreamTimeoutMs: number;
  /** The policy version now (the last POST /weights), or undefined when no trainer told the gateway. */
  version(): number | undefined;
  /** A fresh call id, unique across the gateway's restarts. */
  nextCallId(): string;
  /** Prompt mode tokens: the adapter a session's calls go through (continuation/token-adapter.ts). */
  tokenPrompts?: TokenPrompts;
}

const ADDED_BUCKETS = [0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

/** How a call is recorded beyond what its codec says. */
export interface CallOptions {
  /** False: recorded but never trained (a side call: a title, a quota probe). */
  train: boolean;
}

/** Forwards one agent call of session `s`, translated by its API's codec into `api.body`. */
export async function forwardCall(
  gateway: CallContext,
  s: GatewaySession,
  api: ApiCall,
  res: ServerResponse,
  options: CallOptions,
): Promise<void> {
  const body = api.body;
  const ctx = gateway.tokenPrompts ? { ...gateway, adapter: gateway.tokenPrompts.adapterFor(s) } : gateway;
  const began = performance.now();
  const controller = new AbortController();
  const deadline = AbortSignal.timeout(ctx.upstreamTimeoutMs);
  const signal = AbortSignal.any([controller.signal, deadline]);
  // An agent that leaves cancels the upstream call (a stream records what was sampled so far).
  let gone = false;
  res.once("close", () => {
    if (!res.writableFinished) {
      gone = true;
      controller.abort();
    }
  });
  const dispatchVersion = ctx.version();
  const callId = ctx.nextCallId();
  const details = api.details(callId);
  const call: PendingCall = {
    callId,
    sentAt: Date.now(),
    api: api.api,
    ...(details !== undefined ? { apiDetails: details } : {}),
    ...(options.train ? {} : { train: false }),
    ...(Array.isArray(body.messages) ? { messages: body.messages } : {}),
    ...(Array.isArray(body.tools) ? { tools: body.tools } : {}),
    sampling: samplingOf(body, ctx.adapter.name),
    ...(dispatchVersion !== undefined ? { dispatchVersion } : {}),
  };
  let sent: Sent | null;
  try {
    sent = await sendUpstream(ctx, s, api, signal, res);
  } catch (err) {
    return upstreamFailure(ctx, s, res, err, deadline.aborted, gone);
  }
  if (sent === null) return;
  const { prepared, answer, upstream } = sent;
  try {
    const status = answer.statusCode ?? 502;
    if (status >= 400) return await passError(ctx, s, api, answer, res);
    const streamed = (answer.headers["content-type"] ?? "").includes("text/event-stream");
    const timing = { began, sendStart: sent.sendStart, upstreamMs: 0, ackMs: 0 };
    const exchange: Exchange = { ctx, s, api, prepared, call, answer, res, upstream, timing };
    if (streamed) await relayStream(exchange, () => gone);
    else await relayWhole(exchange);
    const added = performance.now() - timing.began - timing.upstreamMs - timing.ackMs;
    ctx.metrics.observe("gateway_added_seconds", Math.max(0, added) / 1000, ADDED_BUCKETS);
    ctx.metrics.observe("gateway_upstream_seconds", timing.upstreamMs / 1000);
  } catch (err) {
    upstreamFailure(ctx, s, res, err, deadline.aborted, gone);
  } finally {
    upstream.inFlight--;
  }
}

/** A call's recorded fields before its answer: what the request event says. */
type PendingCall = Omit<RecordedCall, "prompt" | "capture" | "doneAt">;

/** Everything answering one call needs. */
interface Exchange {
  ctx: CallContext;
  s: GatewaySession;
  api: ApiCall;
  prepared: PreparedCall;
  call: PendingCall;
  answer: IncomingMessage;
  res: ServerResponse;
  upstream: Upstream;
  timing: Timing;
}

/** A call on its way: what was sent, where, when, and the answer's head. */
interface Sent {
  prepared: PreparedCall;
  answer: IncomingMessage;
  /** Counted in its `inFlight` until the caller is done with the answer. */
  upstream: Upstream;
  /** From here to the answer's last byte is the upstream's time (the engine's whole work). */
  sendStart: number;
}

/**
 * Sends the call to the session's upstream, or on to another when one refuses the connection before any
 * byte (nothing was sampled). Null when it answered the agent itself (no upstream, the engine refused an
 * adapter's round trip); throws what failed otherwise.
 */
async function sendUpstream(
  ctx: CallContext,
  s: GatewaySession,
  api: ApiCall,
  signal: AbortSignal,
  res: ServerResponse,
): Promise<Sent | null> {
  let upstream = stickyUpstream(ctx.pool, s);
  const tried = new Set<number>();
  while (upstream !== null) {
    upstream.inFlight++;
    try {
      const up = upstream;
      const json: UpstreamJson = (path, payload, sig) => ctx.pool.json(up, path, payload, sig);
      const prepared = await ctx.adapter.prepare(api.route, api.body, json, signal);
      const sendStart = performance.now();
      const answer = await ctx.pool.send(
        upstream,
        "POST",
        prepared.path,
        Buffer.from(JSON.stringify(prepared.body)),
        {
          "content-type": "application/json",
          accept: prepared.body.stream === true ? "text/event-stream" : "application/json",
        },
        signal,
      );
      return { prepared, answer, upstream, sendStart };
    } catch (err) {
      upstream.inFlight--;
      if (err instanceof UpstreamRefused) {
        passRefusal(ctx, s, api, res, err);
        return null;
      }
      if (!(err instanceof ConnectFailed)) throw err;
      tried.add(upstream.index);
      upstream = ctx.pool.pick(tried);
      if (upstream !== null) {
        ctx.metrics.inc("gateway_upstream_retries");
        s.upstream = upstream.index;
      }
    }
  }
  refuseNoUpstream(ctx, res);
  return null;
}

function stickyUpstream(pool: UpstreamPool, s: GatewaySession): Upstream | null {
  const current = s.upstream >= 0 ? pool.upstreams[s.upstream] : undefined;
  if (current !== undefined && current.healthy) return current;
  const picked = pool.pick();
  if (picked !== null) s.upstream = picked.index;
  return picked;
}

function refuseNoUpstream(ctx: CallContext, res: ServerResponse): void {
  ctx.metrics.inc("gateway_calls", "no_upstream");
  sendError(res, 503, "no_upstream", "no inference server answers; retry shortly", { "retry-after": "1" });
}

function upstreamFailure(
  ctx: CallContext,
  s: GatewaySession,
  res: ServerResponse,
  err: unknown,
  timedOut: boolean,
  gone = false,
): void {
  if (gone) {
    // The agent left before a whole answer came: the engine's call was cancelled, nothing was recorded.
    ctx.metrics.inc("gateway_client_disconnects");
    ctx.metrics.inc("gateway_calls", "client_gone");
    return;
  }
  s.failedCalls++;
  if (isTrajflowError(err) && err.code === "SESSION_MOVED") {
    ctx.metrics.inc("gateway_calls", "session_moved");
    return withholdMoved(res, err);
  }
  if (isTrajflowError(err) && err.code === "EVENT_OUTPUT_FAILED") {
    // The engine answered but its events could not be made durable: the agent must not use the answer.
    ctx.metrics.inc("gateway_calls", "output_unavailable");
    if (!res.headersSent)
      sendError(res, 503, "output_unavailable", `the call could not be recorded: ${err.message}`, {
        "retry-after": "1",
      });
    ctx.logger.warn(
      { session_id: s.id, err: err.message },
      "A call's events could not be recorded; its answer was withheld.",
    );
    return;
  }
  const timeout = timedOut;
  if (!res.headersSent) {
    ctx.metrics.inc("gateway_calls", timeout ? "upstream_timeout" : "upstream_error");
    if (timeout) sendError(res, 504, "upstream_timeout", "the inference server did not answer in time");
    else sendError(res, 502, "upstream_failed", `the inference server failed: ${(err as Error).message}`);
  } else if (!res.writableEnded) res.destroy(err as Error);
  ctx.logger.warn(
    { session_id: s.id, err: (err as Error).message },
    "A call failed upstream; nothing was recorded.",
  );
}

/**
 * An engine's error answer: to a Chat or Completions agent as it is (it speaks the engine's API), to any
 * other in its own API's shape with the engine's message. Nothing was sampled, so nothing is recorded.
 */
async function passError(
  ctx: CallContext,
  s: GatewaySession,
  api: ApiCall,
  answer: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const body = await readAll(answer);
  const contentType = answer.headers["content-type"] ?? "application/json";
  passRefusal(ctx, s, api, res, new UpstreamRefused(answer.statusCode ?? 502, contentType, body));
}

function passRefusal(
  ctx: CallContext,
  s: GatewaySession,
  api: ApiCall,
  res: ServerResponse,
  refused: UpstreamRefused,
): void {
  s.failedCalls++;
  ctx.metrics.inc("gateway_calls", "upstream_error");
  if (!api.passesEngineErrors) {
    const said = engineMessage(refused.body);
    // A prompt past the engine's context: in the words the harnesses act on (Claude Code compacts on
    // "prompt is too long"; Responses clients read context_length_exceeded).
    if (refused.status === 400 && contextOverflow(refused.body, said))
      return sendError(res, 400, "context_length_exceeded", `prompt is too long: ${said}`);
    return sendError(
      res,
      refused.status,
      "upstream_failed",
      `the inference server refused the call (${refused.status}): ${said}`,
    );
  }
  res.writeHead(refused.status, {
    "content-type": refused.contentType,
    "content-length": String(refused.body.length),
  });
  res.end(refused.body);
}

interface Timing {
  began: number;
  sendStart: number;
  upstreamMs: number;
  ackMs: number;
}

async function relayWhole(x: Exchange): Promise<void> {
  const { ctx, s, api, prepared, res, timing } = x;
  // The agent may leave while the whole answer is prepared: the upstream call is cancelled then.
  const text = await readAll(x.answer);
  timing.upstreamMs = performance.now() - timing.sendStart;
  const json = JSON.parse(text.toString("utf8")) as Record<string, unknown>;
  const answered = ctx.adapter.answer(prepared, json);
  const { captures } = answered;
  await ctx.adapter.complete?.(prepared, captures, (path, payload, sig) =>
    ctx.pool.json(x.upstream, path, payload, sig),
  );
  // The agent asked for vLLM's token ids: it gets them whatever the engine and prompt mode (token-ids.ts).
  const forAgent = asksTokenIds(api.body)
    ? withTokenIds(api.route, answered.forAgent, captures, prepared.promptIds)
    : answered.forAgent;
  const ackStart = performance.now();
  const outcome = await record(x, captures);
  timing.ackMs = performance.now() - ackStart;
  if (outcome === null) return refuseUnrecorded(ctx, res, json);
  const headers = { "x-trajflow-call-id": outcome.callIds.join(","), "x-trajflow-session-id": s.id };
  if (prepared.wholeAsStream === true) {
    // The engine could not stream exact ids: the whole answer goes through the API's stream translator.
    const options = api.body.stream_options as { include_usage?: unknown } | undefined;
    const stream = api.streamer(x.call.callId);
    const parts = wholeAsChunks(api.route, forAgent, options?.include_usage === true).map(
      (c) => stream.chunk(c).text,
    );
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", ...headers });
    res.end(parts.join("") + stream.end(outcome, true));
    return;
  }
  const answer = api.answer(forAgent, outcome);
  sendJson(res, answer.status, answer.body, headers);
}

async function relayStream(x: Exchange, gone: () => boolean): Promise<void> {
  const { ctx, s, prepared, res, timing } = x;
  const reader = ctx.adapter.stream(prepared);
  const stream = x.api.streamer(x.call.callId);
  res.writeHead(200, {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "x-trajflow-call-id": x.call.callId,
    "x-trajflow-session-id": s.id,
  });
  const { held, finished, broken } = await pumpStream(reader, stream, x.answer, res, gone);
  const left = gone();
  timing.upstreamMs = performance.now() - timing.sendStart;
  if (left) ctx.metrics.inc("gateway_client_disconnects");
  const captures = reader.captures(finished && !left && broken === null);
  await ctx.adapter.complete?.(prepared, captures, (path, payload, sig) =>
    ctx.pool.json(x.upstream, path, payload, sig),
  );
  const ackStart = performance.now();
  let outcome: CallOutcome | null;
  try {
    outcome = await record(x, captures);
  } catch (err) {
    // The answer was not recorded (or the session moved): the agent must not take it as given.
    if (!left && !res.writableEnded && !(isTrajflowError(err) && err.code === "SESSION_MOVED"))
      res.end(stream.error("output_unavailable", (err as Error).message));
    throw err;
  }
  timing.ackMs = performance.now() - ackStart;
  if (left || res.writableEnded) return;
  if (outcome === null) {
    s.failedCalls++;
    ctx.metrics.inc("gateway_calls", "not_recorded");
    const message =
      "the engine's stream did not report every sampled id (or the prompt's), so the call was not recorded; see docs/engines.md";
    res.end(stream.error("not_recorded", message));
    return;
  }
  if (broken !== null) {
    res.destroy(broken as Error);
    return;
  }
  res.end(held.join("") + stream.end(outcome, finished));
}

/**
 * Relays the upstream's chunks to the agent as they come, through the adapter's reader and the API's
 * translator. From the first chunk that finishes a choice on, what the translator writes is held: the
 * agent acts on a finished answer only once it is recorded. `broken`: the upstream failed mid-stream (an
 * agent leaving is not a failure).
 */
async function pumpStream(
  reader: ReturnType<EngineAdapter["stream"]>,
  stream: ApiStream,
  answer: IncomingMessage,
  res: ServerResponse,
  gone: () => boolean,
): Promise<{ held: string[]; finished: boolean; broken: unknown }> {
  const splitter = new SseSplitter();
  const held: string[] = [];
  let holding = false;
  let finished = false;
  const take = (raw: Buffer, data: string | null, atEnd: boolean) => {
    const out = relayEvent(reader, stream, raw, data);
    if (out === null) return;
    if (out.done) finished = true;
    // Set before anything is skipped: a finishing chunk that writes nothing still starts the hold.
    if (out.finishes) holding = true;
    if (out.text === "") return;
    if (holding || atEnd) held.push(out.text);
    else res.write(out.text);
  };
  try {
    for await (const chunk of answer as AsyncIterable<Buffer>) {
      for (const ev of splitter.push(chunk)) take(ev.raw, ev.data, false);
    }
    for (const ev of splitter.end()) take(ev.raw, ev.data, true);
  } catch (err) {
    return { held, finished, broken: gone() ? null : err };
  }
  return { held, finished, broken: null };
}

/** One SSE event through the adapter's reader and the API's translator; null: nothing to forward. */
function relayEvent(
  reader: ReturnType<EngineAdapter["stream"]>,
  stream: ApiStream,
  raw: Buffer,
  data: string | null,
): { text: string; finishes: boolean; done: boolean } | null {
  const other = () => ({ text: stream.other(raw.toString("utf8")), finishes: false, done: false });
  if (data === null) return other();
  if (data.trim() === "[DONE]") return { text: "", finishes: true, done: true };
  let parsed: unknown;
  try {
    parsed = JSON.parse(data);
  } catch {
    return other();
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return other();
  const out = reader.chunk(parsed as Record<string, unknown>);
  if (out === undefined) return null;
  return { ...stream.chunk(out), done: false };
}

/**
 * Records the call's captures (one call per choice); resolves with the outcome once durable, or null when
 * the engine gave no prompt ids (nothing can be trained from such a call: counted, answered 502).
 */
async function record(x: Exchange, captures: Capture[]): Promise<CallOutcome | null> {
  const { ctx, s, prepared, call, api } = x;
  const doneAt = Date.now();
  const completionVersion = ctx.version();
  const calls: RecordedCall[] = [];
  for (const c of captures) {
    const prompt = c.promptIds ?? prepared.promptIds;
    // Without the prompt's ids, or with sampled ids the engine never reported, nothing exact can be
    // recorded: the call is refused (counted) rather than recorded with guessed tokens.
    if (prompt === undefined || c.missingIds !== undefined) return null;
    const stopReason = api.stopReason(c);
    calls.push({
      ...call,
      callId: captures.length > 1 ? `${call.callId}.${c.choiceIndex}` : call.callId,
      ...(captures.length > 1 ? { choiceIndex: c.choiceIndex } : {}),
      prompt,
      capture: c,
      doneAt,
      ...(stopReason !== undefined ? { stopReason } : {}),
      ...(completionVersion !== undefined ? { completionVersion } : {}),
      ...(prepared.continuation !== undefined ? { continuation: prepared.continuation } : {}),
    });
  }
  if (calls.length === 0) return null;
  await ctx.recorder.record(s, () => {
    const records = [];
    for (const c of calls) {
      const events = callEvents(s, c);
      records.push(...events.records);
      ctx.metrics.inc("gateway_sampled_tokens", "", c.capture.outputIds.length);
      if (events.missingLogprobs > 0) ctx.metrics.inc("gateway_missing_logprobs", "", events.missingLogprobs);
      if (events.delta) ctx.metrics.inc("gateway_delta_prompts");
    }
    return { records };
  });
  ctx.metrics.inc("gateway_calls", "recorded");
  if (call.train === false) ctx.metrics.inc("gateway_untrained_calls", "", calls.length);
  return {
    callIds: calls.map((c) => c.callId),
    captures: calls.map((c) => c.capture),
    promptLengths: calls.map((c) => c.prompt.length),
  };
}

function refuseUnrecorded(ctx: CallContext, res: ServerResponse, answer: unknown): void {
  ctx.metrics.inc("gateway_calls", "not_recorded");
  sendError(res, 502, "not_recorded", unrecordedMessage(ctx.adapter.name, answer, ctx.logger));
}
