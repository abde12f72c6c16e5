/**
 * The `gateway` section of a pipeline file: the gateway that feeds the pipeline, checked by `trajflow
 * validate` with every problem listed, and started by `trajflow run` beside the pipeline.
 */
import { issueProblems } from "../core/config.ts";
import { checkedGatewayConfigSchema, type GatewayConfig } from "./config.ts";

/** The section's config, or its problems (each as `file:line: gateway.path: message`). */
export function checkGatewaySection(
  value: unknown,
  where: (path: ReadonlyArray<string | number>) => string,
): { config: GatewayConfig | null; problems: string[] } {
  if (value === undefined) return { config: null, problems: [] };
  const parsed = checkedGatewayConfigSchema.safeParse(value);
  if (parsed.success) return { config: parsed.data, problems: [] };
  const problems = parsed.error.issues.flatMap((issue) =>
    issueProblems(issue).map(({ path, message }) => {
      const full = ["gateway", ...path];
      return `${where(full)}: ${full.join(".")}: ${message}`;
    }),
  );
  return { config: null, problems };
}
