/**
 * A helper for gateway authors (TypeScript): builds protocol-v1 events for one session with `seq` and
 * `ts` filled in, token arrays packed, and the delta form used after the first call. Publish each event
 * keyed by `event.uid` (see docs/gateways.md).
 */
import type { GatewayEventInput } from "../schemas/events.ts";
import { packLogprobs, packTokenIds } from "../schemas/tokens.ts";

export interface CallRecord {
  callId: string;
  /** The full prompt ids; leave out when `parentCallId` + `promptDeltaIds` are given. */
  promptIds?: ArrayLike<number>;
  parentCallId?: string;
  promptDeltaIds?: ArrayLike<number>;
  outputIds: ArrayLike<number>;
  /** The sampled tokens' logprobs; leave out rather than fill with zeros. */
  logprobs?: ArrayLike<number>;
  finishReason: string;
  weightVersion?: number;
  text?: string;
}

export class SessionEvents {
  private seq = 0;
  readonly uid: string;
  readonly sessionId: string;
  private readonly now: () => number;

  constructor(uid: string, sessionId: string, now: () => number = Date.now) {
    this.uid = uid;
    this.sessionId = sessionId;
    this.now = now;
  }

  private base() {
    return { v: 1 as const, uid: this.uid, session_id: this.sessionId, seq: this.seq++, ts: this.now() };
  }

  start(
    fields: { sample_index?: number; group_size?: number; metadata?: Record<string, unknown> } = {},
  ): GatewayEventInput {
    return { ...this.base(), type: "session.start", ...fields };
  }

  /** One model call as a single response event carrying its prompt (no separate request event needed). */
  call(c: CallRecord): GatewayEventInput {
    const prompt =
      c.promptIds !== undefined
        ? { prompt_ids: packTokenIds(c.promptIds) }
        : { parent_call_id: c.parentCallId, prompt_delta_ids: packTokenIds(c.promptDeltaIds ?? []) };
    return {
      ...this.base(),
      type: "response",
      call_id: c.callId,
      ...prompt,
      output_ids: packTokenIds(c.outputIds),
      ...(c.logprobs !== undefined ? { logprobs: packLogprobs(c.logprobs) } : {}),
      finish_reason: c.finishReason,
      ...(c.weightVersion !== undefined ? { weight_version: c.weightVersion } : {}),
      ...(c.text !== undefined ? { text: c.text } : {}),
    };
  }

  reward(
    value: number,
    fields: { target?: string; stage?: string; key?: string; finished?: boolean } = {},
  ): GatewayEventInput {
    return { ...this.base(), type: "reward", value, ...fields };
  }

  end(status: "ok" | "aborted" | "failed"): GatewayEventInput {
    return { ...this.base(), type: "session.end", status };
  }
}
