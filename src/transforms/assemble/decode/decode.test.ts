import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { packLogprobs, packTokenIds } from "../../../schemas/tokens.ts";
import { crc32 } from "node:zlib";
import { digestOf } from "./decode-core.ts";
import { decodeEvent } from "./decode.ts";

const origin = { kind: "file", file: "events.jsonl", line: 7 } as const;
const base = { v: 1, session_id: "s1", uid: "u1", seq: 0, ts: 1 };
const response = {
  ...base,
  type: "response",
  call_id: "c1",
  output_ids: [5, 6],
  logprobs: [-0.5, -1],
  finish_reason: "stop",
};

function reject(raw: string): { code: string; message: string; details: unknown; envelope: unknown } {
  const result = decodeEvent({ raw, origin });
  assert.equal(result.kind, "rejected", `expected ${raw} to be rejected`);
  if (result.kind !== "rejected") throw new Error("unreachable");
  assert.deepEqual(result.deadLetter.origin, origin);
  assert.equal(result.deadLetter.raw, raw, "the raw bytes travel with the dead letter");
  assert.equal(result.deadLetter.component, "decode");
  return { ...result.deadLetter, details: result.deadLetter.details, envelope: result.envelope };
}

describe("decode", () => {
  it("decodes JSON and packed token arrays to the same typed arrays", () => {
    const plain = decodeEvent({ raw: JSON.stringify(response), origin });
    const packed = decodeEvent({
      raw: JSON.stringify({
        ...response,
        output_ids: packTokenIds([5, 6]),
        logprobs: packLogprobs([-0.5, -1]),
      }),
      origin,
    });
    assert.ok(plain.kind === "event" && packed.kind === "event");
    assert.deepEqual(packed.value.event, plain.value.event);
    if (plain.value.event.type !== "response") throw new Error("unreachable");
    assert.ok(plain.value.event.output_ids instanceof Int32Array);
    assert.deepEqual([...plain.value.event.output_ids], [5, 6]);
    assert.deepEqual([...plain.value.event.logprobs!], [-0.5, -1]);
  });

  it("keeps unknown extra fields out of the way instead of rejecting them", () => {
    const result = decodeEvent({ raw: JSON.stringify({ ...response, gateway_latency_ms: 12 }), origin });
    assert.ok(result.kind === "event");
    assert.equal("gateway_latency_ms" in result.value.event, false);
  });

  it("applies defaults to rewards", () => {
    const result = decodeEvent({ raw: JSON.stringify({ ...base, type: "reward", value: 1 }), origin });
    assert.ok(result.kind === "event");
    assert.deepEqual(result.value.event, {
      ...base,
      type: "reward",
      value: 1,
      target: "session",
      stage: "env",
    });
  });

  const cases: Array<[string, string, string, RegExp]> = [
    ["malformed JSON", '{"v":1,', "MALFORMED_JSON", /not valid JSON/],
    ["an array", "[1,2]", "NOT_AN_OBJECT", /must be a JSON object/],
    ["version 2", JSON.stringify({ ...response, v: 2 }), "UNSUPPORTED_VERSION", /version 2 is not supported/],
    [
      "no version",
      JSON.stringify({ ...response, v: undefined }),
      "INVALID_EVENT",
      /missing protocol version/,
    ],
    [
      "an unknown type",
      JSON.stringify({ ...base, type: "thought" }),
      "UNKNOWN_EVENT_TYPE",
      /"thought" is not one of/,
    ],
    ["a missing field", JSON.stringify({ ...response, call_id: undefined }), "INVALID_EVENT", /call_id/],
    ["a wrong type", JSON.stringify({ ...response, seq: "3" }), "INVALID_EVENT", /seq/],
    ["a negative seq", JSON.stringify({ ...response, seq: -1 }), "INVALID_EVENT", /seq/],
    [
      "a float token",
      JSON.stringify({ ...response, output_ids: [5, 6.5] }),
      "INVALID_TOKENS",
      /element 1 is 6.5/,
    ],
    ["a negative token", JSON.stringify({ ...response, output_ids: [-5, 6] }), "INVALID_TOKENS", /element 0/],
    [
      "a bad packing",
      JSON.stringify({ ...response, output_ids: { b64: "AAAAAAA=" } }),
      "INVALID_TOKENS",
      /not a multiple of 4/,
    ],
    [
      "string logprobs",
      JSON.stringify({ ...response, logprobs: ["x", -1] }),
      "INVALID_LOGPROBS",
      /not a number/,
    ],
    [
      "a length mismatch",
      JSON.stringify({ ...response, logprobs: [-1] }),
      "LOGPROBS_LENGTH_MISMATCH",
      /1 logprobs for 2 output ids/,
    ],
    [
      "infinite packed logprobs",
      JSON.stringify({ ...response, logprobs: packLogprobs([Number.NEGATIVE_INFINITY, -1]) }),
      "LOGPROBS_NOT_FINITE",
      /position 0/,
    ],
    [
      "an infinite reward",
      JSON.stringify({ ...base, type: "reward", value: 1 }).replace('"value":1', '"value":1e999'),
      "INVALID_EVENT",
      /received Infinity/,
    ],
    [
      "both prompt forms",
      JSON.stringify({
        ...base,
        type: "request",
        call_id: "c",
        prompt_ids: [1],
        parent_call_id: "p",
        prompt_delta_ids: [2],
      }),
      "INVALID_EVENT",
      /both prompt_ids and the delta form/,
    ],
    [
      "a request without prompt",
      JSON.stringify({ ...base, type: "request", call_id: "c" }),
      "INVALID_EVENT",
      /has no prompt/,
    ],
    [
      "a half delta form",
      JSON.stringify({ ...base, type: "request", call_id: "c", parent_call_id: "p" }),
      "INVALID_EVENT",
      /go together/,
    ],
    [
      "an unknown end status",
      JSON.stringify({ ...base, type: "session.end", status: "done" }),
      "INVALID_EVENT",
      /status/,
    ],
  ];
  for (const [what, raw, code, message] of cases) {
    it(`dead-letters ${what} as ${code}`, () => {
      const letter = reject(raw);
      assert.equal(letter.code, code);
      assert.match(letter.message, message);
      assert.match(letter.message, /^events\.jsonl:7: /, "the message says where the event came from");
    });
  }

  it("decodes a policy.update control event, which belongs to no session", () => {
    const raw = JSON.stringify({ v: 1, type: "policy.update", weight_version: 13, ts: 5 });
    const result = decodeEvent({ raw, origin });
    assert.equal(result.kind, "control");
    if (result.kind !== "control") throw new Error("unreachable");
    assert.deepEqual(result.control, { v: 1, type: "policy.update", weight_version: 13, ts: 5 });
    const bad = reject(JSON.stringify({ v: 1, type: "policy.update", weight_version: -1, ts: 5 }));
    assert.equal(bad.code, "INVALID_EVENT");
    assert.match(bad.message, /weight_version/);
  });

  it("reports zod issue paths in the details", () => {
    const letter = reject(JSON.stringify({ ...response, finish_reason: 3 }));
    assert.deepEqual(letter.details, {
      issues: [
        {
          code: "invalid_type",
          path: ["finish_reason"],
          message: "Invalid input: expected string, received number",
        },
      ],
    });
  });

  it("returns the envelope of a rejected event so its seq is not waited for", () => {
    const letter = reject(JSON.stringify({ ...response, logprobs: [-1] }));
    assert.deepEqual(Object.keys(letter.envelope as object), ["uid", "session_id", "seq", "ts", "digest"]);
    assert.equal(reject('{"v":1,').envelope, undefined);
  });

  it("digests an event's bytes as one exact number: its CRC-32 and its length modulo 2^21", () => {
    const bytes = Buffer.from("an event's bytes");
    const digest = digestOf({ raw: bytes, origin });
    assert.ok(Number.isSafeInteger(digest));
    assert.equal(digest, crc32(bytes) * 2 ** 21 + bytes.length);
    // A string and its UTF-8 bytes are the same event; one byte changed is another.
    assert.equal(digestOf({ raw: "an event's bytes", origin }), digest);
    assert.notEqual(digestOf({ raw: Buffer.from("an event's bytez"), origin }), digest);
    // The length wraps at 2 MiB and still fits: a 2 MiB + 5 byte event keeps its CRC and 5.
    const large = Buffer.alloc(2 ** 21 + 5, 0x61);
    const big = digestOf({ raw: large, origin });
    assert.ok(Number.isSafeInteger(big));
    assert.equal(big % 2 ** 21, 5);
    assert.equal(Math.floor(big / 2 ** 21), crc32(large));
  });

  it("keeps invalid UTF-8 as base64", () => {
    const raw = new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]);
    const result = decodeEvent({ raw, origin });
    assert.ok(result.kind === "rejected");
    assert.equal(result.deadLetter.raw, undefined);
    assert.equal(result.deadLetter.raw_b64, Buffer.from(raw).toString("base64"));
  });
});

describe("decode: hostile input", () => {
  const nested = (depth: number, leaf: unknown = "x"): unknown => {
    let v: unknown = leaf;
    for (let i = 0; i < depth; i++) v = [v];
    return v;
  };

  // Regression: content nested ~3,000 levels overflowed the stack in assembly; metadata nested 20,000
  // levels killed a decode worker (structured clone recursed).
  it("rejects free-form fields nested deeper than 64 levels, without recursing", () => {
    const request = { ...base, type: "request", call_id: "c1", prompt_ids: [1] };
    const deep = reject(JSON.stringify({ ...request, messages: [{ role: "user", content: nested(3_000) }] }));
    assert.equal(deep.code, "NESTING_TOO_DEEP");
    assert.deepEqual(deep.details, { field: "messages" });
    const start = { ...base, type: "session.start" };
    // Written as text: JSON.stringify itself recurses.
    const metadata = `{"a":${"[".repeat(20_000)}"x"${"]".repeat(20_000)}}`;
    const raw = `${JSON.stringify(start).slice(0, -1)},"metadata":${metadata}}`;
    assert.equal(reject(raw).code, "NESTING_TOO_DEEP");
    const ok = decodeEvent({ raw: JSON.stringify({ ...start, metadata: { a: nested(60) } }), origin });
    assert.equal(ok.kind, "event");
  });

  // Regression: a timestamp past what a Date holds crashed --partition-by date ("Invalid time value").
  it("rejects a timestamp past the largest Date", () => {
    assert.equal(reject(JSON.stringify({ ...response, ts: 8.64e15 + 1 })).code, "INVALID_EVENT");
    assert.equal(decodeEvent({ raw: JSON.stringify({ ...response, ts: 8.64e15 }), origin }).kind, "event");
  });

  // Regression (found by test/fuzz.test.ts): a rejected event with ts 1.8e308 still gave its session that
  // clock through the envelope, and the row's ended_at_ms was past any Date.
  it("gives a rejected event no envelope when its ts is out of range", () => {
    const bad = reject(JSON.stringify({ ...response, ts: Number.MAX_VALUE, output_ids: "x" }));
    assert.equal(bad.envelope, undefined);
  });

  // Regression: weight_version 3e9, sample_index 5e9 and group_size 2^40 wrapped silently into int32.
  it("rejects counts that do not fit the int32 columns, never wrapping them", () => {
    assert.equal(reject(JSON.stringify({ ...response, weight_version: 3e9 })).code, "INVALID_EVENT");
    const start = { ...base, type: "session.start" };
    assert.equal(reject(JSON.stringify({ ...start, sample_index: 5e9 })).code, "INVALID_EVENT");
    assert.equal(reject(JSON.stringify({ ...start, group_size: 2 ** 40 })).code, "INVALID_EVENT");
    const max = decodeEvent({ raw: JSON.stringify({ ...response, weight_version: 2 ** 31 - 1 }), origin });
    assert.equal(max.kind, "event");
  });

  // Regression: a positive logprob (0.7) was accepted, and -1e39 was reported as "-Infinity".
  it("rejects positive logprobs and reports an overflowing one as it was sent", () => {
    const positive = reject(JSON.stringify({ ...response, logprobs: [-0.5, 0.7] }));
    assert.equal(positive.code, "INVALID_LOGPROBS");
    assert.match(
      positive.message,
      /logprob 0\.699999988079071 at position 1; a log-probability is at most 0/,
    );
    const rounding = decodeEvent({ raw: JSON.stringify({ ...response, logprobs: [-0.5, 1e-7] }), origin });
    assert.equal(rounding.kind, "event", "a log_softmax rounding a hair above 0 is kept as sent");
    const huge = reject(JSON.stringify({ ...response, logprobs: [-0.5, -1e39] }));
    assert.equal(huge.code, "LOGPROBS_NOT_FINITE");
    assert.match(huge.message, /logprob -1e\+39 at position 1/);
  });

  it("keeps a token the engine gave no logprob for as missing (null, or NaN packed), never a number", () => {
    for (const logprobs of [[null, -1], packLogprobs([Number.NaN, -1])]) {
      const d = decodeEvent({ raw: JSON.stringify({ ...response, logprobs }), origin });
      assert.equal(d.kind, "event");
      const lp = (d as { value: { event: { logprobs: Float32Array } } }).value.event.logprobs;
      assert.ok(Number.isNaN(lp[0]));
      assert.equal(lp[1], -1);
    }
  });

  // Regression: invalid UTF-8 was replaced with U+FFFD, so distinct ids could become equal.
  it("rejects invalid UTF-8 and keeps the raw bytes", () => {
    const bytes = Buffer.concat([
      Buffer.from('{"v":1,"type":"session.start","uid":"u'),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('","session_id":"s","seq":0,"ts":1}'),
    ]);
    const result = decodeEvent({ raw: new Uint8Array(bytes), origin });
    assert.ok(result.kind === "rejected");
    assert.equal(result.deadLetter.code, "INVALID_UTF8");
    assert.equal(result.deadLetter.raw_b64, bytes.toString("base64"));
  });
});
