/**
 * Output rows: one training-ready trajectory per row. docs/output.md describes every column; their Arrow
 * schema, the contract both Parquet and Arrow IPC outputs follow, is in trajectory-arrow.ts (apart, so
 * the ingest thread does not load apache-arrow).
 */

export const OUTPUT_SCHEMA_VERSION = "4";

/** Per-row flags. Each marks something a trainer may want to filter on; all are counted in metrics. */
export const RowFlags = {
  /** The client re-rendered a sampled turn into different tokens; the row forked to keep it honest. */
  DRIFT: "drift",
  /** Drift under the `realign` policy: the drifted response is in this row with mask 0. */
  DRIFT_REALIGNED: "drift_realigned",
  /** The prompt rewrote an earlier assistant turn (messages differ), so the row is a genuine branch. */
  HISTORY_EDITED: "history_edited",
  /** An earlier attempt with the same prompt and no continuation (a retry's orphan) was dropped. */
  ORPHAN_DROPPED: "orphan_dropped",
  /** The row was longer than `max_tokens` and lost its tail. */
  TRUNCATED: "truncated",
  /** A trained span has no logprobs, so `rollout_log_probs` is null. */
  MISSING_LOGPROBS: "missing_logprobs",
  /** A turn on this row finished with `abort` (e.g. preempted by a weight update). */
  ABORTED_TURN: "aborted_turn",
  /** The trained turns of this row were sampled with different settings (`sampling` differs). */
  MIXED_SAMPLING: "mixed_sampling",
  /** A turn on this row finished with `length` (cut off by the token limit). */
  LENGTH_TURN: "length_turn",
  /** A turn on this row was recorded with train: false (a side call): its tokens are context (mask 0). */
  UNTRAINED_TURN: "untrained_turn",
  /** Events of this session were stranded behind a seq gap and dead-lettered. */
  SEQ_GAP: "seq_gap",
  /** A reward said the episode did not finish. */
  UNFINISHED: "unfinished",
  /** A request never got a response. */
  UNANSWERED_REQUEST: "unanswered_request",
  /**
   * Group mode: the session claimed a group larger than `max_group_size` and was written alone
   * (group_size 1; dead letter GROUP_TOO_LARGE): its advantage has no group to be relative to.
   */
  GROUP_TOO_LARGE: "group_too_large",
  /** Group mode: a stand-in for a missing or failed session (sample_mask 0). */
  PLACEHOLDER: "placeholder",
  /** The row's policy was older than the staleness limit. */
  STALE: "stale",
  /** The session was finalized before its end because the open-session limits were reached. */
  SESSION_CUT: "session_cut",
  /** A reward stage failed on this row after retries: its value is null (dead letter REWARD_FAILED). */
  REWARD_FAILED: "reward_failed",
  /** A required reward stage did not report before the reward timeout: its value is null. */
  REWARD_TIMEOUT: "reward_timeout",
  /** A per-turn reward, discounted along the tree, summed past float64's range: that turn's value is null. */
  REWARD_OVERFLOW: "reward_overflow",
} as const;
export type RowFlag = (typeof RowFlags)[keyof typeof RowFlags];

/** Normalised finish reasons. */
export type FinishReason = "stop" | "length" | "tool_calls" | "abort" | "unknown";

/**
 * How the session ended: from `session.end`, or `timeout` when it went idle or the input ended first;
 * `missing` for a group-mode placeholder of a session that never arrived.
 */
export type SessionStatus = "ok" | "aborted" | "failed" | "timeout" | "missing";

/** An Arrow leaf type, as Schema.fbs names it (its `Int` bit width, its `FloatingPoint` precision). */
export type ArrowLeaf =
  | { type: "Int"; bits: 8 | 16 | 32 | 64 }
  | { type: "FloatingPoint"; precision: 1 | 2 }
  | { type: "Utf8" | "Binary" | "Bool" };

/**
 * What a leaf value can be, with everything Arrow needs of it: its Arrow type, and the typed array a row
 * holds a list of them in (binary: one value's bytes). A new kind is an entry here, its Parquet type in
 * the trajflow writer (sinks/files/encoders/parquet-trajflow.ts) and in parquetjs-lite's (parquetjs.ts);
 * Arrow, parquet-wasm and the encoders' hand-over derive from this table.
 */
export const VALUE_KINDS = {
  utf8: { arrow: { type: "Utf8" }, array: null },
  binary: { arrow: { type: "Binary" }, array: Uint8Array },
  int8: { arrow: { type: "Int", bits: 8 }, array: Int8Array },
  int32: { arrow: { type: "Int", bits: 32 }, array: Int32Array },
  float32: { arrow: { type: "FloatingPoint", precision: 1 }, array: Float32Array },
  float64: { arrow: { type: "FloatingPoint", precision: 2 }, array: Float64Array },
  bool: { arrow: { type: "Bool" }, array: null },
} as const satisfies Record<string, { arrow: ArrowLeaf; array: TypedArrayConstructor | null }>;

/** What a leaf value is, in Arrow and Parquet alike. */
export type ValueKind = keyof typeof VALUE_KINDS;

/** The typed arrays rows hold. */
export type TypedArrayConstructor =
  | Int8ArrayConstructor
  | Uint8ArrayConstructor
  | Int32ArrayConstructor
  | Float32ArrayConstructor
  | Float64ArrayConstructor;

/** A field of a struct element: a nullable scalar (a row holds null or omits nothing: every key is there). */
export interface StructField {
  readonly name: string;
  readonly kind: Exclude<ValueKind, "binary">;
}

/** How a column is stored and, as a type parameter, what a row holds in it. */
export interface ColumnType<V> {
  /** The leaf kind; "struct" for a list of structs, whose fields are `fields`. */
  readonly kind: ValueKind | "struct";
  readonly fields: readonly StructField[] | null;
  /** A list of `kind` values per row (typed arrays for numbers with no null elements). */
  readonly list: boolean;
  /** The whole value may be null. */
  readonly nullable: boolean;
  /** A list's elements may be null. */
  readonly elementNullable: boolean;
  /** The value of a row that has nothing to say here (a group-mode placeholder). */
  readonly empty: () => V;
}

const scalar = <V>(kind: ValueKind, empty: V): ColumnType<V> => ({
  kind,
  fields: null,
  list: false,
  nullable: false,
  elementNullable: false,
  empty: () => empty,
});
const list = <V>(kind: ValueKind, empty: () => V, elementNullable = false): ColumnType<V> => ({
  kind,
  fields: null,
  list: true,
  nullable: false,
  elementNullable,
  empty,
});

/** The column types rows use. A new kind is a VALUE_KINDS entry first. */
export const ColumnTypes = {
  utf8: scalar<string>("utf8", ""),
  /** Opaque bytes (routed experts): the row holds a Uint8Array. */
  binary: scalar<Uint8Array>("binary", new Uint8Array(0)),
  int8: scalar<number>("int8", 0),
  int32: scalar<number>("int32", 0),
  float64: scalar<number>("float64", 0),
  bool: scalar<boolean>("bool", false),
  int8List: list<Int8Array>("int8", () => new Int8Array(0)),
  int32List: list<Int32Array>("int32", () => new Int32Array(0)),
  float32List: list<Float32Array>("float32", () => new Float32Array(0)),
  utf8List: list<string[]>("utf8", () => []),
  /** float64 values any of which may be null (a stage that did not score, a turn with no reward). */
  float64NullableList: list<Array<number | null>>("float64", () => [], true),
};

/**
 * A column's shape in Arrow, without apache-arrow (encoder threads write the schema message from it):
 * a list holds one `element` field, so Parquet gets the standard LIST; a struct's fields may be null.
 * trajectory-arrow.ts builds its Arrow fields from this, arrow-schema.ts serializes it.
 */
export interface ArrowShape {
  name: string;
  nullable: boolean;
  type: ValueKind | "list" | "struct";
  children: ArrowShape[];
}

export function arrowShape(name: string, type: ColumnType<unknown>): ArrowShape {
  const leaf: ArrowShape =
    type.fields === null
      ? { name: type.list ? "element" : name, nullable: false, type: type.kind as ValueKind, children: [] }
      : {
          name: "element",
          nullable: false,
          type: "struct",
          children: type.fields.map((f) => ({ name: f.name, nullable: true, type: f.kind, children: [] })),
        };
  if (!type.list) return { ...leaf, nullable: type.nullable };
  return {
    name,
    nullable: type.nullable,
    type: "list",
    children: [{ ...leaf, nullable: type.elementNullable }],
  };
}

/** A list of structs whose elements may be null; a row holds an array of objects with every field's key. */
export const structList = <V>(fields: readonly StructField[]): ColumnType<Array<V | null>> => ({
  kind: "struct",
  fields,
  list: true,
  nullable: false,
  elementNullable: true,
  empty: () => [],
});

/** The sampling settings of one turn, as rows hold them (events.ts `sampling`; null where not sent). */
export interface TurnSampling {
  temperature: number | null;
  top_p: number | null;
  top_k: number | null;
  min_p: number | null;
  repetition_penalty: number | null;
  logprobs_mode: string | null;
  engine: string | null;
}

export const TURN_SAMPLING_FIELDS = [
  { name: "temperature", kind: "float64" },
  { name: "top_p", kind: "float64" },
  { name: "top_k", kind: "int32" },
  { name: "min_p", kind: "float64" },
  { name: "repetition_penalty", kind: "float64" },
  { name: "logprobs_mode", kind: "utf8" },
  { name: "engine", kind: "utf8" },
] as const satisfies ReadonlyArray<StructField & { name: keyof TurnSampling }>;

/** The same storage, nullable (its empty value is null). */
export const nullable = <V>(type: ColumnType<V>): ColumnType<V | null> => ({
  ...type,
  nullable: true,
  empty: () => null,
});

/** The same storage, holding a narrower TypeScript type (an enum of strings). */
const narrowed = <V>(type: ColumnType<unknown>): ColumnType<V> => type as ColumnType<V>;

export interface Column<N extends string = string, V = unknown> {
  readonly name: N;
  readonly type: ColumnType<V>;
  /** One line for the reader of the code; docs/output.md gives the full meaning (test/docs checks both). */
  readonly doc: string;
  /** Chunks carry min/max/null-count statistics, so readers skip row groups when filtering on it. */
  readonly stats: boolean;
  /** The value of a row that has nothing to say here, when not the type's. */
  readonly empty: () => V;
}

function column<N extends string, V>(
  name: N,
  type: ColumnType<V>,
  doc: string,
  options: { stats?: boolean; empty?: () => V } = {},
): Column<N, V> {
  return { name, type, doc, stats: options.stats ?? false, empty: options.empty ?? type.empty };
}

const T = ColumnTypes;
const STATS = { stats: true };

/**
 * The one definition of a trajectory row, in file order. The row type, the Arrow schema, both Parquet
 * engines' columns, placeholders and the docs test derive from it: a new column is one entry here plus
 * the code that computes it (TypeScript then asks every row literal for it).
 */
export const ROW_COLUMNS = [
  column("key", T.utf8, "`{uid}_{session_id}_{index}`: see rowKey", STATS),
  column("uid", T.utf8, "the dataset prompt / GRPO group id", STATS),
  column("session_id", T.utf8, "the session, as sent"),
  column("index", T.int32, "the row's number within its session", STATS),
  column("sample_index", nullable(T.int32), "from session.start", STATS),
  column("group_size", nullable(T.int32), "from session.start"),
  column("prompt_ids", T.int32List, "the context before the first sampled token on this path"),
  column("response_ids", T.int32List, "everything after: sampled tokens and the context between turns"),
  column("response_mask", T.int8List, "aligned with response_ids: 1 = train this token"),
  // A placeholder's logprobs are empty, not missing: null would read as "a trained span lost them".
  column("rollout_log_probs", nullable(T.float32List), "sampling logprobs at mask-1 positions", {
    empty: () => new Float32Array(0),
  }),
  column("reward", nullable(T.float64), "the session's reward, or the reward stages' combined value", STATS),
  column("episode_finished", nullable(T.bool), "what a reward said about the episode finishing"),
  column("finish_reasons", narrowed<FinishReason[]>(T.utf8List), "one per turn, normalised"),
  column("finish_reasons_raw", T.utf8List, "one per turn, as the backend sent it"),
  column("weight_version_min", nullable(T.int32), "the oldest policy version of the row's turns", STATS),
  column("weight_version_max", nullable(T.int32), "the newest policy version of the row's turns", STATS),
  column("num_turns", T.int32, "model calls on this row", STATS),
  column("num_trained_tokens", T.int32, "positions with mask 1", STATS),
  column("status", narrowed<SessionStatus>(T.utf8), "how the session ended"),
  column("flags", narrowed<RowFlag[]>(T.utf8List), "sorted RowFlags"),
  column("parent_index", nullable(T.int32), "the earlier row sharing the longest token prefix"),
  column("shared_prefix_len", T.int32, "leading tokens shared with parent_index"),
  column("sample_mask", T.int8, "1 for a real row, 0 for a group-mode placeholder", STATS),
  column("ended_at_ms", T.float64, "event time of the session's end, or of its last event", STATS),
  column("last_trained_index", nullable(T.int32), "index in response_ids of the last trained token"),
  column("reward_names", T.utf8List, "the reward stages that scored this row, in pipeline order"),
  column("reward_values", T.float64NullableList, "each stage's value, aligned with reward_names"),
  column("reward_info", nullable(T.utf8), "JSON: per stage, its status, raw value, components, info"),
  column("turn_end_indices", T.int32List, "index in response_ids of the last token of each trained turn"),
  column("turn_rewards", nullable(T.float64NullableList), "per-turn rewards aligned with turn_end_indices"),
  // Empty, not missing, on a placeholder: its response is empty too.
  column("token_policy_versions", nullable(T.int32List), "per response token, the policy that sampled it", {
    empty: () => new Int32Array(0),
  }),
  column("policy_version_min", nullable(T.int32), "the oldest policy of the trained tokens", STATS),
  column("policy_version_max", nullable(T.int32), "the newest policy of the trained tokens", STATS),
  column("routed_experts", nullable(T.binary), "MoE routing of every position: [seq, layers, top_k] ids"),
  column("routed_experts_dtype", T.utf8, "uint8, uint16, int16 or int32; empty when routed_experts is null"),
  column("routed_experts_layers", T.int32, "layers of routed_experts; 0 when it is null"),
  column("routed_experts_top_k", T.int32, "experts per layer and token; 0 when routed_experts is null"),
  column("routed_experts_missing", T.int32, "positions of routed_experts no event covered", STATS),
  column(
    "sampling",
    structList<TurnSampling>(TURN_SAMPLING_FIELDS),
    "per trained turn, its sampling settings",
  ),
] as const;

type ValueOf<C> = C extends Column<string, infer V> ? V : never;

/** One training-ready trajectory: a value for every column of ROW_COLUMNS. */
export type TrajectoryRow = { [C in (typeof ROW_COLUMNS)[number] as C["name"]]: ValueOf<C> };

/** Every column at its empty value: the start of placeholder and synthetic rows. */
export function emptyRow(): TrajectoryRow {
  const row: Record<string, unknown> = {};
  for (const c of ROW_COLUMNS) row[c.name] = c.empty();
  return row as TrajectoryRow;
}

/** The column's type as docs/output.md writes it, e.g. `list<int32 not null>, nullable`. */
export function describeColumnType(type: ColumnType<unknown>): string {
  const name = (k: string) => (k === "utf8" ? "string" : k);
  const kind =
    type.fields === null
      ? name(type.kind)
      : `struct<${type.fields.map((f) => `${f.name}: ${name(f.kind)}`).join(", ")}>`;
  const text = type.list
    ? type.elementNullable
      ? `list<${kind}>, elements nullable`
      : `list<${kind} not null>`
    : kind;
  return type.nullable ? `${text}, nullable` : text;
}

/**
 * `{uid}_{session_id}_{index}`, parseable with Python's `key.rsplit("_", 2)`. A session_id may contain
 * `_`, which would break that split, so in the key (only there) `%` becomes `%25` and `_` becomes `%5F`;
 * `urllib.parse.unquote` gives the session_id back. The uid needs no escaping: rsplit leaves it whole.
 */
export function rowKey(uid: string, sessionId: string, index: number): string {
  return `${uid}_${escapeKeyPart(sessionId)}_${index}`;
}

export function escapeKeyPart(s: string): string {
  return s.includes("%") || s.includes("_") ? s.replaceAll("%", "%25").replaceAll("_", "%5F") : s;
}

/** A row as plain JSON (typed-array columns as arrays of numbers): the `json` value of the trajectory topic. */
export function rowToJson(row: TrajectoryRow): string {
  const plain: Record<string, unknown> = { ...row };
  for (const c of ROW_COLUMNS) {
    const value = plain[c.name];
    if (!ArrayBuffer.isView(value)) continue;
    // Bytes as base64 (768 bytes a token for routed experts: a JSON array of numbers would be 4x that).
    plain[c.name] =
      c.type.kind === "binary"
        ? Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString("base64")
        : Array.from(value as Int32Array);
  }
  return JSON.stringify(plain);
}
