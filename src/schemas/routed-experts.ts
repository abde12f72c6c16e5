/**
 * MoE routed experts ("routing replay", R3) as they travel in events: the expert ids each MoE layer chose
 * for each token, a `[tokens, layers, top_k]` array packed as base64 in the engine's own integer type:
 *
 *   { "b64": "<little-endian bytes>", "dtype": "int16", "shape": [tokens, layers, top_k], "num_experts": 128 }
 *
 * They stay bytes from the wire to the file: decoded once into a buffer of their own (transferred from
 * the decode worker, kept by the call without a copy) and copied range by range into a row's blob. At 48
 * layers × top-8 in int16 they are 768 bytes a token, 50x the token id itself, so no per-token JS value.
 *
 * Expert id -1 (signed dtypes) means "no routed expert in this slot", as engines write for dense layers;
 * rows use all bits set (-1, or the unsigned maximum) for positions no event covered, which is why the
 * unsigned maximum is not accepted as an id.
 */
import { endianness } from "node:os";

const LITTLE_ENDIAN = endianness() === "LE";

export const ROUTED_EXPERT_DTYPES = ["uint8", "uint16", "int16", "int32"] as const;
export type RoutedExpertDtype = (typeof ROUTED_EXPERT_DTYPES)[number];

export const DTYPE_BYTES: Record<RoutedExpertDtype, number> = { uint8: 1, uint16: 2, int16: 2, int32: 4 };

/** Decoded routed experts: `tokens` rows of `layers * top_k` ids in `dtype`, little-endian, row-major. */
export interface RoutedExperts {
  dtype: RoutedExpertDtype;
  tokens: number;
  layers: number;
  top_k: number;
  /** Declared by the sender; every id is below it. */
  num_experts?: number;
  /** A buffer of its own (transferable), exactly tokens * layers * top_k * DTYPE_BYTES[dtype] bytes. */
  data: Uint8Array;
}

/** The layout rows of one session share: dtype, layers, top_k. */
export type RoutingLayout = Pick<RoutedExperts, "dtype" | "layers" | "top_k">;

/** Bytes per token of a layout. */
export const routingStride = (l: RoutingLayout): number => l.layers * l.top_k * DTYPE_BYTES[l.dtype];

export const sameLayout = (a: RoutingLayout, b: RoutingLayout): boolean =>
  a.dtype === b.dtype && a.layers === b.layers && a.top_k === b.top_k;

export const describeLayout = (l: RoutingLayout): string => `${l.dtype}[${l.layers}, ${l.top_k}]`;

/** A rejection: the form is wrong (INVALID_ROUTED_EXPERTS) or an id is out of range. */
export interface RoutedExpertsProblem {
  code: "INVALID_ROUTED_EXPERTS" | "ROUTED_EXPERTS_OUT_OF_RANGE";
  message: string;
}

const MAX_LAYERS = 4096;
const MAX_TOP_K = 1024;

const isPositiveInt = (v: unknown, max: number): v is number =>
  Number.isSafeInteger(v) && (v as number) > 0 && (v as number) <= max;

const invalid = (message: string): RoutedExpertsProblem => ({ code: "INVALID_ROUTED_EXPERTS", message });

/** The largest id a dtype may carry (the unsigned maximum is the rows' "not covered" mark). */
function maxId(dtype: RoutedExpertDtype): number {
  switch (dtype) {
    case "uint8":
      return 254;
    case "uint16":
      return 65534;
    case "int16":
      return 32767;
    case "int32":
      return 2147483647;
  }
}

/** Decodes and checks the wire form; returns the routed experts or what is wrong with them. */
export function decodeRoutedExperts(value: unknown): RoutedExperts | RoutedExpertsProblem {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return invalid('expected { "b64": ..., "dtype": ..., "shape": [tokens, layers, top_k] }');
  }
  const o = value as Record<string, unknown>;
  if (typeof o.b64 !== "string") return invalid("b64 must be a base64 string");
  if (!(ROUTED_EXPERT_DTYPES as readonly unknown[]).includes(o.dtype)) {
    return invalid(`dtype must be one of ${ROUTED_EXPERT_DTYPES.join(", ")}`);
  }
  const dtype = o.dtype as RoutedExpertDtype;
  const shape = o.shape;
  if (
    !Array.isArray(shape) ||
    shape.length !== 3 ||
    !Number.isSafeInteger(shape[0]) ||
    (shape[0] as number) < 0 ||
    !isPositiveInt(shape[1], MAX_LAYERS) ||
    !isPositiveInt(shape[2], MAX_TOP_K)
  ) {
    return invalid(
      `shape must be [tokens, layers, top_k] (tokens >= 0, 1 <= layers <= ${MAX_LAYERS}, 1 <= top_k <= ${MAX_TOP_K})`,
    );
  }
  const [tokens, layers, topK] = shape as [number, number, number];
  let numExperts: number | undefined;
  if (o.num_experts !== undefined) {
    if (!isPositiveInt(o.num_experts, maxId(dtype) + 1)) {
      return invalid(`num_experts must be an integer from 1 to ${maxId(dtype) + 1} for ${dtype}`);
    }
    numExperts = o.num_experts;
  }
  const size = DTYPE_BYTES[dtype];
  const expected = tokens * layers * topK * size;
  // Node's decoder skips characters outside the alphabet, so the byte length is an upper bound.
  const bound = Buffer.byteLength(o.b64, "base64");
  if (bound < expected) {
    return invalid(
      `shape [${tokens}, ${layers}, ${topK}] of ${dtype} needs ${expected} bytes, b64 holds ${bound}`,
    );
  }
  const buffer = new ArrayBuffer(bound);
  const length = Buffer.from(buffer).write(o.b64, "base64");
  if (length !== expected) {
    return invalid(
      `shape [${tokens}, ${layers}, ${topK}] of ${dtype} needs ${expected} bytes, b64 holds ${length}`,
    );
  }
  const data = new Uint8Array(length === bound ? buffer : buffer.slice(0, length));
  const bad = firstOutOfRange(data, dtype, numExperts);
  if (bad !== null) {
    const limit = numExperts === undefined ? maxId(dtype) : numExperts - 1;
    const low = dtype.startsWith("int") ? -1 : 0;
    return {
      code: "ROUTED_EXPERTS_OUT_OF_RANGE",
      message:
        `expert id ${bad.value} at token ${Math.floor(bad.index / (layers * topK))}, ` +
        `layer ${Math.floor(bad.index / topK) % layers}, slot ${bad.index % topK} ` +
        `is outside ${low}..${limit}`,
    };
  }
  const out: RoutedExperts = { dtype, tokens, layers, top_k: topK, data };
  if (numExperts !== undefined) out.num_experts = numExperts;
  return out;
}

/** Reads `data` as ids of `dtype` (a copy only on big-endian hosts). */
function idsOf(data: Uint8Array, dtype: RoutedExpertDtype): ArrayLike<number> {
  const size = DTYPE_BYTES[dtype];
  const n = data.length / size;
  if (dtype === "uint8") return data;
  if (!LITTLE_ENDIAN) {
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const out = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      out[i] =
        dtype === "uint16"
          ? view.getUint16(i * 2, true)
          : dtype === "int16"
            ? view.getInt16(i * 2, true)
            : view.getInt32(i * 4, true);
    }
    return out;
  }
  // `data` starts its own buffer, so the views are aligned.
  if (dtype === "uint16") return new Uint16Array(data.buffer, data.byteOffset, n);
  if (dtype === "int16") return new Int16Array(data.buffer, data.byteOffset, n);
  return new Int32Array(data.buffer, data.byteOffset, n);
}

/** The first id outside [-1 (signed) or 0, limit], or null. One pass over a typed view, no allocation. */
function firstOutOfRange(
  data: Uint8Array,
  dtype: RoutedExpertDtype,
  numExperts: number | undefined,
): { index: number; value: number } | null {
  const ids = idsOf(data, dtype);
  const low = dtype.startsWith("int") ? -1 : 0;
  const high = numExperts === undefined ? maxId(dtype) : numExperts - 1;
  for (let i = 0; i < ids.length; i++) {
    const v = ids[i]!;
    if (v < low || v > high) return { index: i, value: v };
  }
  return null;
}

/** Packs decoded routed experts back into their wire form (their bytes are already little-endian). */
export function encodeRoutedExperts(r: RoutedExperts): Record<string, unknown> {
  return {
    b64: Buffer.from(r.data.buffer, r.data.byteOffset, r.data.byteLength).toString("base64"),
    dtype: r.dtype,
    shape: [r.tokens, r.layers, r.top_k],
    ...(r.num_experts !== undefined ? { num_experts: r.num_experts } : {}),
  };
}

/** Packs ids for the wire (producers, tests, the example generator). */
export function packRoutedExperts(
  ids: ArrayLike<number>,
  dtype: RoutedExpertDtype,
  shape: [number, number, number],
  numExperts?: number,
): Record<string, unknown> {
  const size = DTYPE_BYTES[dtype];
  const bytes = Buffer.alloc(ids.length * size);
  for (let i = 0; i < ids.length; i++) {
    const v = ids[i]!;
    if (dtype === "uint8") bytes.writeUInt8(v, i);
    else if (dtype === "uint16") bytes.writeUInt16LE(v, i * 2);
    else if (dtype === "int16") bytes.writeInt16LE(v, i * 2);
    else bytes.writeInt32LE(v, i * 4);
  }
  const out: Record<string, unknown> = { b64: bytes.toString("base64"), dtype, shape };
  if (numExperts !== undefined) out.num_experts = numExperts;
  return out;
}
