import { z } from "zod";

/** Options of the `http` reward stage. */
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
