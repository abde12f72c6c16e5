import { strict as assert } from "node:assert";
import type { IncomingMessage } from "node:http";
import { timingSafeEqual } from "node:crypto";
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

it("compares every presented token as a SHA-256 digest in constant time, whatever its length", () => {
  // A timing measurement on a shared host cannot tell a constant-time compare from `===` (issue 67: a
  // plain === passed the timing test three runs of three), so the test checks what makes the compare
  // constant-time: every guess, right, nearly right, short, long or empty, reaches timingSafeEqual as two
  // 32-byte digests, and its verdict is timingSafeEqual's.
  const seen: Array<[number, number]> = [];
  const auth = new ControlAuth(TOKEN, (a, b) => (seen.push([a.length, b.length]), timingSafeEqual(a, b)));
  const guesses = [
    [`Bearer ${TOKEN}`, "allowed"],
    [`Bearer ${TOKEN.slice(0, -1)}!`, "wrong"],
    [`Bearer ${"!".repeat(TOKEN.length)}`, "wrong"],
    ["Bearer x", "wrong"],
    [`Bearer ${TOKEN.repeat(40)}`, "wrong"],
    ["Bearer ", "wrong"],
    [TOKEN, "wrong"],
  ] as const;
  for (const [authorization, verdict] of guesses) assert.equal(auth.check(req(authorization)), verdict);
  assert.deepEqual(
    seen,
    guesses.map(() => [32, 32]),
  );
  // Nothing reaches the compare without a credential (401 needs no secret).
  assert.equal(auth.check(req()), "missing");
  assert.equal(seen.length, guesses.length);
});
