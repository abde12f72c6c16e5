/**
 * A session's requests still waiting for their response, by call id. An agent mostly has one call in
 * flight, so the table goes from one request to none at every response, and a Map's delete then shrinks
 * it, which allocates a new table each time (~7 MB of the ingest thread's garbage on the shared harness's
 * short workload, and 2-3x the time of a set). An answered request leaves its slot empty instead; the
 * table is rebuilt once the empty slots pass COMPACT_AFTER and outnumber the waiting requests.
 */
import type { RequestEvent } from "../../schemas/events.ts";

const COMPACT_AFTER = 32;

export class PendingRequests {
  private table = new Map<string, RequestEvent | null>();
  private waiting = 0;

  /** Requests waiting for their response. */
  get size(): number {
    return this.waiting;
  }

  has(callId: string): boolean {
    return (this.table.get(callId) ?? null) !== null;
  }

  get(callId: string): RequestEvent | undefined {
    return this.table.get(callId) ?? undefined;
  }

  set(callId: string, request: RequestEvent): void {
    if ((this.table.get(callId) ?? null) === null) this.waiting++;
    this.table.set(callId, request);
  }

  /** Forgets the request of `callId` (its response came); false when none waited. */
  delete(callId: string): boolean {
    if ((this.table.get(callId) ?? null) === null) return false;
    this.table.set(callId, null);
    this.waiting--;
    const empty = this.table.size - this.waiting;
    if (empty > COMPACT_AFTER && empty > this.waiting) {
      const live = new Map<string, RequestEvent | null>();
      for (const [id, r] of this.table) if (r !== null) live.set(id, r);
      this.table = live;
    }
    return true;
  }
}
