import { z } from "zod";

/** Options of the `onnx` reward stage. */
export const onnxStageOptionsSchema = z.strictObject({
  model: z.string().min(1).describe("Path of the .onnx reward model."),
  input_ids: z
    .string()
    .default("input_ids")
    .describe("Name of the model's token-id input (int64 [batch, seq])."),
  attention_mask: z
    .string()
    .default("attention_mask")
    .describe("Name of the model's attention-mask input (int64 [batch, seq]); 1 for tokens, 0 for padding."),
  output: z.string().default("logits").describe("Name of the output holding [batch, classes] logits."),
  max_length: z.int().positive().default(4_096).describe("Tokens per sequence at most (prompt + response)."),
  truncation: z
    .enum(["left", "right"])
    .default("left")
    .describe("Which end is dropped past max_length: left keeps the response (the end of the sequence)."),
  buckets: z
    .array(z.int().positive())
    .default([64, 128, 256, 512, 1_024, 2_048, 4_096])
    .describe("Sequence lengths a batch is padded up to (fewer distinct shapes, steadier latency)."),
  pad_id: z.int().nonnegative().default(0).describe("Token id used for padding (masked out)."),
  score: z
    .strictObject({
      kind: z
        .enum(["identity", "sigmoid", "softmax"])
        .default("identity")
        .describe("identity: the class logit; sigmoid of it; or the softmax probability of the class."),
      class: z.int().nonnegative().default(0).describe("Which output class is the score."),
    })
    .default({ kind: "identity", class: 0 })
    .describe("How the output logits become a score."),
  providers: z
    .array(z.enum(["cuda", "cpu"]))
    .min(1)
    .default(["cuda", "cpu"])
    .describe(
      "Execution providers in order of preference. onnxruntime-node does not fall back by itself: when " +
        "CUDA is missing the stage warns and uses the next one.",
    ),
  require_cuda: z.boolean().default(false).describe("Fail to start instead of falling back to CPU."),
  workers: z.int().min(1).max(16).default(1).describe("Worker threads, each with its own session."),
  intra_op_threads: z.int().min(0).default(1).describe("onnxruntime threads per session (0: its default)."),
});
export type OnnxStageOptions = z.output<typeof onnxStageOptionsSchema>;
