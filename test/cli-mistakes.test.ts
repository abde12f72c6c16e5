/**
 * A newcomer's ordinary mistakes (issue 66): each one is one coded line saying what to do, a non-zero exit,
 * and nothing left behind; INTERNAL_ERROR stays for real bugs. The exact lines are asserted.
 */
import { strict as assert } from "node:assert";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { killRunning, runCli, startCli } from "./helpers/cli.ts";
import { freePort, waitUntil } from "./helpers/gateway.ts";
import { llamaServer } from "./helpers/llama.ts";
import { SessionScript } from "./helpers/sessions.ts";

const scratch = mkdtempSync(join(tmpdir(), "trajflow-mistakes-"));
after(() => {
  killRunning();
  rmSync(scratch, { recursive: true, force: true });
});
const README = new URL("../README.md", import.meta.url).pathname;

async function mistake(args: string[], code: number, stderr: string): Promise<void> {
  const r = await runCli(args);
  assert.equal(r.stderr, stderr, `trajflow ${args.join(" ")}`);
  assert.equal(r.code, code, `trajflow ${args.join(" ")} exit code`);
  assert.equal(r.stdout, "");
}

describe("ordinary mistakes get one coded line", () => {
  it("a file that is not Parquet or Arrow, given to inspect", async () => {
    await mistake(
      ["inspect", README],
      1,
      `trajflow: [NOT_A_DATA_FILE] ${README} is not a Parquet or Arrow IPC file of trajectory rows (Parquet ` +
        "error: Invalid Parquet file. Corrupt footer); inspect reads what trajflow's sinks write: a file, or a " +
        "directory of them\n",
    );
  });

  it("an unknown flag names the closest one and the subcommand's help", async () => {
    await mistake(
      ["inspect", "--uidd", "x", scratch],
      2,
      "trajflow: [USAGE] unknown option --uidd (did you mean --uid?)\nRun `trajflow inspect --help` for usage.\n",
    );
    await mistake(
      ["replay", "--ot", "x", "a.jsonl"],
      2,
      "trajflow: [USAGE] unknown option --ot (did you mean --out?)\nRun `trajflow replay --help` for usage.\n",
    );
  });

  it("an unknown command names the closest one", async () => {
    await mistake(
      ["inpsect", "x"],
      2,
      'trajflow: [USAGE] unknown command "inpsect" (did you mean inspect?)\nRun `trajflow --help` for usage.\n',
    );
  });

  it("a bad value is named by its flag, whichever way it is written", async () => {
    await mistake(
      ["inspect", "--limit", "-3", scratch],
      2,
      'trajflow: [USAGE] --limit -3: a value that starts with "-" is given as --limit=-3\n' +
        "Run `trajflow inspect --help` for usage.\n",
    );
    await mistake(
      ["inspect", "--limit=-3", scratch],
      2,
      "trajflow: [USAGE] --limit must be 0 or more, got -3\nRun `trajflow inspect --help` for usage.\n",
    );
  });

  it("a missing input to replay leaves no output directory", async () => {
    const out = join(scratch, "x1");
    await mistake(
      ["replay", join(scratch, "nope.jsonl"), "--out", out],
      1,
      `trajflow: [SOURCE_READ_FAILED] cannot read ${join(scratch, "nope.jsonl")}: no such file (nothing was written)\n`,
    );
    assert.ok(!existsSync(out), "no directory made");
  });

  describe("a port in use", () => {
    let taken: Server;
    let port = 0;
    before(async () => {
      taken = createServer();
      await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
      port = (taken.address() as { port: number }).port;
    });
    after(() => taken.close());

    it("says so, and the gateway leaves no event log directory behind", async () => {
      const out = join(scratch, "gw");
      const args = [
        "gateway",
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        `127.0.0.1:${port}`,
        "--out",
        out,
      ];
      const r = await runCli(args);
      assert.equal(r.code, 1);
      assert.ok(
        r.stderr.endsWith(
          `trajflow: [ADDRESS_IN_USE] 127.0.0.1:${port} is taken by another process: stop it, or listen ` +
            "elsewhere (--listen host:port)\n",
        ),
        r.stderr,
      );
      assert.doesNotMatch(r.stderr, /INTERNAL_ERROR|This is a bug/);
      assert.ok(!existsSync(out), "no directory made");
    });
  });

  it("--version prints the package's version", async () => {
    const r = await runCli(["--version"]);
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
      version: string;
    };
    assert.equal(r.code, 0);
    assert.equal(r.stdout, `trajflow ${pkg.version}\n`);
  });

  describe("inspect finds what it prints", () => {
    let out = "";
    before(async () => {
      const input = join(scratch, "found.jsonl");
      const lines = [
        ...new SessionScript("swe-0007", "main")
          .call("c1", [1, 2], [3, 4])
          .reward(2.151318404059586)
          .end()
          .lines(),
        ...new SessionScript("swe-0008", "main").call("c1", [1, 2], [5]).reward(1).end().lines(),
      ];
      writeFileSync(input, `${lines.join("\n")}\n`);
      out = join(scratch, "found");
      assert.equal((await runCli(["replay", input, "--out", out])).code, 0);
    });

    it("--uid takes the row key each line starts with, and --key is explicit", async () => {
      for (const args of [
        ["--uid", "swe-0007_main_0"],
        ["--key", "swe-0007_main_0"],
        ["--uid", "swe-0007"],
      ]) {
        const r = await runCli(["inspect", out, ...args]);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, /^swe-0007_main_0 {2}status=ok {2}reward=2\.1513 /);
        assert.equal(r.stdout.split("\n").filter((l) => /^\S/.test(l)).length, 1);
      }
    });

    it("no match says so, with the closest keys", async () => {
      await mistake(
        ["inspect", out, "--uid", "swe-0007_main_1"],
        1,
        "trajflow: [NO_ROWS_MATCH] no row matches --uid swe-0007_main_1; the closest keys: swe-0007_main_0, " +
          "swe-0008_main_0\n",
      );
    });

    it("--json has the exact values the text view rounds", async () => {
      const r = await runCli(["inspect", out, "--key", "swe-0007_main_0", "--json"]);
      assert.equal(r.code, 0, r.stderr);
      const row = JSON.parse(r.stdout) as { reward: number; response_ids: number[] };
      assert.equal(row.reward, 2.151318404059586);
      assert.deepEqual(row.response_ids, [3, 4]);
    });
  });

  describe("pipeline files", () => {
    const PIPELINES = new URL("../pipelines/", import.meta.url).pathname;

    it("validate takes several files, and says of each whether it is valid", async () => {
      const bad = join(scratch, "bad.yaml");
      writeFileSync(bad, "version: 1\nsources: {}\n");
      const r = await runCli([
        "validate",
        join(PIPELINES, "replay.yaml"),
        bad,
        join(PIPELINES, "rescore.yaml"),
      ]);
      assert.equal(r.code, 2);
      assert.match(r.stdout, /replay\.yaml: valid: /);
      assert.match(r.stdout, /rescore\.yaml: valid: /);
      assert.match(r.stderr, /^trajflow: \[CONFIG_INVALID\] invalid pipeline:\n {2}.*bad\.yaml/m);
    });

    it("run and validate take --out, and the dead letters follow the sink", async () => {
      const out = join(scratch, "moved");
      const r = await runCli(["validate", join(PIPELINES, "replay.yaml"), "--out", out]);
      assert.equal(r.code, 0, r.stderr);
      assert.match(
        r.stdout,
        new RegExp(`parquet files in ${out}; dead letters in ${out}/_dead-letter$`, "m"),
      );
      const set = await runCli([
        "validate",
        join(PIPELINES, "replay.yaml"),
        "--out",
        out,
        "--set",
        `dead_letters.path=${join(scratch, "apart")}`,
      ]);
      assert.match(set.stdout, new RegExp(`dead letters in ${join(scratch, "apart")}$`, "m"));
      const ran = await runCli(["run", join(PIPELINES, "replay.yaml"), "--out", out]);
      assert.equal(ran.code, 0, ran.stderr);
      assert.ok(existsSync(join(out, "part-00000.parquet")));
    });
  });

  it("the wrong engine is named: llama.cpp's answers behind --engine vllm", async () => {
    const port = await freePort();
    const gw = startCli([
      "gateway",
      "--upstream",
      llamaServer(),
      "--engine",
      "vllm",
      "--listen",
      `127.0.0.1:${port}`,
      "--out",
      join(scratch, "wrong-engine"),
    ]);
    try {
      const base = `http://127.0.0.1:${port}`;
      await waitUntil(async () => (await fetch(`${base}/readyz`).catch(() => null))?.ok === true, 60_000);
      const ask = () =>
        fetch(`${base}/sessions/wrong/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model: "tiny",
            max_tokens: 2,
            messages: [{ role: "user", content: "Hi." }],
          }),
        });
      for (let i = 0; i < 2; i++) {
        const r = await ask();
        assert.equal(r.status, 502);
        const body = (await r.json()) as { error: { code: string; message: string } };
        assert.equal(body.error.code, "not_recorded");
        assert.match(body.error.message, /this looks like llama\.cpp's answer: use --engine llamacpp/);
      }
      await waitUntil(() => /use --engine llamacpp/.test(gw.stderr()));
      assert.equal(gw.stderr().match(/this looks like llama\.cpp's answer/g)?.length, 1, "logged once");
    } finally {
      gw.child.kill("SIGTERM");
      await gw.exited;
    }
  });
});
