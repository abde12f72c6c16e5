/**
 * `http`: remote GPU-backed scorers, over one of three protocols (protocols.ts): `kserve` (KServe v2 /
 * Triton), `vllm_classify` (vLLM's or SGLang's classify endpoint) and `openai_judge` (a chat model judging
 * the final answer). Connections are reused (fetch keeps them alive), each request has the runner's
 * timeout, 5xx and network errors are retryable and 4xx are not, and requests are rate limited
 * (client.ts).
 */
import type { RewardStage, RewardStageType } from "../../contract.ts";
import { httpClient } from "./client.ts";
import { httpStageOptionsSchema, type HttpStageOptions } from "./options.ts";
import { classifyScorer, judgeScorer, kserveScorer } from "./protocols.ts";

const SCORERS = { kserve: kserveScorer, vllm_classify: classifyScorer, openai_judge: judgeScorer };

export function httpStage(options: HttpStageOptions): RewardStage {
  return { score: SCORERS[options.protocol](options, httpClient(options)) };
}

export const httpStageType = {
  description: "a remote scorer: KServe v2 / Triton, vLLM's classify endpoint, or an OpenAI-compatible judge",
  fields: { options: httpStageOptionsSchema },
  scope: "session",
  build: (c: { options: HttpStageOptions }) => httpStage(c.options),
} satisfies RewardStageType<{ options: HttpStageOptions }>;
