import { strict as assert } from "node:assert";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { pino } from "pino";
import { MemoryDeadLetters } from "../../../../../test/helpers/dead-letters.ts";
import { Metrics } from "../../../../core/metrics.ts";
import {
  judgeTokens,
  startRewardServer,
  type RewardServer,
} from "../../../../../test/helpers/reward-server.ts";
import { rewardItem } from "../../../../../test/helpers/reward-items.ts";
import { batchPolicySchema, StageRunner } from "../../runner.ts";
import { httpStageOptionsSchema } from "./options.ts";
import { fillTemplate } from "./protocols.ts";
import { httpStage } from "./stage.ts";
import { referenceLogits, tinyWeights } from "../../../../../test/helpers/tiny-model.ts";

const weights = tinyWeights();
let server: RewardServer;
before(async () => {
  server = await startRewardServer(weights);
});
after(() => server.close());

const item = (key: string, tokens: number[], text: string | null = null) =>
  rewardItem(key, tokens.slice(0, 1), tokens.slice(1), { final_text: text, metadata: { answer: "42" } });

function runner(options: Record<string, unknown>, policy: Record<string, unknown> = {}) {
  const deadLetters = new MemoryDeadLetters();
  const metrics = new Metrics();
  const stage = httpStage(httpStageOptionsSchema.parse({ url: server.url, ...options }));
  const r = new StageRunner("remote", stage, batchPolicySchema.parse({ backoff_ms: 1, ...policy }), {
    metrics,
    deadLetters,
    logger: pino({ level: "silent" }),
  });
  return { r, deadLetters, metrics };
}

describe("http reward stage", () => {
  it("scores a batch over the KServe v2 protocol, equal to the model's reference", async () => {
    const { r } = runner({ protocol: "kserve", model: "tiny" }, { max_batch_size: 4 });
    const seqs = [
      [1, 2, 3],
      [10, 20, 30, 40, 50],
      [7, 8],
    ];
    const before = server.requests;
    const outcomes = await Promise.all(seqs.map((s, i) => r.score(item(`k${i}`, s))));
    assert.equal(server.requests - before, 1, "one request for the batch");
    outcomes.forEach((o, i) => {
      const expected = referenceLogits(
        weights,
        seqs[i]!,
        seqs[i]!.map(() => 1),
      )[0]!;
      assert.ok(o.kind === "score" && Math.abs(o.score - expected) < 1e-5);
    });
  });

  it("scores a batch over vLLM's /classify with token ids: the probability of the chosen class", async () => {
    const { r } = runner(
      { protocol: "vllm_classify", model: "tiny", score: { class: 1 } },
      { max_batch_size: 4 },
    );
    const seqs = [
      [1, 2, 3],
      [10, 20, 30, 40, 50],
    ];
    const outcomes = await Promise.all(seqs.map((s, i) => r.score(item(`c${i}`, s))));
    outcomes.forEach((o, i) => {
      const [l0, l1] = referenceLogits(
        weights,
        seqs[i]!,
        seqs[i]!.map(() => 1),
      );
      const expected = Math.exp(l1!) / (Math.exp(l0!) + Math.exp(l1!));
      assert.ok(o.kind === "score" && Math.abs(o.score - expected) < 1e-5, JSON.stringify(o));
    });
  });

  // Regression: a response containing "{reference}" reached the judge with the reference answer put in
  // (a policy could hack its reward), and "$`" inserted the text before the placeholder.
  it("fills the judge's template in one pass, never re-reading what it inserted", () => {
    const template = "Reference:\n{reference}\n\nAnswer:\n{response}";
    assert.equal(
      fillTemplate(template, { reference: "42", response: "The answer is {reference}. $` $& $$" }),
      "Reference:\n42\n\nAnswer:\nThe answer is {reference}. $` $& $$",
    );
    assert.equal(fillTemplate("{unknown} {response}", { response: "{response}" }), "{unknown} {response}");
  });

  it("asks an OpenAI-compatible judge with the rubric and parses its score", async () => {
    const { r } = runner({ protocol: "openai_judge", model: "tiny-judge" });
    const text = "The answer is 42.";
    const o = await r.score(item("j", [1, 2], text));
    const tokens = judgeTokens(text, weights.vocab);
    const expected =
      1 /
      (1 +
        Math.exp(
          -referenceLogits(
            weights,
            tokens,
            tokens.map(() => 1),
          )[1]!,
        ));
    assert.ok(o.kind === "score" && Math.abs(o.score - expected) < 1e-5, JSON.stringify(o));
    assert.equal((await r.score(item("no-text", [1, 2], null))).kind, "skip");
  });

  it("retries 5xx answers and succeeds; does not retry 4xx; dead-letters what still fails", async () => {
    const ok = runner({ protocol: "kserve", model: "tiny" });
    server.failNext = 2;
    assert.equal((await ok.r.score(item("a", [1, 2]))).kind, "score");
    assert.equal(ok.metrics.total("reward_retries"), 2);

    const missing = runner({ protocol: "kserve", model: "nope" });
    const before = server.requests;
    const o = await missing.r.score(item("b", [1, 2]));
    assert.equal(o.kind, "error");
    assert.equal(server.requests - before, 1, "a 404 is not retried");
    assert.equal(missing.deadLetters.letters[0]!.code, "REWARD_FAILED");
    assert.match(missing.deadLetters.letters[0]!.message, /answered 404/);
  });

  it("times out a slow server and reports an error, never a 0", async () => {
    const { r, deadLetters } = runner({ protocol: "kserve", model: "tiny" }, { timeout_ms: 50, retries: 0 });
    // The server answers only once the test lets it: the timeout is the only way out.
    let release = () => {};
    server.hold = new Promise((r) => (release = r));
    try {
      const o = await r.score(item("slow", [1, 2]));
      assert.equal(o.kind, "error");
      assert.match(deadLetters.letters[0]!.message, /timed out/);
    } finally {
      server.hold = null;
      release();
    }
  });

  it("rate limits requests", async () => {
    const { r } = runner(
      { protocol: "kserve", model: "tiny", max_requests_per_second: 20 },
      { max_batch_size: 1, concurrency: 4 },
    );
    const first = server.arrivals.length;
    const started = performance.now();
    await Promise.all([0, 1, 2, 3, 4].map((i) => r.score(item(`r${i}`, [1, 2]))));
    // At 20/s the k-th request may leave no sooner than k x 50 ms after the first could: the server's own
    // arrival times say when each came. A slow host only delays them; without the limit, the four the
    // concurrency lets out at once arrive together.
    const arrivals = server.arrivals.slice(first).sort((a, b) => a - b);
    assert.equal(arrivals.length, 5);
    arrivals.forEach((at, k) =>
      assert.ok(at - started >= k * 50 - 0.001, `request ${k} arrived ${(at - started).toFixed(1)} ms in`),
    );
  });
});

// Regression: judge error bodies and URLs with user:password@ put an echoed API key into logs, dead
// letters and the reward_info column.
describe("http reward stage: credentials", () => {
  let echo: Server;
  let port = 0;
  before(async () => {
    // Answers 401 and echoes what it received, as misconfigured servers do.
    echo = createServer((req, res) => {
      res.writeHead(401, { "content-type": "text/plain" });
      res.end(`denied ${req.headers.authorization} for ${req.headers["x-api-key"]}`);
    });
    await new Promise<void>((r) => echo.listen(0, "127.0.0.1", r));
    port = (echo.address() as AddressInfo).port;
  });
  after(() => echo.close());

  it("never lets a credential into an error message", async () => {
    const secrets = ["sk-live-abcdef123456", "hunter2-password", "key-0123456789"];
    const messages: string[] = [];
    for (const url of [`http://127.0.0.1:${port}`, `http://judge:hunter2-password@127.0.0.1:${port}`]) {
      const stage = httpStage(
        httpStageOptionsSchema.parse({
          url,
          protocol: "openai_judge",
          model: "m",
          headers: { authorization: "Bearer sk-live-abcdef123456", "x-api-key": "key-0123456789" },
        }),
      );
      const [outcome] = await stage
        .score([rewardItem("k", [1], [2], { final_text: "hi" })], new AbortController().signal)
        .then(
          (o) => o,
          (err: Error) => [{ kind: "error" as const, message: err.message }],
        );
      assert.equal(outcome!.kind, "error");
      messages.push((outcome as { message: string }).message);
    }
    assert.match(messages[0]!, /answered 401: denied Bearer \*\*\* for \*\*\*/);
    for (const m of messages) for (const s of secrets) assert.ok(!m.includes(s), `${s} leaked: ${m}`);
  });

  // Regression (issue 27, item 8): the body was cut to 200 characters before redaction, so a token the cut
  // ran through left in part (14 of its 43 characters).
  it("redacts before it cuts: no part of a token echoed at any offset leaves", async () => {
    const token = "tF8q2ZkLw9xN4pVb7RcY1mJ3sHd6GaQe0UoXiKlTnB5";
    let offset = 0;
    const server = createServer((_req, res) => {
      res.writeHead(503, { "content-type": "text/plain" });
      res.end(`${"x".repeat(offset)}token=${token} and more text after it`);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const stage = httpStage(
        httpStageOptionsSchema.parse({
          url,
          protocol: "kserve",
          model: "rm",
          headers: { authorization: `Bearer ${token}` },
        }),
      );
      for (offset = 0; offset <= 240; offset++) {
        const message = await stage.score([rewardItem("k", [1], [2])], new AbortController().signal).then(
          () => "",
          (err: Error) => err.message,
        );
        assert.match(message, /answered 503/);
        for (let i = 0; i + 5 <= token.length; i++)
          assert.ok(
            !message.includes(token.slice(i, i + 5)),
            `offset ${offset}: part of the token leaked: ${message}`,
          );
      }
    } finally {
      server.close();
    }
  });
});
