/**
 * A reward server for tests, on 127.0.0.1, speaking the KServe v2 inference protocol, vLLM's /classify
 * and an OpenAI-compatible chat endpoint, backed by the real tiny ONNX model (onnxruntime in this process).
 * `failNext` makes the next n requests answer 503; while `hold` is set, every answer waits for it; `arrivals`
 * holds each request's arrival time (performance.now(), the test's own clock).
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import ort from "onnxruntime-node";
import { tinyRewardModel, type TinyModelWeights } from "./tiny-model.ts";

export interface RewardServer {
  url: string;
  requests: number;
  failNext: number;
  hold: Promise<void> | null;
  arrivals: number[];
  close(): Promise<void>;
}

/** The judge's "tokenizer": character codes modulo the vocabulary. */
export const judgeTokens = (text: string, vocab: number) => Array.from(text, (c) => c.charCodeAt(0) % vocab);

export async function startRewardServer(weights: TinyModelWeights): Promise<RewardServer> {
  const session = await ort.InferenceSession.create(tinyRewardModel(weights));
  const run = async (ids: BigInt64Array, mask: BigInt64Array, n: number, width: number) => {
    const out = await session.run({
      input_ids: new ort.Tensor("int64", ids, [n, width]),
      attention_mask: new ort.Tensor("int64", mask, [n, width]),
    });
    return out.logits!.data as Float32Array;
  };
  const state: RewardServer = {
    url: "",
    requests: 0,
    failNext: 0,
    hold: null,
    arrivals: [],
    close: () => new Promise((r) => server.close(() => r())),
  };
  const server: Server = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", async () => {
      state.requests++;
      state.arrivals.push(performance.now());
      const reply = (status: number, value: unknown) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(value));
      };
      if (state.hold !== null) await state.hold;
      if (state.failNext > 0) {
        state.failNext--;
        return reply(503, { error: "overloaded" });
      }
      const json = JSON.parse(body) as Record<string, unknown>;
      if (req.url === "/v2/models/tiny/infer") {
        const inputs = json.inputs as Array<{ name: string; shape: [number, number]; data: number[] }>;
        const ids = inputs.find((i) => i.name === "input_ids")!;
        const mask = inputs.find((i) => i.name === "attention_mask")!;
        const [n, width] = ids.shape;
        const logits = await run(
          BigInt64Array.from(ids.data, BigInt),
          BigInt64Array.from(mask.data, BigInt),
          n,
          width,
        );
        return reply(200, {
          model_name: "tiny",
          outputs: [{ name: "logits", shape: [n, weights.classes], datatype: "FP32", data: [...logits] }],
        });
      }
      if (req.url === "/classify" && json.model === "tiny") {
        const input = json.input as number[][];
        const width = Math.max(1, ...input.map((s) => s.length));
        const ids = new BigInt64Array(input.length * width);
        const mask = new BigInt64Array(input.length * width);
        input.forEach((s, i) =>
          s.forEach((id, t) => {
            ids[i * width + t] = BigInt(id);
            mask[i * width + t] = 1n;
          }),
        );
        const logits = await run(ids, mask, input.length, width);
        const k = weights.classes;
        const data = input.map((_, i) => {
          const row = [...logits.subarray(i * k, (i + 1) * k)];
          const max = Math.max(...row);
          const exp = row.map((x) => Math.exp(x - max));
          const sum = exp.reduce((a, b) => a + b, 0);
          return { index: i, label: "x", probs: exp.map((e) => e / sum), num_classes: k };
        });
        return reply(200, { object: "list", model: "tiny", data });
      }
      if (req.url === "/v1/chat/completions" && json.model === "tiny-judge") {
        const user = (json.messages as Array<{ role: string; content: string }>).find(
          (m) => m.role === "user",
        )!;
        const answer = user.content.split("Assistant's final answer:\n")[1] ?? "";
        const tokens = judgeTokens(answer, weights.vocab);
        const width = Math.max(1, tokens.length);
        const logits = await run(
          BigInt64Array.from({ length: width }, (_, i) => BigInt(tokens[i] ?? 0)),
          BigInt64Array.from({ length: width }, (_, i) => (i < tokens.length ? 1n : 0n)),
          1,
          width,
        );
        const score = 1 / (1 + Math.exp(-logits[1]!));
        return reply(200, {
          choices: [{ message: { role: "assistant", content: `Fair.\nSCORE: ${score}` } }],
        });
      }
      return reply(404, { error: `no route ${req.url} for model ${String(json.model)}` });
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}
