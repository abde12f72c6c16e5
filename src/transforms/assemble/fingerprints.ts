/**
 * A set of 64-bit fingerprints of strings in flat typed arrays (open addressing, linear probing): 16 bytes
 * per entry at most, against ~100 for a Map of string keys, so every session a run finalized can be
 * remembered (a redelivered event of any of them is then dead-lettered, not written as a second row).
 * Two different strings share a fingerprint with probability ~n²/2⁶⁵: about 3 in a million for 10
 * million sessions.
 */

const EMPTY_GROWTH = 2;
const MAX_LOAD = 0.5;

// The last fingerprint computed (module state, so the per-event lookup allocates nothing).
let fpHi = 0;
let fpLo = 0;

/** Two 32-bit hashes of `s` (FNV-1a and a murmur-style mix, different seeds), never both 0. */
function fingerprint(s: string): void {
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 15;
  }
  // Final avalanche (murmur3's fmix32) so close strings land far apart.
  a ^= a >>> 16;
  a = Math.imul(a, 0x85ebca6b);
  a ^= a >>> 13;
  a = Math.imul(a, 0xc2b2ae35);
  a ^= a >>> 16;
  b ^= b >>> 16;
  b = Math.imul(b, 0x85ebca6b);
  b ^= b >>> 13;
  b = Math.imul(b, 0xc2b2ae35);
  b ^= b >>> 16;
  fpHi = a >>> 0;
  fpLo = b >>> 0;
  if (fpHi === 0 && fpLo === 0) fpLo = 1;
}

export class FingerprintSet {
  private hi: Uint32Array;
  private lo: Uint32Array;
  private count = 0;

  constructor(initialCapacity = 1024) {
    let capacity = 16;
    while (capacity < initialCapacity) capacity *= 2;
    this.hi = new Uint32Array(capacity);
    this.lo = new Uint32Array(capacity);
  }

  get size(): number {
    return this.count;
  }

  /** Bytes held by the table. */
  get bytes(): number {
    return this.hi.byteLength + this.lo.byteLength;
  }

  has(key: string): boolean {
    fingerprint(key);
    const h = fpHi;
    const l = fpLo;
    const mask = this.hi.length - 1;
    for (let i = (h ^ Math.imul(l, 0x27d4eb2d)) & mask; ; i = (i + 1) & mask) {
      const eh = this.hi[i]!;
      const el = this.lo[i]!;
      if (eh === 0 && el === 0) return false;
      if (eh === h && el === l) return true;
    }
  }

  add(key: string): void {
    if ((this.count + 1) / this.hi.length > MAX_LOAD) this.grow();
    fingerprint(key);
    if (this.insert(fpHi, fpLo)) this.count++;
  }

  private insert(h: number, l: number): boolean {
    const mask = this.hi.length - 1;
    for (let i = (h ^ Math.imul(l, 0x27d4eb2d)) & mask; ; i = (i + 1) & mask) {
      const eh = this.hi[i]!;
      const el = this.lo[i]!;
      if (eh === 0 && el === 0) {
        this.hi[i] = h;
        this.lo[i] = l;
        return true;
      }
      if (eh === h && el === l) return false;
    }
  }

  private grow(): void {
    const { hi, lo } = this;
    this.hi = new Uint32Array(hi.length * EMPTY_GROWTH);
    this.lo = new Uint32Array(lo.length * EMPTY_GROWTH);
    for (let i = 0; i < hi.length; i++) {
      if (hi[i] !== 0 || lo[i] !== 0) this.insert(hi[i]!, lo[i]!);
    }
  }
}
