/**
 * A pipeline document's components and wiring, validated in full before anything opens: every
 * component's config (its own schema, from the registry), the graph (inputs exist, no cycles, nothing
 * left unconnected), and the graph rules of the runtime (docs/pipelines.md):
 *
 *   - one source;
 *   - a chain of transforms: `assemble` first, then `rewards` and `staleness` in either order, then
 *     `group` last; each at most once;
 *   - sinks read the end of the chain: exactly one `parquet` or `arrow` sink (the files recovery
 *     trusts) and any number of `kafka` trajectory topics (acknowledged before the files are written);
 *   - dead letters to files or a topic, from any source.
 *
 * Every problem is listed with where it is. `trajflow replay` and `trajflow consume` build a document
 * like a pipeline file's and go through the same plan.
 */
import { z } from "zod";
import { issueProblems } from "../core/config.ts";
import { TrajflowError } from "../core/errors.ts";
import { kafkaConnectionSchema, type KafkaConnection } from "../kafka/connection.ts";
import type { LoadedPipeline } from "./load.ts";
import { REGISTRY, type Section } from "./registry.ts";

const deadLettersSchema = z.discriminatedUnion("type", [
  z.strictObject({
    type: z.literal("files"),
    path: z.string().min(1).describe("Directory of dead-letter files."),
  }),
  z.strictObject({
    type: z.literal("kafka"),
    topic: z.string().min(1).describe("Dead-letter topic."),
    connection: kafkaConnectionSchema
      .optional()
      .describe("Brokers of the topic; default: the kafka source's connection."),
  }),
]);
export type DeadLettersConfig = z.output<typeof deadLettersSchema>;

/** One validated component: its name, registered type and parsed config. */
export interface PlannedComponent {
  name: string;
  type: string;
  config: unknown;
}

export interface Plan {
  source: PlannedComponent;
  /** In the order units pass through them; `assemble` first. */
  transforms: PlannedComponent[];
  /** The file sink (exactly one) and the trajectory topics. */
  sinks: PlannedComponent[];
  deadLetters: DeadLettersConfig | null;
  /** The source's Kafka connection, when it is a kafka source (the default of topic sinks). */
  sourceConnection: KafkaConnection | null;
}

interface Component {
  section: Section;
  name: string;
  type: string;
  inputs: string[];
  config: unknown;
}

/** The configured order of the transforms after assemble: group only last. */
const LAST_ONLY = new Set(["group"]);

const TOP_LEVEL = new Set(["version", "sources", "transforms", "sinks", "dead_letters"]);

export function planPipeline(pipeline: LoadedPipeline, initial: string[] = []): Plan {
  const problems = [...initial];
  // An unreadable or unparsable file: its own problems are all there is to say.
  if (pipeline.value === null) throw invalid(problems);
  const at = (path: Array<string | number>, message: string) =>
    problems.push(`${pipeline.where(path)}: ${path.join(".")}: ${message}`);
  const atIssue = (base: Array<string | number>, issue: z.core.$ZodIssue) => {
    for (const { path, message } of issueProblems(issue)) at([...base, ...path], message);
  };
  const root = pipeline.value as Record<string, unknown>;
  for (const key of Object.keys(root)) {
    if (!TOP_LEVEL.has(key)) at([key], `unknown section; a pipeline has ${[...TOP_LEVEL].join(", ")}`);
  }
  if (root.version !== undefined && root.version !== 1) at(["version"], "only version 1 exists");

  const components = new Map<string, Component>();
  for (const section of ["sources", "transforms", "sinks"] as const) {
    const entries = root[section];
    if (entries === undefined) {
      if (section !== "transforms") at([section], "missing: a pipeline needs at least one");
      continue;
    }
    if (typeof entries !== "object" || entries === null || Array.isArray(entries)) {
      at([section], "must be a mapping of component names to components");
      continue;
    }
    for (const [name, raw] of Object.entries(entries as Record<string, unknown>)) {
      const path = [section, name];
      if (components.has(name)) at(path, `the name ${name} is used twice; component names are unique`);
      if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
        at(path, "must be a mapping with a type");
        continue;
      }
      const { type, inputs, ...rest } = raw as Record<string, unknown>;
      const types = REGISTRY[section];
      if (typeof type !== "string" || !Object.hasOwn(types, type)) {
        at(
          [...path, "type"],
          `must be one of ${Object.keys(types).join(", ")} (got ${JSON.stringify(type)})`,
        );
        continue;
      }
      let inputList: string[] = [];
      if (section === "sources") {
        if (inputs !== undefined) at([...path, "inputs"], "a source has no inputs");
      } else if (
        !Array.isArray(inputs) ||
        inputs.length === 0 ||
        !inputs.every((i) => typeof i === "string")
      ) {
        at([...path, "inputs"], "must list the names of the components this one reads from");
      } else {
        inputList = inputs as string[];
      }
      const config = type === "arrow" ? { ...rest, format: "arrow" } : rest;
      const parsed = parseTyped(types[type]!.schema as z.ZodType, config);
      if (!parsed.success) for (const issue of parsed.error.issues) atIssue(path, issue);
      // Kept even when its config is wrong, so its wiring is checked (and reported) too.
      components.set(name, { section, name, type, inputs: inputList, config: parsed.data });
    }
  }
  let deadLetters: Plan["deadLetters"] = null;
  if (root.dead_letters !== undefined) {
    const parsed = deadLettersSchema.safeParse(root.dead_letters);
    if (parsed.success) deadLetters = parsed.data;
    else for (const issue of parsed.error.issues) atIssue(["dead_letters"], issue);
  }

  // The graph: inputs exist, no cycles, every non-sink feeds something.
  for (const c of components.values()) {
    c.inputs.forEach((input, i) => {
      if (!components.has(input)) at([c.section, c.name, "inputs", i], `no component named ${input}`);
      else if (components.get(input)!.section === "sinks")
        at([c.section, c.name, "inputs", i], `${input} is a sink: sinks have no outputs`);
    });
  }
  const state = new Map<string, "visiting" | "done">();
  const visit = (name: string, trail: string[]): void => {
    if (state.get(name) === "done") return;
    if (state.get(name) === "visiting") {
      const cycle = [...trail.slice(trail.indexOf(name)), name];
      at([components.get(name)!.section, name, "inputs"], `cycle: ${cycle.join(" → ")}`);
      return;
    }
    state.set(name, "visiting");
    for (const input of components.get(name)?.inputs ?? [])
      if (components.has(input)) visit(input, [...trail, name]);
    state.set(name, "done");
  };
  for (const name of components.keys()) visit(name, []);
  const consumers = (name: string) => [...components.values()].filter((c) => c.inputs.includes(name));
  for (const c of components.values()) {
    if (c.section !== "sinks" && consumers(c.name).length === 0)
      at([c.section, c.name], "nothing reads from it");
  }
  if (problems.length > 0) throw invalid(problems);

  // The shape: one source, a chain of transforms in the supported order, then the sinks.
  const all = [...components.values()];
  const sources = all.filter((c) => c.section === "sources");
  if (sources.length !== 1) at(["sources"], `exactly one source is supported, found ${sources.length}`);
  const chain: Component[] = [];
  let tail = sources[0]!;
  for (;;) {
    const next = consumers(tail.name).filter((c) => c.section === "transforms");
    if (next.length === 0) break;
    if (next.length > 1) {
      at(
        ["transforms"],
        `${tail.name} feeds ${next.map((n) => n.name).join(" and ")}: transforms form one chain`,
      );
      break;
    }
    if (next[0]!.inputs.length !== 1)
      at(["transforms", next[0]!.name, "inputs"], "a transform reads one input");
    chain.push(next[0]!);
    tail = next[0]!;
  }
  const types = chain.map((c) => c.type);
  if (types[0] !== "assemble") at(["transforms"], "the source must feed an assemble transform first");
  types.forEach((t, i) => {
    if (i > 0 && t === "assemble") at(["transforms", chain[i]!.name], "assemble runs once, first");
    if (types.indexOf(t) !== i) at(["transforms", chain[i]!.name], `${t} runs at most once`);
    if (LAST_ONLY.has(t) && i !== types.length - 1)
      at(["transforms", chain[i]!.name], `${t} must be the last transform (it writes whole groups)`);
  });
  const sinks = all.filter((c) => c.section === "sinks");
  for (const s of sinks) {
    if (s.inputs.length !== 1 || s.inputs[0] !== tail.name) {
      at(["sinks", s.name, "inputs"], `sinks read the end of the transform chain (${tail.name})`);
    }
  }
  const files = sinks.filter((s) => s.type === "parquet" || s.type === "arrow");
  if (files.length !== 1)
    at(["sinks"], `exactly one parquet or arrow sink is needed (recovery trusts it), found ${files.length}`);
  const source = sources[0]!;
  const sourceConnection =
    source.type === "kafka"
      ? ((source.config as { connection?: KafkaConnection })?.connection ?? null)
      : null;
  const topics = new Set<string>();
  for (const s of sinks.filter((c) => c.type === "kafka")) {
    const config = s.config as { topic?: string; connection?: unknown } | undefined;
    if (config?.connection === undefined && source.type !== "kafka")
      at(["sinks", s.name, "connection"], "a kafka sink needs a connection when the source is not kafka");
    if (config?.topic !== undefined) {
      if (topics.has(config.topic)) at(["sinks", s.name, "topic"], `topic ${config.topic} is written twice`);
      topics.add(config.topic);
    }
  }
  if (deadLetters?.type === "kafka" && deadLetters.connection === undefined && source.type !== "kafka")
    at(["dead_letters", "connection"], "a dead-letter topic needs a connection when the source is not kafka");
  if (problems.length > 0) throw invalid(problems);

  const planned = (c: Component): PlannedComponent => ({ name: c.name, type: c.type, config: c.config });
  return {
    source: planned(source),
    transforms: chain.map(planned),
    // The file sink last: it receives units only after every other sink acknowledged them.
    sinks: [...sinks.filter((s) => s.type === "kafka"), ...files].map(planned),
    deadLetters,
    sourceConnection,
  };
}

function invalid(problems: string[]): TrajflowError {
  return new TrajflowError("CONFIG_INVALID", `invalid pipeline:\n  ${problems.join("\n  ")}`, {
    details: { problems },
  });
}

/** One line naming what the pipeline does, for `validate` and the start of `run`. */
export function describePlan(plan: Plan): string {
  const steps = [`${plan.source.type} ${plan.source.name}`, ...plan.transforms.map((t) => t.name)];
  const sinks = plan.sinks.map((s) => {
    const c = s.config as { path?: string; topic?: string; format?: string };
    return s.type === "kafka" ? `topic ${c.topic}` : `${c.format ?? s.type} files in ${c.path}`;
  });
  const dl = plan.deadLetters;
  const letters =
    dl === null ? "" : dl.type === "files" ? `; dead letters in ${dl.path}` : `; dead letters to ${dl.topic}`;
  return `${steps.join(" → ")} → ${sinks.join(" + ")}${letters}`;
}

/**
 * Parses a component's config; where the schema expects a number or a boolean and finds a string (an
 * environment variable is always inserted as a string), reads the string as one and parses again.
 */
function parseTyped(schema: z.ZodType, config: unknown): ReturnType<z.ZodType["safeParse"]> {
  const first = schema.safeParse(config);
  if (first.success || typeof config !== "object" || config === null) return first;
  const copy = structuredClone(config) as Record<string, unknown>;
  let changed = false;
  for (const issue of first.error.issues) {
    const expected = (issue as { expected?: string }).expected;
    if (issue.code !== "invalid_type" || (expected !== "number" && expected !== "boolean")) continue;
    const path = issue.path as Array<string | number>;
    let parent: unknown = copy;
    for (const key of path.slice(0, -1)) parent = (parent as Record<string | number, unknown>)?.[key];
    const last = path[path.length - 1]!;
    const value = (parent as Record<string | number, unknown> | undefined)?.[last];
    if (typeof value !== "string") continue;
    const typed =
      expected === "boolean"
        ? value === "true"
          ? true
          : value === "false"
            ? false
            : undefined
        : /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(value.trim())
          ? Number(value)
          : undefined;
    if (typed === undefined) continue;
    (parent as Record<string | number, unknown>)[last] = typed;
    changed = true;
  }
  return changed ? schema.safeParse(copy) : first;
}
