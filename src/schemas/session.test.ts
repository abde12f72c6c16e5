import { strict as assert } from "node:assert";
import { it } from "node:test";
import { sessionKey } from "./session.ts";

it("keys sessions by uid and session id, no two pairs alike, asked in runs or alternately", () => {
  const pairs: Array<[string, string]> = [
    ["", ""],
    ["a", "b"],
    ["a", "b"],
    ["ab", ""],
    ["", "ab"],
    ["a\u0000x", "y"],
    ["a", "x\u0000y"],
    ["a", "b"],
    ["", ""],
  ];
  const keys = pairs.map(([u, s]) => sessionKey(u, s));
  assert.deepEqual(keys, ["0:", "1:ab", "1:ab", "2:ab", "0:ab", "3:a\u0000xy", "1:ax\u0000y", "1:ab", "0:"]);
  // Equal strings that are different objects (as each event's decoded strings are) give the same key.
  const [u, s] = [["q", "0"].join(""), ["r", "1"].join("")];
  assert.equal(sessionKey(u, s), sessionKey(`q${0}`, `r${1}`));
});
