/**
 * Every metric trajflow records, in one place: its kind, the label its series are split by, and what it
 * means. `Metrics` only accepts these names (a typo does not compile), /metrics exposes each with this
 * help text, and docs/metrics.md lists every one (a test keeps the two equal).
 */
export const METRICS = {
  // Input
  events_read: { kind: "counter", help: "Records read from the source (files or Kafka)." },
  kafka_messages: { kind: "counter", help: "Kafka messages delivered to the pipeline." },
  kafka_bytes: { kind: "counter", help: "Bytes of Kafka message values delivered." },
  control_events: { kind: "counter", label: "type", help: "Control events (policy.update) received." },
  events_received: { kind: "counter", label: "type", help: "Session events applied by assembly, by type." },
  events_already_written: {
    kind: "counter",
    help: "Events of sessions the files already held (skipped after a restart or rebalance).",
  },
  tokens_received: { kind: "counter", help: "Token values received in events of finalized sessions." },
  dead_letters: {
    kind: "counter",
    label: "code",
    help: "Rejected events and failed rewards, by error code.",
  },
  dead_letter_files_committed: {
    kind: "counter",
    label: "outcome",
    help: "Dead-letter files renamed into place (written, or already-committed by an earlier run).",
  },
  // Assembly
  sessions_opened: { kind: "counter", help: "Sessions that received a first event." },
  sessions_finalized: { kind: "counter", label: "status", help: "Sessions finished, by status." },
  sessions_without_rows: { kind: "counter", help: "Finished sessions that gave no row (nothing sampled)." },
  sessions_cut: {
    kind: "counter",
    help: "Open sessions cut early by the open-session limits (flag session_cut).",
  },
  drift_detected: { kind: "counter", help: "Prompts that re-rendered a sampled turn into other tokens." },
  history_edited: { kind: "counter", help: "Prompts whose earlier context was edited (compaction, edits)." },
  orphans_dropped: { kind: "counter", help: "Retry orphans dropped (a call nobody continued from)." },
  calls_untrained: {
    kind: "counter",
    help: "Calls recorded with train: false (side calls): their tokens are context (mask 0) in every row.",
  },
  untrained_rows_skipped: {
    kind: "counter",
    help: "Rows not written because they ended in a train: false call nobody continued (they would train nothing).",
  },
  duplicate_events_ignored: { kind: "counter", help: "Exact redeliveries of an event (same bytes) ignored." },
  fenced_events: {
    kind: "counter",
    label: "reason",
    help: "Events a gateway replica wrote after another took its session over (dead-lettered FENCED_WRITE), by reason: stale_owner, lost_claim.",
  },
  rejected_seqs_forgotten: {
    kind: "counter",
    help: "Rejected events of sessions not open yet, forgotten past 16,384 such sessions (their seqs).",
  },
  duplicate_rewards_ignored: {
    kind: "counter",
    help: "Reward events repeated for the same target, ignored.",
  },
  requests_unanswered: { kind: "counter", help: "Requests whose response never arrived (flag in the row)." },
  rows_emitted: { kind: "counter", help: "Rows assembled." },
  rows_truncated: { kind: "counter", help: "Rows truncated to max_tokens (flag truncated)." },
  rows_missing_logprobs: { kind: "counter", help: "Rows with a sampled token lacking its logprob (null)." },
  routed_experts_missing: {
    kind: "counter",
    help: "Positions of rows' routed_experts that no event covered (left at -1, never invented).",
  },
  tokens_emitted: { kind: "counter", help: "Token values in assembled rows." },
  tokens_trained: { kind: "counter", help: "Tokens with response_mask 1." },
  empty_outputs: { kind: "counter", help: "Responses with no output token." },
  // Staleness and groups
  sessions_stale: { kind: "counter", help: "Sessions with a row of a stale policy." },
  rows_stale_dropped: { kind: "counter", help: "Rows of stale policies dropped." },
  groups_emitted: { kind: "counter", help: "GRPO groups written." },
  groups_timed_out: { kind: "counter", help: "Groups padded after waiting timeout_ms of event time." },
  groups_incomplete_at_end: { kind: "counter", help: "Groups padded at the end of the input." },
  groups_too_large: {
    kind: "counter",
    help: "Sessions whose group_size was above max_group_size (dead-lettered, written alone).",
  },
  groups_size_unknown: { kind: "counter", help: "Sessions whose group size nobody gave (written alone)." },
  placeholders: { kind: "counter", label: "reason", help: "Placeholder rows in groups, by reason." },
  // Rewards
  reward_sessions: { kind: "counter", help: "Sessions scored by the reward stages." },
  reward_session_ms: { kind: "counter", help: "Milliseconds sessions spent being scored (sum)." },
  reward_batches: { kind: "counter", label: "stage", help: "Batches sent to a reward stage." },
  reward_batch_items: {
    kind: "counter",
    label: "stage",
    help: "Items in those batches (size = items / batches).",
  },
  reward_latency_ms: {
    kind: "counter",
    label: "stage",
    help: "Milliseconds spent in a stage's calls (sum).",
  },
  reward_retries: { kind: "counter", label: "stage", help: "Retried stage calls." },
  reward_batch_splits: {
    kind: "counter",
    label: "stage",
    help: "Failing batches split to isolate a poison item.",
  },
  reward_call_failures: { kind: "counter", label: "stage", help: "Stage calls that failed." },
  reward_failures: {
    kind: "counter",
    label: "stage",
    help: "Items a stage could not score (flag reward_failed).",
  },
  reward_timeouts: { kind: "counter", label: "stage", help: "Required scores missing at timeout_ms (flag)." },
  // Output
  files_committed: { kind: "counter", label: "outcome", help: "Data files renamed into place, by outcome." },
  files_cut_for_memory: {
    kind: "counter",
    help: "Files cut early because the lanes' rows waiting together passed max_buffered_bytes.",
  },
  files_fenced: {
    kind: "counter",
    help: "Files dropped because this process no longer owned their partition (an expelled member).",
  },
  rows_written: { kind: "counter", help: "Rows in committed files." },
  rows_abandoned: { kind: "counter", help: "Buffered rows dropped when their partition was revoked." },
  bytes_written: { kind: "counter", help: "Bytes of data files written." },
  encode_ms: { kind: "counter", help: "Milliseconds spent encoding files on the worker threads (sum)." },
  stale_temp_files_removed: {
    kind: "counter",
    help: "Temporaries (or S3 multipart uploads) of a crashed writer removed at start.",
  },
  uploads_aborted: {
    kind: "counter",
    help: "Unfinished S3 uploads of a Kafka partition's earlier owner aborted when this process took the partition.",
  },
  topic_rows_produced: { kind: "counter", help: "Rows produced to trajectory topics and acknowledged." },
  session_durable_seconds: {
    kind: "histogram",
    help: "From a session's end (finalized) to its rows durable in a renamed file.",
  },
  // Kafka client
  kafka_commits: { kind: "counter", help: "Offset commits." },
  kafka_commit_failures: { kind: "counter", help: "Offset commits that failed (retried next interval)." },
  kafka_rebalances: { kind: "counter", help: "Group rebalances that restarted this member's partitions." },
  kafka_lane_restarts: {
    kind: "counter",
    help: "Partitions read again from the committed offset (a batch cut short, a failed batch, an unconfirmed fence).",
  },
  kafka_watchdog_restarts: {
    kind: "counter",
    help: "Consumers restarted by the watchdog (stalled with lag).",
  },
  kafka_consumer_restarts: {
    kind: "counter",
    help: "Consumers restarted after a crash while the broker was away.",
  },
  kafka_produce_retries: { kind: "counter", help: "Produce requests retried (dead letters)." },
  // Gateway
  gateway_calls: {
    kind: "counter",
    label: "outcome",
    help: "Model calls the gateway handled, by outcome: recorded, upstream_error, upstream_timeout, bad_request, busy, output_unavailable, session_moved, no_upstream, not_recorded, client_gone.",
  },
  gateway_route_calls: {
    kind: "counter",
    label: "route",
    help: "Model calls by route: chat, completions, messages, responses, count_tokens, models, responses_get, responses_delete.",
  },
  gateway_hosted_tools_dropped: {
    kind: "counter",
    label: "tool",
    help: "Hosted tools (web search, code execution...) left out of a Messages or Responses call (hosted_tools: drop).",
  },
  gateway_blocks_left_out: {
    kind: "counter",
    label: "type",
    help: "Content blocks of a Messages call the engine cannot read and the gateway left out (redacted_thinking).",
  },
  gateway_malformed_tool_calls: {
    kind: "counter",
    label: "api",
    help: "Tool calls whose arguments were not a JSON object (a truncated call): given to the agent as text, by API (tokens: parsed from the output in prompt mode tokens).",
  },
  gateway_control_refused: {
    kind: "counter",
    label: "route",
    help: "Control routes refused for want of the control token (401) or with another credential (403), by route.",
  },
  gateway_prompt_modes: {
    kind: "counter",
    label: "mode",
    help: "Prompt mode tokens: calls by how their prompt was made (continued, rendered, engine).",
  },
  gateway_prompt_renders: {
    kind: "counter",
    label: "reason",
    help: "Prompt mode tokens: calls rendered whole, by why (first_call, no_branch: the history was edited or compacted, answer_last, template_marker).",
  },
  gateway_chat_route_calls: {
    kind: "counter",
    label: "reason",
    help: "Prompt mode tokens: calls sent to the engine's chat route because they need it (response_format, logprobs, tool_choice).",
  },
  gateway_untrained_calls: {
    kind: "counter",
    help: "Calls recorded with train: false (an X-Trajflow-Train: false header, or an untrained_models rule).",
  },
  gateway_lifecycle: {
    kind: "counter",
    label: "action",
    help: "Session lifecycle requests: start, reward, end, delete, weights.",
  },
  gateway_rewards_refused: {
    kind: "counter",
    label: "reason",
    help: "Rewards refused with 409 session_written: the embedded pipeline had written the session without them.",
  },
  gateway_sampled_tokens: { kind: "counter", help: "Sampled tokens the gateway recorded." },
  gateway_missing_logprobs: {
    kind: "counter",
    help: "Sampled tokens recorded without a logprob (the engine gave none; never filled in).",
  },
  gateway_delta_prompts: {
    kind: "counter",
    help: "Calls recorded in the delta form (extending a branch tip).",
  },
  gateway_client_disconnects: {
    kind: "counter",
    help: "Streamed calls the agent left before the end: the upstream is cancelled, the partial output recorded as abort.",
  },
  gateway_upstream_retries: {
    kind: "counter",
    help: "Calls sent to another upstream after one refused the connection before any byte.",
  },
  gateway_event_resends: {
    kind: "counter",
    help: "Events sent again after an append with an unknown outcome (the pipeline ignores exact redeliveries).",
  },
  gateway_added_seconds: {
    kind: "histogram",
    help: "Time the gateway added to a call: its whole time minus the upstream's and the events' acknowledgement.",
  },
  gateway_upstream_seconds: { kind: "histogram", help: "From sending a call upstream to its last byte." },
  gateway_ack_seconds: {
    kind: "histogram",
    help: "From appending a call's events to their acknowledgement (fsync or the in-sync replicas).",
  },
  gateway_sessions_taken: {
    kind: "counter",
    help: "A fleet's replica: sessions taken over on their first call here (rebuilt from the topic, claimed).",
  },
  gateway_take_seconds: {
    kind: "histogram",
    help: "A fleet's replica: reading a taken session's events back from the topic and rebuilding it.",
  },
  gateway_sessions_released: {
    kind: "counter",
    label: "reason",
    help: "A fleet's replica: sessions let go, by reason: taken (another replica claimed it), fenced (a call of ours found it taken), lapsed (its lease ran out in a stall).",
  },
  gateway_lease_wait_seconds: {
    kind: "histogram",
    help: "A fleet's replica: how long a takeover waited for the previous owner's lease to end.",
  },
  gateway_fenced_calls: {
    kind: "counter",
    label: "reason",
    help: "A fleet's replica: answers withheld (503 session_moved) because another replica wrote the session first, by reason: taken, lost_claim, unconfirmed.",
  },
  // Gauges (read when /metrics is scraped)
  gateway_open_sessions: { kind: "gauge", help: "Sessions the gateway holds in memory." },
  gateway_in_flight: { kind: "gauge", help: "Calls forwarded and not yet answered." },
  gateway_tips_bytes: {
    kind: "gauge",
    help: "Bytes of the sessions' branch tips (the delta form's memory; bounded by max_sessions).",
  },
  gateway_upstream_healthy: {
    kind: "gauge",
    label: "upstream",
    help: "1 if the upstream answers, 0 while it is probed.",
  },
  open_sessions: { kind: "gauge", help: "Sessions being assembled." },
  consumer_lag: {
    kind: "gauge",
    label: "partition",
    help: "Messages behind the partition's high watermark.",
  },
  offsets_held: {
    kind: "gauge",
    label: "partition",
    help: "Sessions and dead letters holding the partition's commit back.",
  },
  memory_held_bytes: {
    kind: "gauge",
    label: "part",
    help: "Bytes of data held by a part of the pipeline (open sessions, rows waiting for a file, ...).",
  },
} as const satisfies Record<
  string,
  { kind: "counter" | "histogram" | "gauge"; label?: string; help: string }
>;

export type MetricName = keyof typeof METRICS;
export type CounterName = {
  [K in MetricName]: (typeof METRICS)[K]["kind"] extends "counter" ? K : never;
}[MetricName];
export type HistogramName = {
  [K in MetricName]: (typeof METRICS)[K]["kind"] extends "histogram" ? K : never;
}[MetricName];
export type GaugeName = {
  [K in MetricName]: (typeof METRICS)[K]["kind"] extends "gauge" ? K : never;
}[MetricName];
