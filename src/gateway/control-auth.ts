/**
 * Who may drive the training signal. The agent being trained reaches the gateway (its model calls go there)
 * and runs arbitrary code, so the routes that reward, end, start, read and delete sessions and set the
 * policy version (the control routes) are the trainer's alone once a control token is set: they require
 * `Authorization: Bearer <token>`; without credentials they answer 401, with anything else (a session's
 * own key, a wrong token) 403. Model calls never need the token.
 *
 * The token comes from `$TRAJFLOW_CONTROL_TOKEN` or a file (`control_token_file`), never a command-line
 * value (command lines are visible to the host's other users). Only its SHA-256 is kept, and a presented
 * token is hashed and compared in constant time: how long a refusal takes says nothing of how much of a
 * guess was right. The token is never logged, written to an event, put in a metric or an error message.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import type { IncomingMessage } from "node:http";

/** The shortest token accepted: a guessable one would protect nothing. */
export const MIN_TOKEN_LENGTH = 16;

/** What a request presented for a control route. */
export type ControlVerdict = "allowed" | "missing" | "wrong";

const digest = (token: string | Buffer) => createHash("sha256").update(token).digest();

/** The problems of a control token (empty when it is fine): a config error lists them all. */
export function tokenProblems(token: string): string[] {
  const problems: string[] = [];
  if (token.length < MIN_TOKEN_LENGTH)
    problems.push(`the control token has fewer than ${MIN_TOKEN_LENGTH} characters`);
  // A header cannot carry control characters or outer spaces: such a token could never be presented.
  if ([...token].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f))
    problems.push("the control token holds a control character");
  if (token.trim() !== token) problems.push("the control token starts or ends with whitespace");
  return problems;
}

/** A control token read from a file: its first line, without the line break. */
export function readTokenFile(path: string): string {
  return readFileSync(path, "utf8").replace(/\r?\n[\s\S]*$/, "");
}

/** Compares two equal-length buffers; node's `timingSafeEqual` (a test passes a spy that delegates to it). */
export type DigestCompare = (a: Buffer, b: Buffer) => boolean;

export class ControlAuth {
  /** SHA-256 of the token, or null: no token, every control route open (the default, on loopback). */
  private readonly expected: Buffer | null;
  private readonly equal: DigestCompare;

  constructor(token: string | undefined, equal: DigestCompare = timingSafeEqual) {
    this.expected = token === undefined ? null : digest(token);
    this.equal = equal;
  }

  get enabled(): boolean {
    return this.expected !== null;
  }

  /** Whether `req` may use a control route. */
  check(req: IncomingMessage): ControlVerdict {
    if (this.expected === null) return "allowed";
    const auth = req.headers.authorization;
    if (auth === undefined || auth === "") return "missing";
    const presented = /^Bearer /i.test(auth) ? auth.slice(7).trim() : "";
    // Hashing first gives equal lengths for timingSafeEqual, whatever was presented.
    return this.equal(digest(presented), this.expected) ? "allowed" : "wrong";
  }
}
