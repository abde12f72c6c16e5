/**
 * CPU and memory per thread, for the run report: which part of a run (the ingest thread, the decode
 * workers, the encoders) spent the CPU and held the memory. The process's own figures (CPU of all threads,
 * peak RSS) cannot say; operators sizing `--decode-workers` and `--encode-workers`, and the benchmarks'
 * per-part accounting, need it by thread.
 *
 * Each thread measures itself (`ThreadMeter`); a worker sends its figures with each reply, and its pool
 * registers them here under a name. What no thread here accounts for (V8's garbage-collection and
 * compiler helper threads, libuv's thread pool) is the process's CPU minus the sum.
 */
import { getHeapStatistics } from "node:v8";

export interface ThreadUsage {
  /** CPU seconds (user + system) this thread has spent since it started. */
  cpu_seconds: number;
  /** The largest V8 heap (committed, young and old generations) seen on this thread. */
  heap_peak_bytes: number;
  /** The largest memory held outside the heap by this thread's objects (Buffers, typed arrays, WASM). */
  external_peak_bytes: number;
  /** The heap (committed) at the last sample: what the peak RSS's accounting adds up (held-memory.ts). */
  heap_bytes: number;
  /** Memory outside the heap at the last sample. */
  external_bytes: number;
}

/**
 * Memory is read at most this often, from V8's heap statistics: a decode worker reading
 * process.memoryUsage() (which also reads the process's RSS from /proc) with every job spent 159 ms of its
 * 1.7 s on it (shared harness, short workload in the delta form), and still ~50 ms at this pace. Jobs come
 * every few ms; a peak is still seen within this.
 */
export const MEMORY_SAMPLE_MS = 20;

/** Measures the thread it runs on: call `sample()` now and then (per job, on a timer); cheap (~µs). */
export class ThreadMeter {
  private heapPeak = 0;
  private externalPeak = 0;
  private heap = 0;
  private external = 0;
  private sampledAt = -Infinity;

  sample(): ThreadUsage {
    const now = performance.now();
    if (now - this.sampledAt >= MEMORY_SAMPLE_MS) {
      this.sampledAt = now;
      // This isolate's figures, as process.memoryUsage() gives them (heapTotal, external: ArrayBuffers
      // included), without its read of the process's RSS from /proc.
      const m = getHeapStatistics();
      this.heap = m.total_heap_size;
      this.external = m.external_memory;
      if (this.heap > this.heapPeak) this.heapPeak = this.heap;
      if (this.external > this.externalPeak) this.externalPeak = this.external;
    }
    const cpu = process.threadCpuUsage();
    return {
      cpu_seconds: (cpu.user + cpu.system) / 1e6,
      heap_peak_bytes: this.heapPeak,
      external_peak_bytes: this.externalPeak,
      heap_bytes: this.heap,
      external_bytes: this.external,
    };
  }
}

type Reader = () => ThreadUsage | null;
const threads = new Map<string, Reader>();

/**
 * Registers a thread's figures under `name` ("decode 1", "encoder 2"); the reader returns the latest (or
 * null before the thread reported anything). A name already taken (two file sinks, each with its encoder
 * 1) gets a suffix: "encoder 1 #2".
 */
export function registerThread(name: string, read: Reader): void {
  let unique = name;
  for (let k = 2; threads.has(unique); k++) unique = `${name} #${k}`;
  threads.set(unique, read);
}

/**
 * Figures of one thread that has ended or been replaced (`a`), folded into the one that lives on in its
 * name (`b`): CPU adds up, peaks are the larger, the current memory is the live thread's.
 */
export function addUsage(a: ThreadUsage | null, b: ThreadUsage | null): ThreadUsage | null {
  if (a === null) return b;
  if (b === null) return a;
  return {
    cpu_seconds: a.cpu_seconds + b.cpu_seconds,
    heap_peak_bytes: Math.max(a.heap_peak_bytes, b.heap_peak_bytes),
    external_peak_bytes: Math.max(a.external_peak_bytes, b.external_peak_bytes),
    heap_bytes: b.heap_bytes,
    external_bytes: b.external_bytes,
  };
}

/** The registered threads' latest figures, by name, in registration order. */
export function threadUsages(): Array<{ thread: string } & ThreadUsage> {
  const out: Array<{ thread: string } & ThreadUsage> = [];
  for (const [thread, read] of threads) {
    const usage = read();
    if (usage !== null) out.push({ thread, ...usage });
  }
  return out;
}

/** Forgets every registered thread (tests, and a process running several pipelines one after another). */
export function resetThreads(): void {
  threads.clear();
}
