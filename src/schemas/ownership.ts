/**
 * Which gateway replica may write a session (a fleet of replicas behind a session-hashing proxy,
 * docs/gateway.md#a-fleet-of-replicas). Every event a replica writes carries its owner generation `gen`
 * (absent: 0). A replica that takes a session over writes its first event with a greater gen than any it
 * read back: that event is the claim, and from it on, events of an older generation are fenced (the old
 * owner, paused or partitioned away, wrote them after it lost the session). A claim whose seq is already
 * taken lost a race (an older owner's write landed first): its generation is fenced too, and its writer
 * claims again.
 *
 * The pipeline (assembly) and the gateway's own restore apply this same rule to the same events in the
 * same order (a partition's), so the session a new owner rebuilds is the one the pipeline trains.
 */

export type OwnershipVerdict = "accept" | "claim" | "fenced" | "lost_claim";

export class Ownership {
  /** The generation that owns the session now. */
  gen = 0;
  /** The greatest generation seen at all (accepted, fenced or lost): a new claim goes above it. */
  highest = 0;
  /** Claims that lost their race: every event of these generations is fenced. */
  private lost: number[] | null = null;

  /**
   * The verdict on an event of generation `gen` whose seq is free (`seqFree`: no event holds it yet).
   * "claim" and "accept" apply it; "fenced" (an older generation) and "lost_claim" (a claim whose seq was
   * taken, and every later event of its generation) drop it.
   */
  judge(gen: number, seqFree: boolean): OwnershipVerdict {
    if (gen > this.highest) this.highest = gen;
    if (this.lost?.includes(gen) === true) return "lost_claim";
    if (gen < this.gen) return "fenced";
    if (gen === this.gen) return "accept";
    if (!seqFree) {
      (this.lost ??= []).push(gen);
      return "lost_claim";
    }
    this.gen = gen;
    return "claim";
  }
}

/** Generations per claim: the low bits are random, so two replicas that claim at once never pick the same. */
const SPREAD = 65_536;

/**
 * The generation a new claim takes: above every one seen (`highest`), its low bits random so that two
 * replicas claiming from the same state differ (the one whose claim lands second is fenced, or lost).
 */
export function nextGeneration(highest: number, random: () => number = Math.random): number {
  return (Math.floor(highest / SPREAD) + 1) * SPREAD + 1 + Math.floor(random() * (SPREAD - 1));
}
