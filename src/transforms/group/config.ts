import { z } from "zod";

/** Configuration of the `group` transform (GRPO-shaped batches). */
export const groupConfigSchema = z.strictObject({
  group_size: z
    .int()
    .positive()
    .optional()
    .describe("n, sessions per uid, for sessions whose session.start does not say group_size."),
  max_group_size: z
    .int()
    .positive()
    .max(1_000_000)
    .default(1_024)
    .describe(
      "Largest group size accepted; a session claiming more is dead-lettered (GROUP_TOO_LARGE) and " +
        "written alone, instead of padding its group with that many placeholders.",
    ),
  timeout_ms: z
    .int()
    .positive()
    .default(600_000)
    .describe(
      "Event time a group may wait, after its first session finished, before it is padded with placeholders.",
    ),
});
export type GroupConfig = z.output<typeof groupConfigSchema>;
export type GroupConfigInput = z.input<typeof groupConfigSchema>;
