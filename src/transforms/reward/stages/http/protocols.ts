/**
 * The `http` stage's three protocols, each a scorer of a batch through the stage's client:
 * - `kserve`: the KServe v2 / Triton inference protocol (`POST {url}/v2/models/{model}/infer`) with int64
 *   `input_ids` / `attention_mask` tensors, a batch per request, logits mapped to a score.
 * - `vllm_classify`: vLLM's classification endpoint (`POST {url}/classify`, also served by SGLang at
 *   `/v1/classify`) with token-id inputs, a batch per request; the score is the probability of a class.
 * - `openai_judge`: an OpenAI-compatible chat endpoint judging the final answer with a rubric prompt; the
 *   score is parsed from the reply (one request per item, concurrently).
 */
import { RewardStageError, type RewardItem, type RewardOutcome } from "../../contract.ts";
import { sequenceOf } from "../onnx/stage.ts";
import type { HttpClient } from "./client.ts";
import type { HttpStageOptions } from "./options.ts";

export type Scorer = (items: readonly RewardItem[], signal: AbortSignal) => Promise<RewardOutcome[]>;

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

/** An item's tokens, left-truncated to `max_length` (the response is at the end). */
function truncated(item: RewardItem, maxLength: number): Int32Array {
  const s = sequenceOf(item);
  return s.length > maxLength ? s.subarray(s.length - maxLength) : s;
}

export function kserveScorer(options: HttpStageOptions, client: HttpClient): Scorer {
  return async (items, signal) => {
    const sequences = items.map((i) => truncated(i, options.max_length));
    const width = Math.max(1, ...sequences.map((s) => s.length));
    const ids = new Array<number>(items.length * width).fill(0);
    const mask = new Array<number>(items.length * width).fill(0);
    sequences.forEach((s, i) => {
      for (let t = 0; t < s.length; t++) {
        ids[i * width + t] = s[t]!;
        mask[i * width + t] = 1;
      }
    });
    const reply = (await client.post(
      `/v2/models/${encodeURIComponent(options.model)}/infer`,
      {
        inputs: [
          { name: "input_ids", shape: [items.length, width], datatype: "INT64", data: ids },
          { name: "attention_mask", shape: [items.length, width], datatype: "INT64", data: mask },
        ],
        outputs: [{ name: options.output }],
      },
      signal,
    )) as { outputs?: Array<{ name: string; shape: number[]; data: number[] }> };
    const out = reply.outputs?.find((o) => o.name === options.output);
    if (out === undefined)
      throw new RewardStageError(`the reply has no output named ${options.output}`, false);
    const classes = out.shape[out.shape.length - 1] ?? 1;
    return items.map((_, i) => ({ kind: "score", score: mapScore(out.data, i, classes, options.score) }));
  };
}

export function classifyScorer(options: HttpStageOptions, client: HttpClient): Scorer {
  return async (items, signal) => {
    const input = items.map((i) => Array.from(truncated(i, options.max_length)));
    const reply = (await client.post(
      options.path ?? "/classify",
      { model: options.model, input },
      signal,
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
}

export function judgeScorer(options: HttpStageOptions, client: HttpClient): Scorer {
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
    const reply = (await client.post(
      "/v1/chat/completions",
      {
        model: options.model,
        temperature: 0,
        max_tokens: options.max_tokens,
        messages: [
          { role: "system", content: options.rubric },
          { role: "user", content },
        ],
      },
      signal,
    )) as { choices?: Array<{ message?: { content?: string } }> };
    const text = reply.choices?.[0]?.message?.content ?? "";
    const m = pattern.exec(text);
    if (m === null)
      return {
        kind: "error",
        message: `no score in the judge's reply: ${JSON.stringify(client.head(text))}`,
      };
    return { kind: "score", score: Number(m[1] ?? m[0]), info: { judge: text } };
  };
  return (items, signal) => Promise.all(items.map((i) => judgeOne(i, signal)));
}

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
