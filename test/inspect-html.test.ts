/**
 * `trajflow inspect --html`: the page opened in headless Chromium (the build @sparticuz/chromium ships
 * inside its npm package, so `npm install` brings it; driven by playwright-core) shows each session's tree, every row's tokens coloured by mask, decoded text,
 * logprobs on hover, rewards and flags.
 */
import { strict as assert } from "node:assert";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import sparticuz from "@sparticuz/chromium";
import { Tokenizer } from "@huggingface/tokenizers";
import { chromium, type Browser } from "playwright-core";
import { listDataFiles, readRows } from "../src/sinks/files/read.ts";
import { runCli } from "./helpers/cli.ts";
import { requiredOrSkip } from "./helpers/required.ts";
import { SessionScript } from "./helpers/sessions.ts";

const EXAMPLES = new URL("../examples/sessions.jsonl", import.meta.url).pathname;
const REWARDS = new URL("../examples/rewards/rewards.json", import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), "trajflow-html-"));
let browser: Browser;
before(async () => {
  // TRAJFLOW_CHROMIUM picks another build (a system Chromium); by default the npm package's, unpacked
  // into the temporary directory on first use.
  const own = process.env.TRAJFLOW_CHROMIUM;
  if (own !== undefined) assert.ok(existsSync(own), `TRAJFLOW_CHROMIUM=${own} does not exist`);
  browser = await chromium.launch({
    executablePath: own ?? (await sparticuz.executablePath()),
    // Its serverless defaults run one process, which dies with the first page closed: the tests open two.
    args: own === undefined ? sparticuz.args.filter((a) => a !== "--single-process") : ["--no-sandbox"],
  });
});
after(async () => {
  await browser?.close();
  rmSync(scratch, { recursive: true, force: true });
});

it("draws each session's tree and every row's tokens, with logprobs on hover", async () => {
  const out = join(scratch, "out");
  assert.equal((await runCli(["replay", EXAMPLES, "--out", out, "--rewards", REWARDS])).code, 0);
  const html = join(scratch, "sessions.html");
  const r = await runCli(["inspect", out, "--html", html, "--tokenizer", "cl100k_base"]);
  assert.equal(r.code, 0, r.stderr);
  const rows = [];
  for (const f of await listDataFiles(out)) rows.push(...(await readRows(f)));

  const page = await browser.newPage();
  await page.goto(`file://${html}`);
  assert.equal(await page.locator("section.session").count(), 6);
  assert.equal(await page.locator("article.row").count(), rows.length);

  for (const row of rows) {
    const card = page.locator(`article.row[data-key="${row.key}"]`);
    assert.equal(await card.locator(".tok.p").count(), row.prompt_ids.length, row.key);
    assert.equal(await card.locator(".tok.g").count(), row.num_trained_tokens, row.key);
    assert.equal(
      await card.locator(".tok.c").count(),
      row.response_ids.length - row.num_trained_tokens,
      row.key,
    );
    assert.match(await card.locator("dd.reward").innerText(), /env .*correct .*rm .*brevity/);
    for (const flag of row.flags) assert.ok((await card.locator(".flag").allInnerTexts()).includes(flag));
  }

  // The branch: row 1 of swe-0007/main hangs under row 0 in the tree and says what it shares.
  const swe = page.locator('section.session[data-uid="swe-0007"][data-session="main"]');
  assert.equal(await swe.locator('.tree li[data-row="0"] li[data-row="1"]').count(), 1);
  assert.match(
    await swe.locator('article[data-index="1"] dd.branch').innerText(),
    /from row 0 after 6 shared tokens/,
  );

  // Decoded text, and the trained tokens' colour and hover title.
  const answer = page.locator('article.row[data-key="gsm8k-0042_rollout-0_0"]');
  assert.match(await answer.locator(".seq").innerText(), /391/);
  const trained = answer.locator(".tok.g").first();
  assert.equal(
    await trained.evaluate((el) => el.ownerDocument.defaultView!.getComputedStyle(el).backgroundColor),
    "rgb(200, 240, 200)",
  );
  await trained.hover();
  assert.match((await trained.getAttribute("title"))!, /^#\d+ id \d+ · logprob -?\d+\.\d{4}$/);
  const lp = Number(await trained.getAttribute("data-logprob"));
  const row = rows.find((x) => x.key === "gsm8k-0042_rollout-0_0")!;
  const first = row.response_mask.indexOf(1);
  assert.ok(Math.abs(lp - row.rollout_log_probs![first]!) < 1e-6);
  await page.close();
});

it("shows token ids when no tokenizer is given", async () => {
  const out = join(scratch, "ids");
  assert.equal((await runCli(["replay", EXAMPLES, "--out", out])).code, 0);
  const html = join(scratch, "ids.html");
  assert.equal((await runCli(["inspect", out, "--html", html, "--uid", "math-0500"])).code, 0);
  const page = await browser.newPage();
  await page.goto(`file://${html}`);
  assert.equal(await page.locator("section.session").count(), 1);
  const text = await page.locator("article .tok.p").first().innerText();
  assert.match(text.trim(), /^\d+$/);
  await page.close();
});

// The tiny model's Hugging Face directory (scripts/llama.sh writes it beside the GGUF): its rows, as the
// gateway writes them for vLLM, SGLang or llama.cpp, read as text through --tokenizer <dir>.
// TRAJFLOW_KEEP_SHOT=<dir> keeps the row's screenshot (hf.png) there to look at.
const TINY_HF = new URL("../.cache/llama/tiny-hf", import.meta.url).pathname;

it("shows a Hugging Face model's rows as text with --tokenizer <model dir>, in the page and its screenshot", async (t) => {
  const missing = requiredOrSkip(
    existsSync(join(TINY_HF, "tokenizer.json")),
    "needs scripts/llama.sh's tiny-hf",
  );
  if (missing !== false) return t.skip(missing);
  const tokenizer = new Tokenizer(
    JSON.parse(readFileSync(join(TINY_HF, "tokenizer.json"), "utf8")) as object,
    JSON.parse(readFileSync(join(TINY_HF, "tokenizer_config.json"), "utf8")) as object,
  );
  const ids = (text: string) => tokenizer.encode(text, { add_special_tokens: false }).ids;
  const question = "What is two plus two?";
  const answer = "Four, of course.";
  const events = join(scratch, "hf.jsonl");
  const session = new SessionScript("hf-task", "hf-1").start().call("c1", ids(question), ids(answer)).end();
  writeFileSync(events, `${session.lines().join("\n")}\n`);
  const out = join(scratch, "hf-out");
  assert.equal((await runCli(["replay", events, "--out", out])).code, 0);
  const html = join(scratch, "hf.html");
  for (const tokenizerArg of [TINY_HF, join(TINY_HF, "tokenizer.json")]) {
    const r = await runCli(["inspect", out, "--html", html, "--tokenizer", tokenizerArg]);
    assert.equal(r.code, 0, r.stderr);
    const page = await browser.newPage();
    await page.goto(`file://${html}`);
    const text = async (cls: string) =>
      (await page.locator(`article.row .tok.${cls}`).allInnerTexts()).join("");
    assert.equal(await text("p"), question);
    assert.equal(await text("g"), answer);
    const shot = join(process.env.TRAJFLOW_KEEP_SHOT ?? scratch, "hf.png");
    await page.locator("article.row").first().screenshot({ path: shot });
    // A PNG of the row as drawn (its text in the image is what the locators above read).
    assert.deepEqual([...readFileSync(shot).subarray(0, 8)], [137, 80, 78, 71, 13, 10, 26, 10]);
    await page.close();
  }
  const wrong = await runCli(["inspect", out, "--html", html, "--tokenizer", join(scratch, "no-such-model")]);
  assert.equal(wrong.code, 2);
  assert.match(
    wrong.stderr,
    /^trajflow: \[USAGE\] --tokenizer must be .*no-such-model\/?\S* does not exist/m,
  );
});
