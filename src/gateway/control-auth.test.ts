import { strict as assert } from "node:assert";
import type { IncomingMessage } from "node:http";
import { it } from "node:test";
import { ControlAuth, tokenProblems } from "./control-auth.ts";

const TOKEN = "tf-control-0123456789abcdefghij";
const req = (authorization?: string) =>
  ({ headers: authorization === undefined ? {} : { authorization } }) as IncomingMessage;

it("allows the token as a bearer credential and nothing else", () => {
  const auth = new ControlAuth(TOKEN);
  assert.equal(auth.check(req(`Bearer ${TOKEN}`)), "allowed");
  assert.equal(auth.check(req(`bearer ${TOKEN}`)), "allowed");
  assert.equal(auth.check(req()), "missing");
  assert.equal(auth.check(req("")), "missing");
  assert.equal(auth.check(req(`Bearer ${TOKEN}x`)), "wrong");
  assert.equal(auth.check(req(`Bearer ${TOKEN.slice(1)}`)), "wrong");
  assert.equal(auth.check(req(TOKEN)), "wrong");
  assert.equal(auth.check(req("Bearer ")), "wrong");
  assert.equal(new ControlAuth(undefined).check(req()), "allowed");
});

it("refuses tokens that are short, hold control characters or outer whitespace, listing every problem", () => {
  assert.deepEqual(tokenProblems(TOKEN), []);
  assert.deepEqual(tokenProblems(" short\u0000"), [
    "the control token has fewer than 16 characters",
    "the control token holds a control character",
    "the control token starts or ends with whitespace",
  ]);
});

/**
 * Each guess's median check time in ns, the guesses taken in turn call by call: a moment the host slows
 * (a shared CI machine, a collection, the JIT) slows all of them alike.
 */
function medians(auth: ControlAuth, authorizations: string[], n: number): number[] {
  const times = authorizations.map(() => new Float64Array(n));
  const reqs = authorizations.map(req);
  for (let i = 0; i < n; i++) {
    for (let g = 0; g < reqs.length; g++) {
      const t0 = process.hrtime.bigint();
      auth.check(reqs[g]!);
      times[g]![i] = Number(process.hrtime.bigint() - t0);
    }
  }
  return times.map((t) => t.sort()[n >> 1]!);
}

it("takes as long to refuse a guess that is nearly right as one that is all wrong (constant-time compare)", () => {
  const auth = new ControlAuth(TOKEN);
  const nearlyRight = `Bearer ${TOKEN.slice(0, -1)}!`;
  const allWrong = `Bearer ${"!".repeat(TOKEN.length)}`;
  const guesses = [nearlyRight, allWrong, `Bearer ${TOKEN}`];
  medians(auth, guesses, 2_000); // warm up
  // Rounds of interleaved calls, each guess's fastest median: one block of calls per guess once measured
  // one guess 1.5x slower than the others with the code unchanged (a slowed moment of the host).
  const best = guesses.map(() => Infinity);
  for (let round = 0; round < 5; round++)
    medians(auth, guesses, 3_000).forEach((m, i) => (best[i] = Math.min(best[i]!, m)));
  const [a, b, right] = best as [number, number, number];
  // The presented token is hashed, then compared whole: no early exit a timing could show.
  const spread = Math.max(a, b, right) / Math.min(a, b, right);
  assert.ok(spread < 1.5, `medians ${a} / ${b} / ${right} ns`);
});
