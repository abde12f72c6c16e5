/**
 * A decode worker's events, packed for the trip to the ingest thread. postMessage's structured clone
 * writes every event as a generic object (each property's name, a tag per value) and reads it back
 * property by property: on the shared harness's short workload that was ~40% of what decoding the events
 * cost (BENCHMARKS.md). Here an event becomes its shape (its keys, in order, sent once per worker) and its
 * values in flat arrays: numbers in one Float64Array, strings in one array (a short string once per
 * message, however many events repeat it), typed arrays as where they lie in the chunk's transferred
 * blocks. The ingest thread builds each event with its shape's own object
 * literal, so events of one shape share one hidden class as they do when JSON.parse makes them.
 *
 * Exact or not used: anything but a number, string, boolean, null, undefined, or an Int32Array /
 * Float32Array in a transferred buffer (nested objects, arrays, other views) travels as it did, by
 * structured clone, in `others`; so does an event whose keys are not plain identifiers.
 */

const NUMBER = 0;
const STRING = 1;
const INT32 = 2;
const FLOAT32 = 3;
const TRUE = 4;
const FALSE = 5;
const NULL = 6;
const UNDEFINED = 7;
/** The next value of `others`, structured-cloned as before. */
const OTHER = 8;
/** A string this message already holds: the next of `stringRefs` says which. */
const STRING_AGAIN = 9;

/**
 * Strings up to this long are sent once per message (a session's uid and session id, call ids, event types
 * and finish reasons repeat from event to event); longer ones each time, as hashing them costs what it saves.
 */
const INTERNED_MAX_LENGTH = 64;

/** Keys an object literal can name as they are (plainKey). */
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** An identifier, and not `__proto__`, which in an object literal sets the prototype instead. */
function plainKey(key: string): boolean {
  return IDENTIFIER.test(key) && key !== "__proto__";
}

/** Shapes remembered per event type for the quick comparison (a type's optional fields vary). */
const RECENT_SHAPES = 4;

/** Events of one chunk, packed; what crosses to the ingest thread in a decode reply. */
export interface PackedEvents {
  /** Per event, its shape's id. */
  shapes: Int32Array;
  /** Shapes first used in this message (ids continue from the last message's): their keys. */
  newShapes: string[][];
  /** Per value, its kind. */
  tags: Uint8Array;
  numbers: Float64Array;
  /** Each string once (up to INTERNED_MAX_LENGTH long), in order of first use. */
  strings: string[];
  /** Per STRING_AGAIN value, its string's index in `strings`. */
  stringRefs: Int32Array;
  /** Per typed array: its buffer (an index into `buffers`), its byte offset, its length. */
  views: Int32Array;
  buffers: ArrayBuffer[];
  /** Values packed as they are (structured clone). */
  others: unknown[];
}

/** The packed arrays' own buffers, to transfer with the message. */
export function packedArrays(p: PackedEvents): ArrayBuffer[] {
  return [
    p.shapes.buffer,
    p.tags.buffer,
    p.numbers.buffer,
    p.views.buffer,
    p.stringRefs.buffer,
  ] as ArrayBuffer[];
}

/** Growable scratch arrays, copied out at their used length for each message. */
class Scratch<T extends Uint8Array | Int32Array | Float64Array> {
  array: T;
  length = 0;
  private readonly make: (n: number) => T;
  constructor(make: (n: number) => T) {
    this.make = make;
    this.array = make(1024);
  }
  push(v: number): void {
    if (this.length === this.array.length) {
      const grown = this.make(this.array.length * 2);
      grown.set(this.array);
      this.array = grown;
    }
    this.array[this.length++] = v;
  }
  take(): T {
    const out = this.array.slice(0, this.length) as T;
    this.length = 0;
    return out;
  }
}

/** A decode worker's side: events in, PackedEvents out. One per worker (its shapes are numbered once). */
export class EventPacker {
  private readonly shapeIds = new Map<string, number>();
  private readonly shapeKeys: string[][] = [];
  /** Per event type, the shapes it was last seen with, most recent first. */
  private readonly byType = new Map<string, number[]>();
  private newShapes: string[][] = [];
  private readonly shapes = new Scratch((n) => new Int32Array(n));
  private readonly tags = new Scratch((n) => new Uint8Array(n));
  private readonly numbers = new Scratch((n) => new Float64Array(n));
  private readonly views = new Scratch((n) => new Int32Array(n));
  private readonly stringRefs = new Scratch((n) => new Int32Array(n));
  private strings: string[] = [];
  /** This message's strings so far, by value: where each lies in `strings`. */
  private stringAt = new Map<string, number>();
  private others: unknown[] = [];
  private buffers: ArrayBuffer[] = [];
  private bufferIndex = new Map<ArrayBuffer, number>();

  /**
   * Makes `buffers` (the chunk's transferred buffers) the ones typed arrays may lie in; a view of any
   * other buffer travels in `others`.
   */
  begin(buffers: ArrayBuffer[]): void {
    this.buffers = buffers;
    this.bufferIndex = new Map();
    for (let i = 0; i < buffers.length; i++) this.bufferIndex.set(buffers[i]!, i);
  }

  /** Adds an event (a flat object); false when it cannot be packed (the caller sends it as it is). */
  add(event: object): boolean {
    const id = this.shapeOf(event);
    if (id < 0) return false;
    this.shapes.push(id);
    const keys = this.shapeKeys[id]!;
    const values = event as Record<string, unknown>;
    for (let i = 0; i < keys.length; i++) this.value(values[keys[i]!]);
    return true;
  }

  /**
   * The event's shape id, -1 when its keys are not all plain. Events of one type mostly share a shape: the
   * shapes last seen with its `type` are compared key by key first (keys from JSON.parse are internalized,
   * so each comparison is a pointer's), before keys are checked and joined for the map.
   */
  private shapeOf(event: object): number {
    const type = (event as { type?: unknown }).type;
    const recent = typeof type === "string" ? this.byType.get(type) : undefined;
    if (recent !== undefined) {
      for (let r = 0; r < recent.length; r++) {
        const keys = this.shapeKeys[recent[r]!]!;
        let i = 0;
        let same = true;
        for (const key in event) {
          if (key !== keys[i++]) {
            same = false;
            break;
          }
        }
        if (same && i === keys.length) return recent[r]!;
      }
    }
    const keys: string[] = [];
    for (const key in event) {
      if (!plainKey(key)) return -1;
      keys.push(key);
    }
    const joined = keys.join(",");
    let id = this.shapeIds.get(joined);
    if (id === undefined) {
      id = this.shapeKeys.length;
      this.shapeIds.set(joined, id);
      this.shapeKeys.push(keys);
      this.newShapes.push(keys);
    }
    if (typeof type === "string") {
      const list = recent ?? [];
      if (list.length === RECENT_SHAPES) list.pop();
      list.unshift(id);
      if (recent === undefined) this.byType.set(type, list);
    }
    return id;
  }

  private value(v: unknown): void {
    switch (typeof v) {
      case "number":
        this.tags.push(NUMBER);
        this.numbers.push(v);
        return;
      case "string": {
        if (v.length <= INTERNED_MAX_LENGTH) {
          const at = this.stringAt.get(v);
          if (at !== undefined) {
            this.tags.push(STRING_AGAIN);
            this.stringRefs.push(at);
            return;
          }
          this.stringAt.set(v, this.strings.length);
        }
        this.tags.push(STRING);
        this.strings.push(v);
        return;
      }
      case "boolean":
        this.tags.push(v ? TRUE : FALSE);
        return;
      case "undefined":
        this.tags.push(UNDEFINED);
        return;
    }
    if (v === null) {
      this.tags.push(NULL);
      return;
    }
    if (v instanceof Int32Array || v instanceof Float32Array) {
      const at = this.bufferIndex.get(v.buffer as ArrayBuffer);
      if (at !== undefined) {
        this.tags.push(v instanceof Int32Array ? INT32 : FLOAT32);
        this.views.push(at);
        this.views.push(v.byteOffset);
        this.views.push(v.length);
        return;
      }
    }
    this.tags.push(OTHER);
    this.others.push(v);
  }

  /** The events added since the last call, packed (the buffers given to `begin` travel in it). */
  take(): PackedEvents {
    const out: PackedEvents = {
      shapes: this.shapes.take(),
      newShapes: this.newShapes,
      tags: this.tags.take(),
      numbers: this.numbers.take(),
      strings: this.strings,
      stringRefs: this.stringRefs.take(),
      views: this.views.take(),
      buffers: this.buffers,
      others: this.others,
    };
    this.newShapes = [];
    this.strings = [];
    this.stringAt = new Map();
    this.others = [];
    this.buffers = [];
    this.bufferIndex = new Map();
    return out;
  }
}

type Build = (r: EventUnpacker) => object;

/** The ingest thread's side, one per decode worker: PackedEvents in, events out, in order. */
export class EventUnpacker {
  private readonly builds: Build[] = [];
  private packed: PackedEvents | null = null;
  private event = 0;
  private tag = 0;
  private number = 0;
  private string = 0;
  private stringRef = 0;
  private view = 0;
  private other = 0;

  /** Starts reading a message's events (its new shapes are learnt first). */
  begin(packed: PackedEvents): void {
    for (const keys of packed.newShapes) this.builds.push(builder(keys));
    this.packed = packed;
    this.event = this.tag = this.number = this.string = this.stringRef = this.view = this.other = 0;
  }

  /** The message's next event. */
  next(): object {
    const p = this.packed!;
    return this.builds[p.shapes[this.event++]!]!(this);
  }

  /** The next value (called by the shapes' builders). */
  value(): unknown {
    const p = this.packed!;
    switch (p.tags[this.tag++]) {
      case NUMBER:
        return p.numbers[this.number++];
      case STRING:
        return p.strings[this.string++];
      case STRING_AGAIN:
        return p.strings[p.stringRefs[this.stringRef++]!];
      case INT32: {
        const at = this.view;
        this.view += 3;
        return new Int32Array(p.buffers[p.views[at]!]!, p.views[at + 1], p.views[at + 2]);
      }
      case FLOAT32: {
        const at = this.view;
        this.view += 3;
        return new Float32Array(p.buffers[p.views[at]!]!, p.views[at + 1], p.views[at + 2]);
      }
      case TRUE:
        return true;
      case FALSE:
        return false;
      case NULL:
        return null;
      case UNDEFINED:
        return undefined;
      default:
        return p.others[this.other++];
    }
  }
}

/**
 * An object literal with the shape's keys in order, each value read in turn. The keys are plain
 * identifiers (plainKey), so the generated source names them and nothing else.
 */
function builder(keys: string[]): Build {
  for (const key of keys) {
    if (!plainKey(key)) throw new Error(`a packed event's key is not an identifier: ${key}`);
  }
  return new Function("r", `return { ${keys.map((k) => `${k}: r.value()`).join(", ")} };`) as Build;
}
