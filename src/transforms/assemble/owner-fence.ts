/**
 * The pipeline's side of a fleet of gateway replicas (schemas/ownership.ts): which of a session's events
 * its owner wrote, and a FENCED_WRITE dead letter (counted by reason) for each one a stale owner wrote.
 */
import { makeDeadLetter } from "../../core/records.ts";
import { Ownership } from "../../schemas/ownership.ts";
import type { DecodedEvent, RejectedEnvelope } from "./decode/decode.ts";
import type { DeadLetterOutput } from "../../core/records.ts";
import type { Metrics } from "../../core/metrics.ts";

/** What fencing needs of assembly's context (session.ts's FenceContext). */
interface FenceContext {
  deadLetters: DeadLetterOutput;
  metrics: Metrics;
}

export type FenceReason = "stale_owner" | "lost_claim";

/** The dead letter of an event a stale owner wrote (`owner`: the generation that owns the session). */
export function fencedLetter(
  d: DecodedEvent,
  owner: number,
  reason: FenceReason,
  component: string,
): ReturnType<typeof makeDeadLetter> {
  const { type, seq, uid, session_id: sessionId } = d.event;
  const gen = d.event.gen ?? 0;
  return makeDeadLetter(
    "FENCED_WRITE",
    reason === "stale_owner"
      ? `session ${sessionId} was taken over by gateway generation ${owner}; this ${type} (seq ${seq}) was ` +
          `written by generation ${gen} after that and is not trained`
      : `generation ${gen} claimed session ${sessionId} at seq ${seq}, which an earlier write already held: ` +
          `the claim lost its race and its events are not trained`,
    component,
    d.record,
    { uid, session_id: sessionId, seq, details: { reason, gen, owner_gen: owner } },
  );
}

export class OwnerFence {
  private readonly ownership = new Ownership();
  private readonly ctx: FenceContext;
  private readonly component: string;

  constructor(ctx: FenceContext, component: string) {
    this.ctx = ctx;
    this.component = component;
  }

  /** The generation that owns the session. */
  get gen(): number {
    return this.ownership.gen;
  }

  /**
   * Whether the event's writer owns the session (`known`: the digest of the event already holding its seq);
   * dead-letters it when not. A claim fences the older generations' events in `pending` too.
   */
  admit(
    d: DecodedEvent,
    known: number | undefined,
    pending: Map<number, DecodedEvent | RejectedEnvelope> | null,
  ): boolean {
    const gen = d.event.gen ?? 0;
    // An exact redelivery of an applied event keeps its verdict (the duplicate check ignores it).
    const verdict = this.ownership.judge(gen, known === undefined || known === d.digest);
    if (verdict === "fenced" || verdict === "lost_claim") {
      this.reject(d, verdict === "fenced" ? "stale_owner" : "lost_claim");
      return false;
    }
    if (verdict === "claim" && pending !== null)
      for (const [seq, waiting] of pending)
        if ("event" in waiting && (waiting.event.gen ?? 0) < gen) {
          pending.delete(seq);
          this.reject(waiting, "stale_owner");
        }
    return true;
  }

  private reject(d: DecodedEvent, reason: FenceReason): void {
    this.ctx.metrics.inc("fenced_events", reason);
    this.ctx.deadLetters.write(fencedLetter(d, this.ownership.gen, reason, this.component));
  }
}
