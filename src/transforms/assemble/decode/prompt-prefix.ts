/**
 * Full prompts in JSON, parsed once per token. A third-party producer sends each call's whole prompt
 * (`prompt_ids`), and an agent's next prompt begins with its last one: in the shared harness's 32-turn
 * sessions 94% of the prompt tokens a decode worker parses were parsed before, in the session's previous
 * request. A decode worker remembers each session's last long prompt array as bytes and as ids; a prompt
 * whose bytes begin with those bytes (up to a comma) takes those ids as they are, and only the rest is
 * parsed. Prompts under PROMPT_PREFIX_MIN_BYTES are parsed whole: for them the bookkeeping costs what it
 * saves.
 *
 * Exact or nothing: what this reader returns is what JSON.parse and the token checks give for the whole
 * event, or null, and the event is read the usual way. The member must be in the top-level object (a
 * scan of the bytes before it, exact for valid JSON, which the event without the member is shown to be by
 * parsing it), a delimiter must follow it (so the bytes on either side of the cut read as they would
 * around it), its array must hold plain values (the first `]` closes it, and what it holds parses), and
 * no other prompt_ids may follow. Bytes equal to bytes already read as token ids are those ids.
 */
import type { GatewayEvent } from "../../../schemas/events.ts";
import { sessionKey } from "../../../schemas/session.ts";
import { CheckedTokenIds, copyTokenIds, tokenIdArray } from "../../../schemas/tokens.ts";

/** The member this reader looks for; prompt_ids as an object's first member is read the usual way. */
const KEY = Buffer.from(',"prompt_ids":[');
const QUOTE = 0x22;
const COMMA = 0x2c;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;

/**
 * Bytes of remembered prompts (their text and ids, with room to grow) a decode worker keeps, at most:
 * the sessions used longest ago are forgotten first. 16 MiB holds ~1,000 sessions' 1,000-token prompts;
 * beyond that a prompt is parsed whole, as without this reader.
 */
export const PROMPT_PREFIX_BYTES = 16 * 1024 * 1024;

/**
 * Events shorter than this, and prompt arrays shorter than this, are read the usual way: for a prompt of
 * a few hundred tokens finding and checking the member, and remembering it, cost what skipping its known
 * part saves (BENCHMARKS.md). 4 KiB is ~700 tokens; an agent's prompts soon pass it.
 */
export const PROMPT_PREFIX_MIN_BYTES = 4096;

/** Per remembered prompt: what the Map entry and the two buffers cost besides their bytes. */
const ENTRY_OVERHEAD = 200;

// As decode-core reads a whole event: a byte order mark at its start is dropped.
const utf8 = new TextDecoder("utf-8", { fatal: true });
// Inside an event a byte order mark is a character (JSON.parse refuses it there): kept.
const utf8Inner = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** A session's last prompt: its array's bytes from `[` up to, not including, its `]`, and its ids. */
interface Remembered {
  /** The session key's length: a key is as long as its uid and session id, which no schema bounds. */
  keyLength: number;
  text: Uint8Array;
  textLength: number;
  ids: Int32Array;
  idsLength: number;
}

/** An event read here: the object JSON.parse gives, its prompt_ids already checked token ids. */
export interface PrefixRead {
  obj: Record<string, unknown>;
  key: string;
  /** The prompt array's bytes (a view of the record's). */
  text: Uint8Array;
  ids: Int32Array;
  /** How many of those bytes and ids the session's remembered prompt already holds (0: none). */
  knownBytes: number;
  knownIds: number;
}

export class PromptPrefixes {
  private readonly sessions = new Map<string, Remembered>();
  private bytes = 0;
  private readonly maxBytes: number;
  private readonly minBytes: number;

  constructor(limits: { maxBytes?: number; minBytes?: number } = {}) {
    this.maxBytes = limits.maxBytes ?? PROMPT_PREFIX_BYTES;
    this.minBytes = limits.minBytes ?? PROMPT_PREFIX_MIN_BYTES;
  }

  /** Bytes held now. */
  get heldBytes(): number {
    return this.bytes;
  }

  /** Sessions remembered now. */
  get size(): number {
    return this.sessions.size;
  }

  /**
   * Reads an event whose top-level `prompt_ids` is a JSON array; null: read it the usual way (no such
   * member, another form, or anything this reader does not take exactly as JSON.parse would).
   */
  read(raw: Uint8Array): PrefixRead | null {
    if (raw.byteLength < this.minBytes) return null;
    const buf = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
    const at = buf.indexOf(KEY);
    if (at < 0) return null;
    const open = at + KEY.length - 1;
    const close = buf.indexOf(CLOSE_ARRAY, open);
    if (close < 0 || close - open < this.minBytes || !atTopLevel(buf, at)) return null;
    // The member must end where the next one (or the object) begins: `[…]0` after `"ts":1` would
    // otherwise parse, cut out, as `"ts":10`. With a delimiter on both sides of the cut, the bytes around
    // it read the same with or without the member.
    if (!followedByDelimiter(buf, close + 1)) return null;
    try {
      const rest = JSON.parse(
        utf8.decode(buf.subarray(0, at)) + utf8Inner.decode(buf.subarray(close + 1)),
      ) as unknown;
      // A second prompt_ids would be the one JSON.parse keeps. (uid required: `{,"prompt_ids"…` is not JSON.)
      if (!isObject(rest) || Object.hasOwn(rest, "prompt_ids")) return null;
      const { uid, session_id } = rest;
      if (typeof uid !== "string" || typeof session_id !== "string") return null;
      const key = sessionKey(uid, session_id);
      const text = buf.subarray(open, close);
      const read = this.ids(key, text);
      if (read === null) return null;
      rest.prompt_ids = new CheckedTokenIds(read.ids);
      return { obj: rest, key, text, ...read };
    } catch {
      return null;
    }
  }

  /** The ids of a prompt array's bytes, those the session's last prompt already had taken as they are. */
  private ids(
    key: string,
    text: Uint8Array,
  ): { ids: Int32Array; knownBytes: number; knownIds: number } | null {
    const last = this.sessions.get(key);
    if (last !== undefined && last.idsLength > 0) {
      const n = last.textLength;
      const known = last.text.subarray(0, n);
      // A continuation: the last prompt's elements, a comma, at least one more (`[1,2,]` is not JSON).
      if (text.length > n + 1 && text[n] === COMMA && Buffer.compare(known, text.subarray(0, n)) === 0) {
        const added = JSON.parse("[" + utf8Inner.decode(text.subarray(n + 1)) + "]") as unknown[];
        if (added.length === 0) return null;
        const ids = tokenIdArray(last.idsLength + added.length);
        ids.set(last.ids.subarray(0, last.idsLength));
        if (copyTokenIds(added, ids, last.idsLength) !== null) return null;
        return { ids, knownBytes: n, knownIds: last.idsLength };
      }
      if (text.length === n && Buffer.compare(known, text) === 0) {
        const ids = tokenIdArray(last.idsLength);
        ids.set(last.ids.subarray(0, last.idsLength));
        return { ids, knownBytes: n, knownIds: last.idsLength };
      }
    }
    const all = JSON.parse(utf8Inner.decode(text) + "]") as unknown[];
    const ids = tokenIdArray(all.length);
    return copyTokenIds(all, ids, 0) === null ? { ids, knownBytes: 0, knownIds: 0 } : null;
  }

  /**
   * An event was accepted: its prompt, when read here, is remembered for its session's next one; a
   * session's end forgets it.
   */
  accepted(event: GatewayEvent, read: PrefixRead | null): void {
    if (event.type === "session.end") this.forget(sessionKey(event.uid, event.session_id));
    else if (read !== null) this.remember(read);
  }

  /**
   * Remembers a prompt for its session's next one. A continuation adds its new bytes and ids to what the
   * session holds (room doubles as it grows); another prompt replaces it. Copies: the record's bytes
   * are reused and the ids cross to the ingest thread.
   */
  private remember(read: PrefixRead): void {
    const { key, text, ids } = read;
    // A prompt too large to keep at all is not copied (a 100 MB prompt would be allocated, then dropped).
    if (text.length + ids.byteLength + 2 * key.length + ENTRY_OVERHEAD > this.maxBytes) {
      this.forget(key);
      return;
    }
    let held = this.sessions.get(key);
    if (held !== undefined && read.knownBytes > 0 && held.textLength === read.knownBytes) {
      this.sessions.delete(key); // re-inserted below: the Map's order is the order of use
      if (text.length > held.text.length || ids.length > held.ids.length) {
        this.bytes -= entrySize(held);
        held = grown(held, key, text.length, ids.length);
        this.bytes += entrySize(held);
      }
      held.text.set(text.subarray(held.textLength), held.textLength);
      held.textLength = text.length;
      held.ids.set(ids.subarray(held.idsLength), held.idsLength);
      held.idsLength = ids.length;
    } else {
      this.forget(key);
      held = grown(null, key, text.length, ids.length);
      held.text.set(text);
      held.textLength = text.length;
      held.ids.set(ids);
      held.idsLength = ids.length;
      this.bytes += entrySize(held);
    }
    if (entrySize(held) > this.maxBytes) {
      this.bytes -= entrySize(held);
      return;
    }
    this.sessions.set(key, held);
    for (const [oldest, entry] of this.sessions) {
      if (this.bytes <= this.maxBytes) break;
      this.sessions.delete(oldest);
      this.bytes -= entrySize(entry);
    }
  }

  private forget(key: string): void {
    const held = this.sessions.get(key);
    if (held === undefined) return;
    this.sessions.delete(key);
    this.bytes -= entrySize(held);
  }
}

/** Room for `textBytes` and `ids` (half as much again, for the next turns), what `from` held copied in. */
function grown(from: Remembered | null, key: string, textBytes: number, ids: number): Remembered {
  const text = new Uint8Array(textBytes + (textBytes >> 1));
  const idArray = new Int32Array(ids + (ids >> 1));
  const keyLength = key.length;
  if (from === null) return { keyLength, text, textLength: 0, ids: idArray, idsLength: 0 };
  text.set(from.text.subarray(0, from.textLength));
  idArray.set(from.ids.subarray(0, from.idsLength));
  return { keyLength, text, textLength: from.textLength, ids: idArray, idsLength: from.idsLength };
}

/** What an entry holds: its buffers, its key (two bytes a character at most) and the Map's own share. */
const entrySize = (e: Remembered) => e.text.byteLength + e.ids.byteLength + 2 * e.keyLength + ENTRY_OVERHEAD;

/** Whether the first byte at or after `at` that is not JSON whitespace is `,` or `}`. */
function followedByDelimiter(bytes: Uint8Array, at: number): boolean {
  for (let i = at; i < bytes.length; i++) {
    const c = bytes[i]!;
    if (c === COMMA || c === CLOSE_OBJECT) return true;
    if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) return false;
  }
  return false;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Whether position `at` is in the top-level object, outside any string. Exact when the bytes before it
 * begin a valid JSON document (inside a string only `\` escapes, and only `"` ends it).
 */
function atTopLevel(bytes: Uint8Array, at: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < at; i++) {
    const c = bytes[i]!;
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_OBJECT || c === OPEN_ARRAY) depth++;
    else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) depth--;
  }
  return depth === 1 && !inString;
}
