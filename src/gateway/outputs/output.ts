/**
 * Where the gateway's events go: one contract, two implementations (a local event log, a Kafka topic).
 * `append` resolves only once the events are durable (fsynced, or acknowledged by the in-sync replicas),
 * and the gateway releases a call's answer only then.
 */

/** One event as it travels: the key (its uid) and its JSON text. */
export interface EventRecord {
  key: string;
  value: string;
  /**
   * Kafka headers, in a fleet of replicas only (a takeover reads a session's events back by them without
   * parsing the others, fleet.ts): trajflow-session (the session id), trajflow-gen (the writer's owner
   * generation).
   */
  headers?: Record<string, string>;
}

/** Where one append's events landed in a Kafka topic: their partition and offsets (first..last). */
export interface AppendedAt {
  partition: number;
  first: number;
  last: number;
}

export interface EventOutput {
  /** Human-readable destination, for logs (never a secret). */
  readonly where: string;
  /**
   * Whether a new call can be recorded now. False while the output cannot write (a broker unreachable, a
   * full buffer): the gateway then refuses calls before forwarding them, so no sample is generated that
   * could not be recorded.
   */
  accepting(): boolean;
  /**
   * Appends the events of one call (or one lifecycle change, all of one session); resolves once they are
   * durable, with where they landed when the output knows (a Kafka topic with `ack: all`).
   */
  append(records: EventRecord[]): Promise<AppendedAt | undefined>;
  /**
   * Appends a control event that belongs to no session (policy.update): to every partition of a topic, so
   * every pipeline member sees it. Resolves once durable.
   */
  broadcast(value: string): Promise<void>;
  /**
   * The events written since `sinceMs` (event time, approximately: a log may give older ones too), to
   * rebuild the sessions the gateway had open before a restart.
   */
  restore(sinceMs: number): AsyncIterable<Uint8Array>;
  close(): Promise<void>;
}
