import { strict as assert } from "node:assert";
import { it } from "node:test";
import { mulberry32 } from "../../test/helpers/prng.ts";
import { EVENT_TYPES, eventSchemas, samplingSettings, type EventType } from "./events.ts";
import { FAST_FIELDS, fastEvent, SAMPLING_KEYS } from "./fast-events.ts";
import { packRoutedExperts } from "./routed-experts.ts";
import { packLogprobs, packTokenIds } from "./tokens.ts";

it("knows every field of every event schema, and no other", () => {
  for (const type of EVENT_TYPES) {
    assert.deepEqual(
      [...FAST_FIELDS[type]].sort(),
      Object.keys(eventSchemas[type].shape).sort(),
      `${type}: a field was added to events.ts; teach fast-events.ts about it`,
    );
  }
  // The zod-free constants and checks decode workers use (event-constants.ts) are the schemas' own.
  assert.deepEqual(EVENT_TYPES, Object.keys(eventSchemas));
  assert.deepEqual([...SAMPLING_KEYS].sort(), Object.keys(samplingSettings.shape).sort());
});

const envelope = { v: 1, session_id: "s", uid: "u", seq: 3, ts: 1_700_000_000_000 };
/** Valid values of every optional and required field, by name (two forms each where there are two). */
const good: Record<string, unknown[]> = {
  gen: [1, 65_538],
  sample_index: [0, 7],
  group_size: [1, 8],
  metadata: [{ answer: "4" }, {}],
  call_id: ["c1"],
  prompt_ids: [[1, 2, 3], packTokenIds([1, 2, 3])],
  parent_call_id: ["c0"],
  prompt_delta_ids: [[4], packTokenIds([])],
  messages: [[{ role: "user", content: "hi" }], [{ role: "assistant", content: null, tool_calls: [{}] }]],
  tools: [[{ type: "function" }], []],
  choice_index: [0, 2],
  api: ["messages", "responses"],
  api_details: [{ response_id: "resp_1", store: true }, {}],
  train: [false, true],
  stop_reason: ["end_turn", "max_output_tokens"],
  prompt_mode: ["continued", "engine"],
  messages_offset: [0, 4],
  malformed_tool_calls: [0, 2],
  weight_version: [0, 12],
  output_ids: [[5, 6], packTokenIds([5, 6])],
  logprobs: [[-0.5, -1], packLogprobs([-0.5, -1])],
  output_versions: [[3, 4], packTokenIds([4, 4])],
  // Two output ids: two tokens, or one (the last was never an input); prompts have at least one token.
  routed_experts: [
    packRoutedExperts([1, 2, 3, -1], "int16", [2, 1, 2], 8),
    packRoutedExperts([0, 7], "uint8", [1, 2, 1]),
  ],
  prompt_routed_experts: [
    packRoutedExperts([5, 6], "int32", [1, 1, 2]),
    packRoutedExperts([], "uint16", [0, 3, 2]),
  ],
  sampling: [
    { temperature: 0.7, top_p: 0.95, logprobs_mode: "raw", engine: "vllm" },
    { temperature: 0, top_p: 1, top_k: -1, min_p: 0, repetition_penalty: 1.1, logprobs_mode: "processed" },
    {},
  ],
  finish_reason: ["stop", "abort", ""],
  text: ["hello", ""],
  tool_calls: [[{ id: "t" }], []],
  value: [1, -0.5, 0],
  target: ["session", "c1"],
  stage: ["env", "judge"],
  key: ["k1"],
  finished: [true, false],
  info: [{ why: "x" }],
  status: ["ok", "aborted", "failed"],
};
/** Values that are wrong somewhere: zod must reject each where the fast path does not hand over. */
const odd: unknown[] = [
  null,
  "",
  "x",
  -1,
  -0,
  1.5,
  2 ** 53,
  Infinity,
  NaN,
  true,
  [],
  {},
  [1, -2],
  [1.5],
  [2 ** 31],
  ["1"],
  { b64: "AAA" },
  { b64: 5 },
  [{ role: 5 }],
  [{ role: "user", tool_calls: {} }],
  [null],
  { a: 1 },
  { temperature: -1 },
  { top_k: 1.5 },
  { logprobs_mode: "logits" },
  { top_p: 0 },
  { top_k: -2 },
  { min_p: 1.5 },
  { repetition_penalty: 0 },
  { engine: 5 },
  { temperature: null },
  { temperature: 0.7, seed: 1 },
  { constructor: 1 },
  packRoutedExperts([9], "int16", [1, 1, 1], 8),
  packRoutedExperts([-2], "int16", [1, 1, 1]),
  packRoutedExperts([255], "uint8", [1, 1, 1]),
  { ...packRoutedExperts([1, 2], "int16", [1, 1, 2]), shape: [1, 1, 3] },
  { ...packRoutedExperts([1], "int16", [1, 1, 1]), dtype: "int8" },
];

function pick<T>(random: () => number, list: readonly T[]): T {
  return list[Math.floor(random() * list.length)]!;
}

function validEvent(type: EventType, random: () => number): Record<string, unknown> {
  const event: Record<string, unknown> = { ...envelope, type };
  const required = new Set(["call_id", "output_ids", "finish_reason", "value", "status"]);
  for (const field of FAST_FIELDS[type]) {
    if (field in event) continue;
    if (required.has(field) || random() < 0.5) event[field] = pick(random, good[field]!);
  }
  // The prompt is sent in one form.
  if (type === "request" || type === "response") {
    if (event.prompt_ids !== undefined) {
      delete event.parent_call_id;
      delete event.prompt_delta_ids;
    }
  }
  return event;
}

it("gives zod's result or hands the event to zod, on 20,000 generated events", () => {
  const random = mulberry32(11);
  let fast = 0;
  for (let n = 0; n < 20_000; n++) {
    const type = pick(random, EVENT_TYPES);
    const event = validEvent(type, random);
    const mutations = n % 4 === 0 ? 0 : 1 + Math.floor(random() * 3);
    for (let m = 0; m < mutations; m++) {
      const field = pick(random, [...Object.keys(event), "extra", "another"]);
      if (random() < 0.2) delete event[field];
      else event[field] = random() < 0.3 ? pick(random, good[field] ?? odd) : pick(random, odd);
    }
    const got = fastEvent(type, structuredClone(event));
    const want = eventSchemas[type].safeParse(structuredClone(event));
    if (got === null) continue;
    fast++;
    assert.ok(want.success, `the fast path accepted what zod rejects: ${JSON.stringify(event)}`);
    assert.deepEqual(got, want.data, JSON.stringify(event));
  }
  // At least the quarter left unmutated took the fast path (valid events always do; next test).
  assert.ok(fast > 5_000, `only ${fast} events took the fast path`);
});

it("takes the fast path for every valid event", () => {
  const random = mulberry32(12);
  for (let n = 0; n < 2_000; n++) {
    const type = pick(random, EVENT_TYPES);
    const event = validEvent(type, random);
    event.extra = "stripped, as zod strips it";
    const got = fastEvent(type, event);
    assert.notEqual(got, null, JSON.stringify(event));
    assert.deepEqual(got, eventSchemas[type].parse(event));
  }
});
