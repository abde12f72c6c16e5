import type { TrajectoryRow } from "../../src/schemas/trajectory.ts";
import type { RewardItem } from "../../src/transforms/reward/contract.ts";

/** A reward item for stage tests: one row with these tokens (prompt, then response), defaults elsewhere. */
export function rewardItem(
  key: string,
  prompt: ArrayLike<number>,
  response: ArrayLike<number>,
  fields: Partial<RewardItem> = {},
): RewardItem {
  const row = {
    prompt_ids: Int32Array.from(prompt),
    response_ids: Int32Array.from(response),
  } as unknown as TrajectoryRow;
  return {
    key,
    uid: "u",
    session_id: key,
    rows: [row],
    turns: [],
    final_text: null,
    final_tool_calls: null,
    metadata: null,
    events: [],
    tokens: prompt.length + response.length,
    ...fields,
  };
}
