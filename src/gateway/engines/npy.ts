/**
 * Reads a NumPy `.npy` file (format versions 1 to 3) holding a C-order integer array, as vLLM sends routed
 * experts: `numpy2base64(array)` in its OpenAI server is `base64(np.save(array))`. Only what routed experts
 * use is accepted: a little-endian (or single-byte) uint8, uint16, int16 or int32 array.
 *
 * The format: the magic `\x93NUMPY`, a major and a minor version byte, the header length (uint16 LE in
 * version 1, uint32 LE in 2 and 3), then an ASCII (UTF-8 in 3) Python dict literal such as
 * `{'descr': '<i4', 'fortran_order': False, 'shape': (5, 2, 4), }`, padded so the data starts aligned.
 */
import type { RoutedExpertDtype } from "../../schemas/routed-experts.ts";

const DESCR: Record<string, RoutedExpertDtype> = {
  "|u1": "uint8",
  "<u1": "uint8",
  "<u2": "uint16",
  "<i2": "int16",
  "<i4": "int32",
};

export interface NpyArray {
  dtype: RoutedExpertDtype;
  shape: number[];
  /** The data bytes: a view into the decoded file. */
  data: Uint8Array;
}

/** Decodes base64 `.npy` bytes; returns the array or what is wrong with it. */
export function readNpyBase64(b64: string): NpyArray | string {
  const file = Buffer.from(b64, "base64");
  const bytes = new Uint8Array(file.buffer, file.byteOffset, file.byteLength);
  return readNpy(bytes);
}

export function readNpy(bytes: Uint8Array): NpyArray | string {
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
  if (bytes.length < 10 || magic.some((b, i) => bytes[i] !== b))
    return "not a .npy file (no \\x93NUMPY magic)";
  const major = bytes[6]!;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let headerStart: number;
  let headerLength: number;
  if (major === 1) {
    headerLength = view.getUint16(8, true);
    headerStart = 10;
  } else if (major === 2 || major === 3) {
    if (bytes.length < 12) return ".npy header is cut short";
    headerLength = view.getUint32(8, true);
    headerStart = 12;
  } else {
    return `.npy format version ${major} is not supported`;
  }
  const dataStart = headerStart + headerLength;
  if (dataStart > bytes.length) return ".npy header is cut short";
  const header = Buffer.from(bytes.buffer, bytes.byteOffset + headerStart, headerLength).toString("utf8");
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header)?.[1];
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header)?.[1];
  const shapeText = /'shape'\s*:\s*\(([^)]*)\)/.exec(header)?.[1];
  if (descr === undefined || fortran === undefined || shapeText === undefined) {
    return `.npy header is not understood: ${header.trim()}`;
  }
  const dtype = DESCR[descr];
  if (dtype === undefined)
    return `.npy dtype ${descr} is not one routed experts use (uint8, uint16, int16, int32)`;
  if (fortran === "True") return ".npy array is in Fortran order; only C order is read";
  const shape = shapeText
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map(Number);
  if (shape.some((n) => !Number.isSafeInteger(n) || n < 0))
    return `.npy shape (${shapeText}) is not understood`;
  const size = { uint8: 1, uint16: 2, int16: 2, int32: 4 }[dtype];
  const expected = shape.reduce((a, b) => a * b, 1) * size;
  if (bytes.length - dataStart !== expected) {
    return `.npy shape (${shape.join(", ")}) of ${dtype} needs ${expected} bytes, the file holds ${bytes.length - dataStart}`;
  }
  return { dtype, shape, data: bytes.subarray(dataStart) };
}
