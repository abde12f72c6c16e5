/**
 * Appends a session's events to the output in seq order, one append after another per session. Events are
 * built when the session's previous append has settled, so their seq numbers follow the ones before them
 * without a gap. An append that fails keeps its events: they are sent again, byte for byte, in front of the
 * session's next events (an output that failed may still have written them: the pipeline ignores an exact
 * redelivery, and a second copy never reaches a row).
 */
import type { Metrics } from "../core/metrics.ts";
import type { AppendedAt, EventOutput, EventRecord } from "./outputs/output.ts";
import type { GatewaySession } from "./sessions.ts";

export class Recorder {
  private readonly output: EventOutput;
  private readonly metrics: Metrics;
  /**
   * A replica of a fleet (fleet.ts): after the events are durable, checks that no other replica wrote the
   * session first; throws SESSION_MOVED when one did, and the answer is withheld.
   */
  confirm: ((s: GatewaySession, at: AppendedAt | undefined) => Promise<void>) | null = null;

  constructor(output: EventOutput, metrics: Metrics) {
    this.output = output;
    this.metrics = metrics;
  }

  /**
   * Builds the session's next events with `build` (once every earlier append of the session settled) and
   * appends them; resolves with what `build` returned once they are durable.
   */
  record<T extends { records: EventRecord[] }>(s: GatewaySession, build: () => T): Promise<T> {
    const turn = s.chain.then(async () => {
      const built = build();
      const resend = s.unsettled;
      const records = resend.length === 0 ? built.records : [...resend, ...built.records];
      if (resend.length > 0) this.metrics.inc("gateway_event_resends", "", resend.length);
      const started = performance.now();
      let at: AppendedAt | undefined;
      try {
        at = await this.output.append(records);
      } catch (err) {
        s.unsettled = records;
        throw err;
      }
      s.unsettled = [];
      this.metrics.observe("gateway_ack_seconds", (performance.now() - started) / 1000, ACK_BUCKETS);
      if (this.confirm !== null) await this.confirm(s, at);
      return built;
    });
    s.chain = turn.then(
      () => undefined,
      () => undefined,
    );
    return turn;
  }
}

/** Buckets for sub-millisecond to second latencies (seconds). */
export const ACK_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10];
