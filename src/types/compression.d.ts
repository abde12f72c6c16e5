// The parts of snappyjs and lz4js trajflow uses (neither package ships types).
declare module "snappyjs" {
  export function compress(input: Uint8Array): Uint8Array;
  export function uncompress(input: Uint8Array): Uint8Array;
}
declare module "lz4js" {
  export function compress(input: Uint8Array, maxSize?: number): Uint8Array;
  export function decompress(input: Uint8Array, maxSize?: number): Uint8Array;
  export function compressBlock(
    src: Uint8Array,
    dst: Uint8Array,
    sIndex: number,
    sLength: number,
    hashTable: Uint32Array,
  ): number;
  export function compressBound(n: number): number;
  export function decompressBlock(
    src: Uint8Array,
    dst: Uint8Array,
    sIndex: number,
    sLength: number,
    dIndex: number,
  ): number;
}
declare module "lz4js/xxh32.js" {
  export function hash(seed: number, src: Uint8Array, index: number, length: number): number;
}
