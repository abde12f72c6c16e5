/**
 * A tiny, deterministic ONNX reward model built without downloaded weights: token embedding, mean over
 * the attention mask, linear head to `classes` logits. It exists so tests and benchmarks run a real
 * onnxruntime session; `referenceLogits` computes the same math in plain TypeScript to check it.
 *
 * The ONNX file is written by a minimal protobuf encoder (onnx.proto3 field numbers), since no model can be
 * downloaded here and the project needs no Python for it.
 */
import { mulberry32 } from "./prng.ts";

export interface TinyModelWeights {
  vocab: number;
  dim: number;
  classes: number;
  /** [vocab, dim] row-major. */
  embedding: Float32Array;
  /** [dim, classes] row-major. */
  head: Float32Array;
  bias: Float32Array;
}

export function tinyWeights(seed = 7, vocab = 1024, dim = 32, classes = 2): TinyModelWeights {
  const random = mulberry32(seed);
  const fill = (n: number, scale: number) =>
    Float32Array.from({ length: n }, () => (random() * 2 - 1) * scale);
  return {
    vocab,
    dim,
    classes,
    embedding: fill(vocab * dim, 1),
    head: fill(dim * classes, 1 / Math.sqrt(dim)),
    bias: fill(classes, 0.1),
  };
}

// --- protobuf wire format -------------------------------------------------------------------------------

class Writer {
  private parts: Uint8Array[] = [];
  private varint(v: number | bigint): void {
    let n = BigInt(v);
    if (n < 0n) n += 1n << 64n;
    const out: number[] = [];
    do {
      let b = Number(n & 0x7fn);
      n >>= 7n;
      if (n > 0n) b |= 0x80;
      out.push(b);
    } while (n > 0n);
    this.parts.push(Uint8Array.from(out));
  }
  int(field: number, v: number | bigint): this {
    this.varint(field << 3);
    this.varint(v);
    return this;
  }
  bytes(field: number, b: Uint8Array): this {
    this.varint((field << 3) | 2);
    this.varint(b.length);
    this.parts.push(b);
    return this;
  }
  string(field: number, s: string): this {
    return this.bytes(field, new TextEncoder().encode(s));
  }
  message(field: number, w: Writer): this {
    return this.bytes(field, w.finish());
  }
  finish(): Uint8Array {
    const total = this.parts.reduce((n, p) => n + p.length, 0);
    const out = new Uint8Array(total);
    let at = 0;
    for (const p of this.parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }
}

const FLOAT = 1;
const INT64 = 7;

function tensor(name: string, dims: number[], type: number, data: Float32Array | BigInt64Array): Writer {
  const w = new Writer();
  for (const d of dims) w.int(1, d);
  w.int(2, type);
  w.string(8, name);
  return w.bytes(9, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
}

function valueInfo(name: string, type: number, dims: Array<number | string>): Writer {
  const shape = new Writer();
  for (const d of dims)
    shape.message(1, typeof d === "number" ? new Writer().int(1, d) : new Writer().string(2, d));
  const tensorType = new Writer().int(1, type).message(2, shape);
  return new Writer().string(1, name).message(2, new Writer().message(1, tensorType));
}

function node(op: string, inputs: string[], outputs: string[], attrs: Writer[] = []): Writer {
  const w = new Writer();
  for (const i of inputs) w.string(1, i);
  for (const o of outputs) w.string(2, o);
  w.string(3, `${op}_${outputs[0]}`).string(4, op);
  for (const a of attrs) w.message(5, a);
  return w;
}

const intAttr = (name: string, v: number) => new Writer().string(1, name).int(3, v).int(20, 2);

/**
 * The ONNX model file (opset 17) for `weights`: inputs input_ids, attention_mask [batch, seq] int64.
 * With `hashIds`, ids are taken modulo the vocabulary first, so any tokenizer's ids are accepted (the
 * example pipeline's); without it an id past the vocabulary fails the batch, as in a real model.
 */
export function tinyRewardModel(weights: TinyModelWeights, { hashIds = false } = {}): Uint8Array {
  const { vocab, dim, classes } = weights;
  const graph = new Writer();
  const nodes = [
    ...(hashIds ? [node("Mod", ["input_ids", "vocab"], ["ids"])] : []),
    node("Gather", ["embedding", hashIds ? "ids" : "input_ids"], ["embedded"]),
    node("Cast", ["attention_mask"], ["mask_f"], [intAttr("to", FLOAT)]),
    node("Unsqueeze", ["mask_f", "axis2"], ["mask3"]),
    node("Mul", ["embedded", "mask3"], ["masked"]),
    node("ReduceSum", ["masked", "axis1"], ["summed"], [intAttr("keepdims", 0)]),
    node("ReduceSum", ["mask_f", "axis1"], ["count"], [intAttr("keepdims", 1)]),
    node("Max", ["count", "one"], ["count1"]),
    node("Div", ["summed", "count1"], ["mean"]),
    node("MatMul", ["mean", "head"], ["projected"]),
    node("Add", ["projected", "bias"], ["logits"]),
  ];
  for (const n of nodes) graph.message(1, n);
  graph.string(2, "tiny_reward");
  graph.message(5, tensor("embedding", [vocab, dim], FLOAT, weights.embedding));
  graph.message(5, tensor("head", [dim, classes], FLOAT, weights.head));
  graph.message(5, tensor("bias", [classes], FLOAT, weights.bias));
  graph.message(5, tensor("axis1", [1], INT64, BigInt64Array.from([1n])));
  graph.message(5, tensor("axis2", [1], INT64, BigInt64Array.from([2n])));
  graph.message(5, tensor("one", [1], FLOAT, Float32Array.from([1])));
  if (hashIds) graph.message(5, tensor("vocab", [1], INT64, BigInt64Array.from([BigInt(vocab)])));
  graph.message(11, valueInfo("input_ids", INT64, ["batch", "seq"]));
  graph.message(11, valueInfo("attention_mask", INT64, ["batch", "seq"]));
  graph.message(12, valueInfo("logits", FLOAT, ["batch", classes]));
  return new Writer()
    .int(1, 8) // ir_version
    .string(2, "trajflow")
    .message(7, graph)
    .message(8, new Writer().string(1, "").int(2, 17))
    .finish();
}

/** The model's math in plain TypeScript (float64): logits for one sequence (ids modulo the vocabulary). */
export function referenceLogits(weights: TinyModelWeights, ids: ArrayLike<number>, mask: ArrayLike<number>) {
  const { dim, classes, embedding, head, bias } = weights;
  const mean = new Float64Array(dim);
  let count = 0;
  for (let t = 0; t < ids.length; t++) {
    if (mask[t] === 0) continue;
    count++;
    const row = (ids[t]! % weights.vocab) * dim;
    for (let d = 0; d < dim; d++) mean[d]! += embedding[row + d]!;
  }
  for (let d = 0; d < dim; d++) mean[d]! /= Math.max(count, 1);
  const logits = new Float64Array(classes);
  for (let c = 0; c < classes; c++) {
    let v = bias[c]!;
    for (let d = 0; d < dim; d++) v += mean[d]! * head[d * classes + c]!;
    logits[c] = v;
  }
  return logits;
}
