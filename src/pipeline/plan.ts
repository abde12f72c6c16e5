/**
 * A pipeline file's components and wiring, validated in full before anything opens: every component's
 * config (its own schema), the graph (inputs exist, no cycles, nothing left unconnected), and that the
 * shape is one the runtime runs. Every problem is listed with where it is.
 *
 * Shapes the runtime runs (docs/pipelines.md):
 *   jsonl  → assemble → [rewards] → [staleness] → [group] → parquet|arrow
 *   kafka  → assemble → [rewards] → [staleness] → parquet|arrow [+ kafka trajectory topic]
 */
import { z } from "zod";
import { TrajflowError } from "../core/errors.ts";
import { fileSinkConfigSchema, type FileSinkConfig } from "../sinks/files/config.ts";
import { trajectoryTopicConfigSchema, type TrajectoryTopicConfig } from "../sinks/kafka/config.ts";
import { kafkaSourceConfigSchema, type KafkaSourceConfig } from "../sources/kafka/config.ts";
import { assembleConfigSchema, type AssembleConfig } from "../transforms/assemble/config.ts";
import { groupConfigSchema, type GroupConfig } from "../transforms/group/config.ts";
import { rewardsConfigSchema, type RewardsConfig } from "../transforms/reward/config.ts";
import { stalenessConfigSchema, type StalenessConfig } from "../transforms/staleness/staleness.ts";
import type { LoadedPipeline } from "./load.ts";

const jsonlSourceSchema = z.strictObject({
  paths: z.array(z.string().min(1)).min(1).describe("Recorded event files (.jsonl, gzip detected)."),
});

type Section = "sources" | "transforms" | "sinks";

/** Component types per section, each with its config schema (`type` and `inputs` are taken off first). */
const TYPES = {
  sources: { jsonl: jsonlSourceSchema, kafka: kafkaSourceConfigSchema },
  transforms: {
    assemble: assembleConfigSchema,
    rewards: rewardsConfigSchema,
    staleness: stalenessConfigSchema,
    group: groupConfigSchema,
  },
  sinks: {
    parquet: fileSinkConfigSchema,
    arrow: fileSinkConfigSchema,
    kafka: trajectoryTopicConfigSchema,
  },
} as const;

const deadLettersSchema = z.discriminatedUnion("type", [
  z.strictObject({
    type: z.literal("files"),
    path: z.string().min(1).describe("Directory of dead-letter files."),
  }),
  z.strictObject({ type: z.literal("kafka"), topic: z.string().min(1).describe("Dead-letter topic.") }),
]);

export interface Plan {
  source:
    | { name: string; type: "jsonl"; config: z.output<typeof jsonlSourceSchema> }
    | { name: string; type: "kafka"; config: KafkaSourceConfig };
  assemble: AssembleConfig;
  rewards: RewardsConfig | null;
  staleness: StalenessConfig | null;
  group: GroupConfig | null;
  files: FileSinkConfig;
  topic: TrajectoryTopicConfig | null;
  deadLetters: z.output<typeof deadLettersSchema> | null;
}

interface Component {
  section: Section;
  name: string;
  type: string;
  inputs: string[];
  config: unknown;
}

const TOP_LEVEL = new Set(["version", "sources", "transforms", "sinks", "dead_letters"]);
const ORDER = ["assemble", "rewards", "staleness", "group"];

export function planPipeline(pipeline: LoadedPipeline, initial: string[] = []): Plan {
  const problems = [...initial];
  // An unreadable or unparsable file: its own problems are all there is to say.
  if (pipeline.value === null) throw invalid(problems);
  const at = (path: Array<string | number>, message: string) =>
    problems.push(`${pipeline.where(path)}: ${path.join(".")}: ${message}`);
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
      const types = TYPES[section] as Record<string, z.ZodType>;
      if (typeof type !== "string" || !(type in types)) {
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
      const parsed = types[type]!.safeParse(config);
      if (!parsed.success) {
        for (const issue of parsed.error.issues)
          at([...path, ...(issue.path as Array<string | number>)], issue.message);
      }
      // Kept even when its config is wrong, so its wiring is checked (and reported) too.
      components.set(name, { section, name, type, inputs: inputList, config: parsed.data });
    }
  }
  let deadLetters: Plan["deadLetters"] = null;
  if (root.dead_letters !== undefined) {
    const parsed = deadLettersSchema.safeParse(root.dead_letters);
    if (parsed.success) deadLetters = parsed.data;
    else
      for (const issue of parsed.error.issues)
        at(["dead_letters", ...(issue.path as Array<string | number>)], issue.message);
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
  const ranks = types.map((t) => ORDER.indexOf(t));
  if (ranks.some((r, i) => i > 0 && r <= ranks[i - 1]!)) {
    at(
      ["transforms"],
      `transforms run in the order ${ORDER.join(" → ")}, each at most once (got ${types.join(" → ")})`,
    );
  }
  const sinks = all.filter((c) => c.section === "sinks");
  for (const s of sinks) {
    if (s.inputs.length !== 1 || s.inputs[0] !== tail.name) {
      at(["sinks", s.name, "inputs"], `sinks read the end of the transform chain (${tail.name})`);
    }
  }
  const files = sinks.filter((s) => s.type === "parquet" || s.type === "arrow");
  const topics = sinks.filter((s) => s.type === "kafka");
  if (files.length !== 1)
    at(["sinks"], `exactly one parquet or arrow sink is supported, found ${files.length}`);
  if (topics.length > 1) at(["sinks"], "at most one kafka trajectory sink is supported");
  const source = sources[0]!;
  if (topics.length > 0 && source.type !== "kafka") {
    at(
      ["sinks", topics[0]!.name],
      "a kafka trajectory sink needs a kafka source (its delivery is tied to offsets)",
    );
  }
  if (source.type === "kafka" && types.includes("group"))
    at(["transforms"], "group mode is not supported with a kafka source yet");
  if (source.type === "kafka" && deadLetters?.type === "files")
    at(["dead_letters"], "a kafka source sends dead letters to a topic");
  if (source.type === "jsonl" && deadLetters?.type === "kafka")
    at(["dead_letters"], "a jsonl source writes dead letters to files");
  if (problems.length > 0) throw invalid(problems);

  const of = <T>(type: string): T | null =>
    (chain.find((c) => c.type === type)?.config as T | undefined) ?? null;
  return {
    source: { name: source.name, type: source.type, config: source.config } as Plan["source"],
    assemble: of<AssembleConfig>("assemble")!,
    rewards: of<RewardsConfig>("rewards"),
    staleness: of<StalenessConfig>("staleness"),
    group: of<GroupConfig>("group"),
    files: files[0]!.config as FileSinkConfig,
    topic: (topics[0]?.config as TrajectoryTopicConfig | undefined) ?? null,
    deadLetters,
  };
}

function invalid(problems: string[]): TrajflowError {
  return new TrajflowError("CONFIG_INVALID", `invalid pipeline:\n  ${problems.join("\n  ")}`, {
    details: { problems },
  });
}
