/**
 * `http`: remote GPU-backed scorers.
 * - `kserve`: the KServe v2 / Triton inference protocol (`POST {url}/v2/models/{model}/infer`) with int64
 *   `input_ids` / `attention_mask` tensors, a batch per request, logits mapped to a score.
 * - `vllm_classify`: vLLM's classification endpoint (`POST {url}/classify`, also served by SGLang at
 *   `/v1/classify`) with token-id inputs, a batch per request; the score is the probability of a class.
 * - `openai_judge`: an OpenAI-compatible chat endpoint judging the final answer with a rubric prompt; the
 *   score is parsed from the reply (one request per item, concurrently).
 * Connections are reused (fetch keeps them alive), each request has the runner's timeout, 5xx and network
 * errors are retryable and 4xx are not, and requests are rate limited.
 */
import { z } from "zod";
import { headerSecrets, redactor, urlSecrets } from "../../../core/redact.ts";
import {
  RewardStageError,
  type RewardItem,
  type RewardOutcome,
  type RewardStage,
  type RewardStageType,
} from "../contract.ts";
import { sequenceOf } from "./onnx/stage.ts";

const scoreSchema = z
  .strictObject({
    kind: z.enum(["identity", "sigmoid", "softmax"]).default("identity"),
    class: z.int().nonnegative().default(0),
  })
  .default({ kind: "identity", class: 0 })
  .describe("kserve: how the output logits become a score (as for the onnx stage).");

export const httpStageOptionsSchema = z.strictObject({
  protocol: z.enum(["kserve", "vllm_classify", "openai_judge"]).describe("The server's protocol."),
  path: z
    .string()
    .optional()
    .describe("vllm_classify: the endpoint path (default /classify; SGLang serves /v1/classify)."),
  url: z.url().describe("Base URL of the server, e.g. http://rm:8000."),
  model: z.string().min(1).describe("Model name (kserve: in the path; openai_judge: the `model` field)."),
  headers: z
    .record(z.string(), z.string())
    .default({})
    .describe("Extra request headers (e.g. authorization); values are never logged."),
  max_requests_per_second: z.number().positive().optional().describe("Rate limit of requests to the server."),
  // kserve
  output: z.string().default("logits").describe("kserve: the output tensor holding [batch, classes] logits."),
  max_length: z
    .int()
    .positive()
    .default(4_096)
    .describe("kserve: tokens per sequence at most (left-truncated)."),
  score: scoreSchema,
  // openai_judge
  rubric: z
    .string()
    .default(
      "You grade an assistant's final answer against a reference. Reply with a line `SCORE: <number between 0 and 1>`.",
    )
    .describe("openai_judge: the system prompt."),
  prompt: z
    .string()
    .default("Reference answer:\n{reference}\n\nAssistant's final answer:\n{response}")
    .describe("openai_judge: the user message; {response} and {reference} are replaced."),
  reference_key: z.string().default("answer").describe("openai_judge: metadata key of the reference."),
  score_pattern: z
    .string()
    .default("SCORE:\\s*(-?\\d+(?:\\.\\d+)?)")
    .describe("openai_judge: regex whose first group is the score in the reply."),
  max_tokens: z.int().positive().default(64).describe("openai_judge: max_tokens of the judge's reply."),
});
export type HttpStageOptions = z.output<typeof httpStageOptionsSchema>;

/** A token bucket: `take` waits until a request may go. */
class RateLimit {
  private next = 0;
  private readonly interval: number;
  constructor(perSecond: number) {
    this.interval = 1000 / perSecond;
  }
  async take(): Promise<void> {
    const now = performance.now();
    const at = Math.max(now, this.next);
    this.next = at + this.interval;
    if (at > now) await new Promise((r) => setTimeout(r, at - now));
  }
}

/**
 * The first 200 characters of a server's text, for a message: redacted first, then cut, so a secret the
 * cut runs through cannot leave in part (it did: 14 of a 43-character token).
 */
function redactedHead(redact: (text: string) => string, text: string): string {
  return redact(text).slice(0, 200);
}

async function post(
  url: string,
  body: unknown,
  headers: Record<string, string>,
  signal: AbortSignal,
  redact: (text: string) => string,
) {
  let response: Response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
      signal,
    });
  } catch (err) {
    throw new RewardStageError(redact(`${url}: ${(err as Error).message}`), true);
  }
  const text = await response.text();
  if (!response.ok) {
    throw new RewardStageError(
      `${redact(url)} answered ${response.status}: ${redactedHead(redact, text)}`,
      response.status >= 500,
    );
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new RewardStageError(
      `${redact(url)} answered with invalid JSON: ${redactedHead(redact, text)}`,
      false,
    );
  }
}

function mapScore(logits: ArrayLike<number>, row: number, classes: number, score: HttpStageOptions["score"]) {
  const x = logits[row * classes + score.class]!;
  if (score.kind === "identity") return x;
  if (score.kind === "sigmoid") return 1 / (1 + Math.exp(-x));
  let max = -Infinity;
  for (let k = 0; k < classes; k++) max = Math.max(max, logits[row * classes + k]!);
  let sum = 0;
  for (let k = 0; k < classes; k++) sum += Math.exp(logits[row * classes + k]! - max);
  return Math.exp(x - max) / sum;
}

export function httpStage(options: HttpStageOptions): RewardStage {
  const limit =
    options.max_requests_per_second === undefined ? null : new RateLimit(options.max_requests_per_second);
  const base = options.url.replace(/\/+$/, "");
  // Error messages reach logs, dead letters and reward_info: no credential may ride along.
  const redact = redactor([...headerSecrets(options.headers), ...urlSecrets(options.url)]);

  const kserve = async (items: readonly RewardItem[], signal: AbortSignal): Promise<RewardOutcome[]> => {
    const sequences = items.map((i) => {
      const s = sequenceOf(i);
      return s.length > options.max_length ? s.subarray(s.length - options.max_length) : s;
    });
    const width = Math.max(1, ...sequences.map((s) => s.length));
    const ids = new Array<number>(items.length * width).fill(0);
    const mask = new Array<number>(items.length * width).fill(0);
    sequences.forEach((s, i) => {
      for (let t = 0; t < s.length; t++) {
        ids[i * width + t] = s[t]!;
        mask[i * width + t] = 1;
      }
    });
    await limit?.take();
    const reply = (await post(
      `${base}/v2/models/${encodeURIComponent(options.model)}/infer`,
      {
        inputs: [
          { name: "input_ids", shape: [items.length, width], datatype: "INT64", data: ids },
          { name: "attention_mask", shape: [items.length, width], datatype: "INT64", data: mask },
        ],
        outputs: [{ name: options.output }],
      },
      options.headers,
      signal,
      redact,
    )) as { outputs?: Array<{ name: string; shape: number[]; data: number[] }> };
    const out = reply.outputs?.find((o) => o.name === options.output);
    if (out === undefined)
      throw new RewardStageError(`the reply has no output named ${options.output}`, false);
    const classes = out.shape[out.shape.length - 1] ?? 1;
    return items.map((_, i) => ({ kind: "score", score: mapScore(out.data, i, classes, options.score) }));
  };

  const classify = async (items: readonly RewardItem[], signal: AbortSignal): Promise<RewardOutcome[]> => {
    const input = items.map((i) => {
      const s = sequenceOf(i);
      return Array.from(s.length > options.max_length ? s.subarray(s.length - options.max_length) : s);
    });
    await limit?.take();
    const reply = (await post(
      `${base}${options.path ?? "/classify"}`,
      { model: options.model, input },
      options.headers,
      signal,
      redact,
    )) as { data?: Array<{ index: number; probs: number[] }> };
    const data = reply.data;
    if (!Array.isArray(data) || data.length !== items.length) {
      throw new RewardStageError(
        `the reply has ${data?.length ?? "no"} results for ${items.length} inputs`,
        false,
      );
    }
    const byIndex = [...data].sort((a, b) => a.index - b.index);
    return byIndex.map((d) => {
      const p = d.probs[options.score.class];
      return p === undefined
        ? { kind: "error", message: `no class ${options.score.class} in ${d.probs.length} probabilities` }
        : { kind: "score", score: p };
    });
  };

  const pattern = new RegExp(options.score_pattern);
  const judgeOne = async (item: RewardItem, signal: AbortSignal): Promise<RewardOutcome> => {
    if (item.final_text === null) return { kind: "skip", reason: "the session's last turn has no text" };
    const reference =
      item.metadata !== null && Object.hasOwn(item.metadata, options.reference_key)
        ? item.metadata[options.reference_key]
        : undefined;
    const content = fillTemplate(options.prompt, {
      response: item.final_text,
      reference: reference === undefined ? "(none)" : String(reference),
    });
    await limit?.take();
    const reply = (await post(
      `${base}/v1/chat/completions`,
      {
        model: options.model,
        temperature: 0,
        max_tokens: options.max_tokens,
        messages: [
          { role: "system", content: options.rubric },
          { role: "user", content },
        ],
      },
      options.headers,
      signal,
      redact,
    )) as { choices?: Array<{ message?: { content?: string } }> };
    const text = reply.choices?.[0]?.message?.content ?? "";
    const m = pattern.exec(text);
    if (m === null)
      return {
        kind: "error",
        message: `no score in the judge's reply: ${JSON.stringify(redactedHead(redact, text))}`,
      };
    return { kind: "score", score: Number(m[1] ?? m[0]), info: { judge: text } };
  };

  return {
    score: (items, signal) =>
      options.protocol === "kserve"
        ? kserve(items, signal)
        : options.protocol === "vllm_classify"
          ? classify(items, signal)
          : Promise.all(items.map((i) => judgeOne(i, signal))),
  };
}

export const httpStageType = {
  description: "a remote scorer: KServe v2 / Triton, vLLM's classify endpoint, or an OpenAI-compatible judge",
  fields: { options: httpStageOptionsSchema },
  scope: "session",
  build: (c: { options: HttpStageOptions }) => httpStage(c.options),
} satisfies RewardStageType<{ options: HttpStageOptions }>;

/**
 * Replaces `{name}` placeholders in one pass over the template only. Inserted text is never scanned
 * again, and no `String.replace` pattern (`$&`, `` $` ``) applies: a policy writing "{reference}" in its
 * answer must not receive the reference answer from the judge's prompt (reward hacking).
 */
export function fillTemplate(template: string, values: Record<string, string>): string {
  return template.replace(/\{([a-z_]+)\}/g, (whole, name: string) =>
    Object.hasOwn(values, name) ? values[name]! : whole,
  );
}
