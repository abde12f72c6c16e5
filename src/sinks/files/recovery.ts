/**
 * Progress recovered from the files themselves (as Kafka Connect's HDFS sink does), not only from the
 * source's committed offset: a crash between a file's rename and the offset commit leaves the file's
 * sessions in the output while the source would deliver them again.
 *
 * Files of a lane with an input range (a Kafka partition: `<topic>-<partition>`) are named
 * `<range>-<first offset>-<last offset>` (20 digits each) and list their sessions with offsets in
 * `trajflow.kafka.sessions` (the key keeps the name files were first written with). When a lane is
 * (re)assigned, the sessions of files reaching past the resume offset are skipped: their events up to the
 * recorded last offset were applied already; later ones are late events.
 */
import { sessionKey } from "../../schemas/session.ts";
import type { Store } from "../shared/store.ts";
import { fileKeyValues } from "./read.ts";

import type { SessionSpan } from "../../contract/components.ts";

export type { SessionSpan };

export const SESSIONS_KEY = "trajflow.kafka.sessions";

const pad = (n: number) => String(n).padStart(20, "0");

/** The file name (without extension) for sessions of one input range. */
export function rangeName(range: string, spans: SessionSpan[]): string {
  let first = Infinity;
  let last = -1;
  for (const [, , f, l] of spans) {
    if (f < first) first = f;
    if (l > last) last = l;
  }
  return `${range}-${pad(first)}-${pad(last)}`;
}

/** Base names of the files of one input range: `<range>-<first offset>-<last offset>.<ext>`. */
export function rangeFilePattern(range: string): RegExp {
  const escaped = range.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(`^${escaped}-(\\d{20})-(\\d{20})\\.(parquet|arrow)$`);
}

/**
 * Sessions already written for an input range in files that reach `resumeOffset` or beyond. Each file
 * lists the sessions it holds, so a cut whose files landed only in some partition directories (a crash
 * between two renames) counts for exactly the sessions that landed.
 */
export async function writtenSessions(
  store: Store,
  range: string,
  resumeOffset: number,
): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const pattern = rangeFilePattern(range);
  for (const name of await store.list(`${range}-`)) {
    const m = pattern.exec(name.slice(name.lastIndexOf("/") + 1));
    if (m === null || Number(m[2]) < resumeOffset) continue;
    const meta = await fileKeyValues(store, name);
    const spans = JSON.parse(meta[SESSIONS_KEY] ?? "[]") as SessionSpan[];
    for (const [uid, sessionId, , last] of spans) out.set(sessionKey(uid, sessionId), last);
  }
  return out;
}
