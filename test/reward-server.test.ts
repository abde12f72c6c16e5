/**
 * The torch reward server (test/fixtures/reward_server.py, issue 25 item 1) against the onnx stage: the
 * same model (examples/rewards/tiny-reward.onnx) run by PyTorch behind KServe v2 and vLLM's /classify
 * must give every row the score onnxruntime gives it on CPU. Runs on CPU here; on a GPU host the server
 * picks CUDA (bench/gpu-rewards.ts measures it there).
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { mulberry32 } from "./helpers/prng.ts";
import { listDataFiles, readRows } from "../src/sinks/files/read.ts";
import { runCli } from "./helpers/cli.ts";
import { PYTHON } from "./helpers/python.ts";
import { SessionScript } from "./helpers/sessions.ts";
import { startTorchRewardServer, type TorchRewardServer } from "./helpers/torch-reward-server.ts";

const root = new URL("..", import.meta.url).pathname;
const MODEL = join(root, "examples/rewards/tiny-reward.onnx");
const scratch = mkdtempSync(join(tmpdir(), "trajflow-reward-server-"));

/** Sessions of varied lengths, ids across a real tokenizer's range (the example model hashes them). */
function writeSessions(path: string): number {
  const random = mulberry32(25);
  const ids = (n: number) => Array.from({ length: n }, () => Math.floor(random() * 150_000));
  const lines: string[] = [];
  let rows = 0;
  for (let s = 0; s < 40; s++) {
    const script = new SessionScript(`u${s % 7}`, `s${s}`);
    let prompt = ids(1 + Math.floor(random() * 300));
    const turns = 1 + (s % 3);
    for (let t = 0; t < turns; t++) {
      const output = ids(1 + Math.floor(random() * 200));
      script.call(`c${t}`, prompt, output);
      prompt = [...prompt, ...output, ...ids(1 + Math.floor(random() * 20))];
    }
    lines.push(...script.end().lines());
    rows++;
  }
  writeFileSync(path, `${lines.join("\n")}\n`);
  return rows;
}

/** Replays `input` with one reward stage; returns each row's key → that stage's score. */
async function scores(
  input: string,
  name: string,
  stage: Record<string, unknown>,
): Promise<Map<string, number>> {
  const config = join(scratch, `${name}.json`);
  writeFileSync(config, JSON.stringify({ stages: [{ name: "rm", ...stage, batch: { max_batch_size: 8 } }] }));
  const out = join(scratch, `out-${name}`);
  const result = await runCli(["replay", input, "--out", out, "--rewards", config]);
  assert.equal(result.code, 0, result.stderr);
  const byKey = new Map<string, number>();
  const rows = (await Promise.all((await listDataFiles(out)).map((f) => readRows(f)))).flat();
  for (const row of rows) {
    const value = row.reward_values[0];
    assert.equal(row.reward_names[0], "rm");
    assert.equal(typeof value, "number", `${row.key}: ${row.reward_info}`);
    byKey.set(row.key, value as number);
  }
  return byKey;
}

describe("the torch reward server", () => {
  let server: TorchRewardServer;
  before(async () => {
    server = await startTorchRewardServer(MODEL);
  });
  after(() => {
    server?.child.kill();
    rmSync(scratch, { recursive: true, force: true });
  });

  it("scores every row as the onnx stage does on CPU, through kserve and vllm_classify (1e-4)", async () => {
    const input = join(scratch, "sessions.jsonl");
    const rows = writeSessions(input);
    const score = { kind: "softmax", class: 1 };
    const reference = await scores(input, "onnx", {
      type: "onnx",
      options: { model: MODEL, providers: ["cpu"], score },
    });
    assert.equal(reference.size, rows);
    for (const protocol of ["kserve", "vllm_classify"]) {
      const served = await scores(input, protocol, {
        type: "http",
        options: { protocol, url: server.url, model: "tiny-reward", score },
      });
      assert.deepEqual([...served.keys()].sort(), [...reference.keys()].sort());
      for (const [key, expected] of reference) {
        const got = served.get(key)!;
        assert.ok(Math.abs(got - expected) <= 1e-4, `${protocol} ${key}: ${got} vs onnxruntime ${expected}`);
      }
    }
    // The scores are not all alike (a constant model would pass the comparison too).
    assert.ok(new Set([...reference.values()].map((v) => v.toFixed(4))).size > rows / 2);
    const stats = (await (await fetch(`${server.url}/stats`)).json()) as { items: number; device: string };
    assert.equal(stats.items, rows * 2);
    assert.equal(stats.device, server.device);
  });

  it("refuses a model file that is not the tiny reward model, and one that is not ONNX", async () => {
    // A valid ONNX model of another graph (one Identity node), written by the onnx package.
    const other = join(scratch, "identity.onnx");
    execFileSync(PYTHON, [
      "-c",
      "import sys, onnx; from onnx import helper as h, TensorProto as T; " +
        "g = h.make_graph([h.make_node('Identity', ['x'], ['y'])], 'g', " +
        "[h.make_tensor_value_info('x', T.FLOAT, [1])], [h.make_tensor_value_info('y', T.FLOAT, [1])]); " +
        "onnx.save(h.make_model(g), sys.argv[1])",
      other,
    ]);
    await assert.rejects(
      startTorchRewardServer(other),
      /is not the tiny reward model \(ops: \['Identity'\]\)/,
    );
    const junk = join(scratch, "junk.onnx");
    writeFileSync(junk, "not an onnx file");
    await assert.rejects(startTorchRewardServer(junk), /cannot read .*junk\.onnx/);
  });
});
