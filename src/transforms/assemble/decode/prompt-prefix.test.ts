import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { decodeOutcome, type DecodeOutcome } from "./decode-core.ts";
import { PromptPrefixes, type PrefixRead } from "./prompt-prefix.ts";

const origin = { kind: "file", file: "events.jsonl", line: 1 } as const;
const utf8 = new TextEncoder();

/** A request of session s1 with `prompt` as its prompt_ids text (anything, valid or not). */
function request(prompt: string, extra = "", seq = 1): Uint8Array {
  return utf8.encode(
    `{"v":1,"session_id":"s1","uid":"u1","seq":${seq},"ts":1,"type":"request","call_id":"c${seq}"` +
      `,"prompt_ids":${prompt}${extra}}`,
  );
}

const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
const text = (values: number[]) => `[${values.join(",")}]`;
const FIRST = ids(100, 40);

/** What a decode gives, without the record object (the same either way). */
function comparable(outcome: DecodeOutcome): unknown {
  if (outcome.kind === "event") return { event: outcome.value.event, digest: outcome.value.digest };
  if (outcome.kind === "control") return { control: outcome.control };
  return outcome;
}

/** Decodes `raw` with the reader (its cache as it is) and without; they must agree. */
function agree(prefixes: PromptPrefixes, raw: Uint8Array, label: string): DecodeOutcome {
  const plain = decodeOutcome({ raw, origin }, null, null);
  const read = decodeOutcome({ raw, origin }, null, prefixes);
  assert.deepEqual(comparable(read), comparable(plain), label);
  return read;
}

/** A reader (any prompt size) that remembers FIRST as session s1's last prompt. */
function primed(): PromptPrefixes {
  const prefixes = new PromptPrefixes({ minBytes: 0 });
  const outcome = agree(prefixes, request(text(FIRST)), "priming request");
  assert.equal(outcome.kind, "event");
  assert.equal(prefixes.size, 1);
  return prefixes;
}

describe("prompt prefixes", () => {
  it("reads a continuation's known part from the session's last prompt", () => {
    const prefixes = primed();
    const next = [...FIRST, ...ids(500, 7)];
    const read = prefixes.read(request(text(next), "", 2));
    assert.ok(read !== null);
    assert.equal(read.knownIds, FIRST.length, "the last prompt's ids were taken, not parsed again");
    assert.deepEqual([...read.ids], next);
    const outcome = agree(prefixes, request(text(next), "", 2), "continuation");
    assert.ok(outcome.kind === "event" && outcome.value.event.type === "request");
    assert.deepEqual([...outcome.value.event.prompt_ids!], next);
    // The remembered prompt grew: the next turn continues from it.
    const third = [...next, ...ids(900, 3)];
    assert.equal(prefixes.read(request(text(third), "", 3))!.knownIds, next.length);
  });

  it("gives exactly what JSON.parse and the checks give, or reads the usual way", () => {
    const first = FIRST.join(",");
    const cases: Array<[string, string, string?]> = [
      ["a continuation", `[${first},7,8]`],
      ["the same prompt again (a retry)", `[${first}]`],
      ["a branch", `[1,${first}]`],
      ["a number running on past the known part", `[${first}9]`],
      ["a number running on, and more", `[${first}99,5]`],
      ["whitespace in the array", `[${first} , 7 ,8 ]`],
      ["whitespace after the known part's comma", `[${first}, 7 ,8 ]`],
      ["a trailing comma", `[${first},]`],
      ["a trailing comma and space", `[${first}, ]`],
      ["an empty tail", `[${first},`],
      ["a negative id", `[${first},-1]`],
      ["a fraction", `[${first},1.5]`],
      ["an exponent (an integer)", `[${first},1e2]`],
      ["1.0 (an integer)", `[${first},1.0]`],
      ["past int32", `[${first},2147483648]`],
      ["null", `[${first},null]`],
      ["a string holding ]", `[${first},"]",5]`],
      ["a nested array", `[${first},[5],6]`],
      ["an object", `[${first},{"a":1}]`],
      ["a second prompt_ids after it", `[${first},7]`, `,"prompt_ids":[1]`],
      ["an escaped second prompt_ids after it", `[${first},7]`, `,"prompt\\u005fids":[1]`],
      ["an empty second prompt_ids after it", `[${first},7]`, `,"prompt_ids":[]`],
      ["a member after it", `[${first},7]`, `,"weight_version":3`],
      ["a comma with no member after it", `[${first},7]`, `,`],
      ["junk after the array", `[${first},7]`, ` x`],
      ["an empty array", `[]`],
    ];
    // Cases the reader must take itself, continuing from the remembered prompt (else agreeing proves little).
    const continued = new Set([
      "a continuation",
      "the same prompt again (a retry)",
      "whitespace after the known part's comma",
      "an exponent (an integer)",
      "1.0 (an integer)",
      "a member after it",
    ]);
    for (const [label, prompt, extra] of cases) {
      const prefixes = primed();
      const raw = request(prompt, extra ?? "");
      if (continued.has(label)) assert.equal(prefixes.read(raw)?.knownIds, FIRST.length, label);
      agree(prefixes, raw, label);
    }
  });

  it("takes only a member of the top-level object", () => {
    const known = text(FIRST);
    const raws = [
      // Nested in an object: the top level has no prompt_ids of its own.
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c1","api_details":{"x":1,"prompt_ids":${known}},"prompt_delta_ids":[1],"parent_call_id":"c0"}`,
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c1","api_details":{"x":1,"prompt_ids":${known}},"prompt_ids":[1,2]}`,
      // The pattern's comma inside a string (the string then ends, and what follows is not JSON).
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c,"prompt_ids":${known}}`,
      // An escaped quote before it, and a backslash at a string's end.
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c\\"1\\\\","prompt_ids":${known}}`,
      // Nested in an array's object of a response (whose prompt is optional): the event has no prompt.
      `{"v":1,"session_id":"s1","uid":"u1","seq":2,"ts":1,"type":"response","call_id":"c1","tool_calls":[{"id":"t","prompt_ids":${known.slice(0, -1)},7]}],"output_ids":[1],"finish_reason":"stop"}`,
      // An escaped prompt_ids before it: JSON.parse keeps the later one, in the earlier one's place.
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","prompt\\u005fids":[1],"call_id":"c1","prompt_ids":${known}}`,
      // Bytes on either side of the cut that would join into something else without the member
      // (found in review: `]0` after `"ts":1` read as `"ts":10`; `tru` … `e` as `true`).
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"prompt_ids":${known}0,"type":"request","call_id":"c1"}`,
      `{,"prompt_ids":${known}"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c1"}`,
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":,"prompt_ids":${known}"c1"}`,
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c1","train":tru,"prompt_ids":${known}e}`,
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id","prompt_ids":${known}:"c1"}`,
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c1",,"prompt_ids":${known}"train":true}`,
      // Whitespace after the array is fine.
      `{"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c1","prompt_ids":${known} \n,"train":true}`,
      // prompt_ids first: read the usual way.
      `{"prompt_ids":${known},"v":1,"session_id":"s1","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c1"}`,
      // A member before the opening brace's first: `{,` is not JSON.
      `{,"prompt_ids":${known},"v":1}`,
      // Not an object.
      `[1,"prompt_ids":${known}]`,
      // A session id with characters outside ASCII.
      `{"v":1,"session_id":"s\u00fc\u4e2d","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c1","prompt_ids":${known}}`,
    ];
    for (const raw of raws) agree(primed(), utf8.encode(raw), raw.slice(0, 120));
  });

  it("never continues an empty prompt (`[,1]` is not JSON)", () => {
    const prefixes = new PromptPrefixes({ minBytes: 0 });
    assert.equal(agree(prefixes, request("[]"), "an empty prompt").kind, "event");
    assert.equal(prefixes.size, 1);
    agree(prefixes, request("[,5]", "", 2), "after an empty prompt");
    agree(prefixes, request("[ ,5]", "", 2), "after an empty prompt, a space");
  });

  it("treats a byte order mark and invalid UTF-8 as JSON.parse does", () => {
    const bom = Uint8Array.of(0xef, 0xbb, 0xbf);
    const valid = request(`[${FIRST.join(",")},7]`);
    const cat = (...parts: Uint8Array[]) => Buffer.concat(parts);
    // At the start a byte order mark is dropped (both ways); inside, it is a character JSON refuses.
    agree(primed(), cat(bom, valid), "a byte order mark first");
    const close = valid.lastIndexOf(0x5d);
    agree(
      primed(),
      cat(valid.subarray(0, close + 1), bom, valid.subarray(close + 1)),
      "a byte order mark after ]",
    );
    const comma = valid.lastIndexOf(0x2c);
    agree(primed(), cat(valid.subarray(0, comma + 1), bom, valid.subarray(comma + 1)), "one in the new ids");
    agree(
      primed(),
      cat(valid.subarray(0, comma + 1), Uint8Array.of(0xff), valid.subarray(comma + 1)),
      "invalid UTF-8 in the new ids",
    );
    agree(primed(), cat(valid, Uint8Array.of(0xc3)), "invalid UTF-8 after the object");
  });

  it("agrees with JSON.parse on thousands of mutated continuations", () => {
    // Deterministic: a failure names its seed.
    let seed = 12345;
    const random = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
    const alphabet = Buffer.from(',[]{}":\\ 0123456789-.eu\u00ff');
    // The member after a string (call_id) and after a number (a number can be extended by a digit).
    const bases = [
      request(`[${FIRST.join(",")},7,8,9]`, `,"weight_version":3`),
      utf8.encode(
        `{"v":1,"session_id":"s1","uid":"u1","type":"request","call_id":"c1","seq":1,"ts":1` +
          `,"prompt_ids":[${FIRST.join(",")},7,8,9],"weight_version":3}`,
      ),
    ];
    let continuedRounds = 0;
    for (let round = 0; round < 6000; round++) {
      const bytes = Buffer.from(bases[round % 2]!);
      const edits = 1 + random(3);
      let mutated: Buffer = bytes;
      for (let e = 0; e < edits; e++) {
        // Mostly near and after the prompt's known part, where the reader's checks are.
        const at = random(4) === 0 ? random(mutated.length) : mutated.length - 1 - random(60);
        const c = alphabet[random(alphabet.length)]!;
        const kind = random(3);
        if (kind === 0) mutated[at] = c;
        else if (kind === 1)
          mutated = Buffer.concat([mutated.subarray(0, at), Buffer.of(c), mutated.subarray(at)]);
        else mutated = Buffer.concat([mutated.subarray(0, at), mutated.subarray(at + 1)]);
      }
      const prefixes = primed();
      if ((prefixes.read(mutated)?.knownIds ?? 0) > 0) continuedRounds++;
      agree(prefixes, mutated, `round ${round}: ${mutated.toString("latin1").slice(-90)}`);
    }
    // The mutations must reach the reader's own path often, not only its refusals.
    assert.ok(continuedRounds > 300, `${continuedRounds} of 6,000 rounds continued a prompt`);
  });

  it("falls back to the usual way when anything on its own path throws", () => {
    class Throwing extends PromptPrefixes {
      // What it reads throws when the checks look at it.
      override read(): PrefixRead {
        const obj = new Proxy({} as Record<string, unknown>, {
          get() {
            throw new Error("a bug on the reader's path");
          },
        });
        return { obj, key: "", text: new Uint8Array(0), ids: new Int32Array(0), knownBytes: 0, knownIds: 0 };
      }
    }
    const raw = request(text(FIRST));
    const outcome = agree(new Throwing({ minBytes: 0 }), raw, "the reader's object throws");
    assert.equal(outcome.kind, "event", "not an INVALID_EVENT rejection");
  });

  it("forgets a session at its end, and the sessions used longest ago past its bytes", () => {
    const prefixes = primed();
    const end = utf8.encode(
      `{"v":1,"session_id":"s1","uid":"u1","seq":9,"ts":1,"type":"session.end","status":"ok"}`,
    );
    agree(prefixes, end, "session.end");
    assert.equal(prefixes.size, 0);
    assert.equal(prefixes.heldBytes, 0);

    const small = new PromptPrefixes({ minBytes: 0, maxBytes: 3_000 });
    const session = (s: string) =>
      utf8.encode(
        `{"v":1,"session_id":"${s}","uid":"u1","seq":1,"ts":1,"type":"request","call_id":"c1","prompt_ids":${text(FIRST)}}`,
      );
    for (const s of ["a", "b", "c", "d", "e"]) agree(small, session(s), s);
    assert.ok(small.heldBytes <= 3_000, `${small.heldBytes} bytes held`);
    assert.ok(small.size >= 1 && small.size < 5);
    // The newest is kept: its continuation takes the known part.
    const next = utf8.encode(
      `{"v":1,"session_id":"e","uid":"u1","seq":2,"ts":1,"type":"request","call_id":"c2","prompt_ids":${text([...FIRST, 1])}}`,
    );
    assert.equal(small.read(next)!.knownIds, FIRST.length);
    // The oldest is not: its next prompt is parsed whole.
    const oldest = utf8.encode(
      `{"v":1,"session_id":"a","uid":"u1","seq":2,"ts":1,"type":"request","call_id":"c2","prompt_ids":${text([...FIRST, 1])}}`,
    );
    assert.equal(small.read(oldest)!.knownIds, 0);
  });

  it("counts a session's key in what it holds (uids and session ids have no length limit)", () => {
    const prefixes = new PromptPrefixes({ minBytes: 0, maxBytes: 20_000 });
    const longUid = "u".repeat(50_000);
    const raw = utf8.encode(
      `{"v":1,"session_id":"s1","uid":"${longUid}","seq":1,"ts":1,"type":"request","call_id":"c1","prompt_ids":${text(FIRST)}}`,
    );
    assert.equal(agree(prefixes, raw, "a 50,000-character uid").kind, "event");
    assert.equal(prefixes.size, 0, "an entry larger than the limit is not kept");
    assert.equal(prefixes.heldBytes, 0);
    // A prompt larger than the limit is not kept either, and the session's smaller one is dropped with it.
    agree(prefixes, request(text(FIRST)), "a small prompt");
    assert.equal(prefixes.size, 1);
    agree(prefixes, request(text([...FIRST, ...ids(1, 6_000)]), "", 2), "a prompt past the limit");
    assert.equal(prefixes.size, 0);
    assert.equal(prefixes.heldBytes, 0);
    agree(prefixes, request(text(FIRST)), "a short key");
    assert.equal(prefixes.size, 1);
    assert.ok(prefixes.heldBytes > FIRST.length * 4 + 2 * "2:u1s1".length);
  });

  it("leaves events and prompts below its minimum to the usual way", () => {
    const prefixes = new PromptPrefixes();
    assert.equal(prefixes.read(request(text(FIRST))), null, "a 40-token prompt is not worth remembering");
    const long = ids(10_000, 2_000);
    assert.ok(prefixes.read(request(text(long))) !== null, "a 2,000-token prompt is");
  });
});
