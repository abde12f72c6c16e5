/**
 * A pipeline document's components and wiring, validated in full before anything opens: every
 * component's config (its own schema, from the registry), the graph (inputs exist, no cycles, nothing
 * left unconnected), and the graph rules of the runtime (docs/pipelines.md), read from the registry's
 * places and roles:
 *
 *   - one source;
 *   - a chain of transforms: the ingest stage (`assemble`) first, a `last` one (`group`) only last, each
 *     type at most once;
 *   - sinks read the end of the chain: exactly one `durable` sink (`parquet` or `arrow`: the files
 *     recovery trusts) and any number of `topic` sinks (acknowledged before the files are written);
 *   - dead letters to any `dead_letters` type, by default where the source or the durable sink says;
 *   - what the source shares (a Kafka source's connection) completes the others' configs, each entry
 *     resolving its own (a topic without a connection takes the source's).
 *
 * Every problem is listed with where it is. `trajflow replay` and `trajflow consume` build a document
 * like a pipeline file's and go through the same plan.
 */
import type { z } from "zod";
import type { Resolved, SharedSettings, SourceTraits } from "../contract/components.ts";
import { issueProblems } from "../core/config.ts";
import { TrajflowError } from "../core/errors.ts";
import type { MemoryLimit } from "../core/memory-limit.ts";
import type { LoadedPipeline } from "./load.ts";
import { REGISTRY, type DeadLettersPlan, type Section } from "./registry.ts";

/** One validated component: its name, registered type and parsed config. */
export interface PlannedComponent {
  name: string;
  type: string;
  config: unknown;
}

export interface Plan {
  source: PlannedComponent;
  /** The source type's traits (registry). */
  sourceTraits: SourceTraits;
  /** In the order units pass through them; the ingest stage first. */
  transforms: PlannedComponent[];
  /** The topic sinks, then the durable sink (exactly one): the order units reach them. */
  sinks: PlannedComponent[];
  /** As configured, else the source's default, else beside the durable sink's output. */
  deadLetters: DeadLettersPlan;
  /** The memory limit the defaults were sized for, and each setting it sized; null without a limit. */
  memory: MemorySizing | null;
}

export interface MemorySizing {
  limit: MemoryLimit;
  /** `component.key = value` of each default the limit set (the pipeline's own settings stay). */
  sized: string[];
}

interface Component {
  section: Section;
  name: string;
  type: string;
  inputs: string[];
  config: unknown;
}

const SECTIONS = ["sources", "transforms", "sinks"] as const;
// `gateway` is the gateway's section (a pipeline file may describe the gateway feeding it); the pipeline
// command checks it with the gateway's own schema, the plan only knows the name.
const TOP_LEVEL = new Set(["version", ...SECTIONS, "dead_letters", "gateway"]);

/** Records a problem at a path of the document (`file:line: path: message`). */
type At = (path: Array<string | number>, message: string) => void;

export function planPipeline(
  pipeline: LoadedPipeline,
  initial: string[] = [],
  memory: MemoryLimit | null = null,
): Plan {
  const problems = [...initial];
  const sizing: MemorySizing | null = memory === null ? null : { limit: memory, sized: [] };
  // An unreadable or unparsable file: its own problems are all there is to say.
  if (pipeline.value === null) throw invalid(problems);
  const at: At = (path, message) => problems.push(`${pipeline.where(path)}: ${path.join(".")}: ${message}`);
  const root = pipeline.value as Record<string, unknown>;
  for (const key of Object.keys(root)) {
    if (!TOP_LEVEL.has(key)) at([key], `unknown section; a pipeline has ${[...TOP_LEVEL].join(", ")}`);
  }
  if (root.version !== undefined && root.version !== 1) at(["version"], "only version 1 exists");
  const components = readComponents(root, at, sizing);
  const configured = root.dead_letters === undefined ? undefined : readDeadLetters(root.dead_letters, at);
  checkGraph(components, at);
  if (problems.length > 0) throw invalid(problems);

  // Shape and outputs are checked together, so a pipeline's problems are all listed at once.
  const { source, chain, sinks } = checkShape(components, at);
  const sourceEntry = REGISTRY.sources[source.type]!;
  const shared = sourceEntry.shares?.(source.config as never) ?? {};
  const durable = sinks.find((s) => REGISTRY.sinks[s.type]!.role === "durable");
  const deadLetters =
    configured ??
    sourceEntry.deadLetters?.(source.config as never) ??
    (durable === undefined
      ? undefined
      : REGISTRY.sinks[durable.type]!.deadLetters?.(durable.config as never));
  if (durable !== undefined && deadLetters === undefined)
    at(["dead_letters"], "missing: neither the source nor the durable sink has a default place for them");
  const outputs = resolveOutputs(sinks, deadLetters, shared, at);
  if (problems.length > 0 || durable === undefined || outputs.deadLetters === undefined)
    throw invalid(problems);

  const planned = (c: Component): PlannedComponent => ({ name: c.name, type: c.type, config: c.config });
  const resolved = outputs.sinks;
  return {
    source: planned(source),
    sourceTraits: sourceEntry.traits,
    transforms: chain.map(planned),
    // In the order units reach them: the topics acknowledge a unit before the durable sink gets it.
    sinks: [
      ...resolved.filter((s) => s.name !== durable.name),
      resolved.find((s) => s.name === durable.name)!,
    ],
    deadLetters: outputs.deadLetters,
    memory: sizing,
  };
}

/** Every component of the three sections, its type known and its config parsed by its own schema. */
function readComponents(
  root: Record<string, unknown>,
  at: At,
  sizing: MemorySizing | null,
): Map<string, Component> {
  const components = new Map<string, Component>();
  for (const section of SECTIONS) {
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
      const component = readComponent(section, name, raw, at, sizing);
      // Kept even when its config is wrong, so its wiring is checked (and reported) too.
      if (component !== null) components.set(name, component);
    }
  }
  return components;
}

function readComponent(
  section: (typeof SECTIONS)[number],
  name: string,
  raw: unknown,
  at: At,
  sizing: MemorySizing | null,
): Component | null {
  const path = [section, name];
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    at(path, "must be a mapping with a type");
    return null;
  }
  const { type, inputs, ...rest } = raw as Record<string, unknown>;
  const types = REGISTRY[section];
  if (typeof type !== "string" || !Object.hasOwn(types, type)) {
    at([...path, "type"], `must be one of ${Object.keys(types).join(", ")} (got ${JSON.stringify(type)})`);
    return null;
  }
  let inputList: string[] = [];
  if (section === "sources") {
    if (inputs !== undefined) at([...path, "inputs"], "a source has no inputs");
  } else if (!Array.isArray(inputs) || inputs.length === 0 || !inputs.every((i) => typeof i === "string")) {
    at([...path, "inputs"], "must list the names of the components this one reads from");
  } else {
    inputList = inputs as string[];
  }
  const implied = section === "sinks" ? REGISTRY.sinks[type]!.implied : undefined;
  const sized = sizedDefaults(types[type]!.sizeFor, rest, name, sizing);
  const config = parseConfig(types[type]!.schema, { ...sized, ...rest, ...implied }, path, at);
  return { section, name, type, inputs: inputList, config };
}

/** The defaults a memory limit gives a component, for the keys its config leaves unset; noted in `sizing`. */
function sizedDefaults(
  sizeFor: ((limit: number) => Record<string, unknown>) | undefined,
  config: Record<string, unknown>,
  name: string,
  sizing: MemorySizing | null,
): Record<string, unknown> {
  if (sizing === null || sizeFor === undefined) return {};
  const sized = Object.entries(sizeFor(sizing.limit.bytes)).filter(([key]) => config[key] === undefined);
  for (const [key, value] of sized) sizing.sized.push(`${name}.${key} = ${String(value)}`);
  return Object.fromEntries(sized);
}

/** A config parsed by its schema; its problems recorded under `path`. */
function parseConfig(schema: z.ZodType, config: unknown, path: string[], at: At): unknown {
  const parsed = parseTyped(schema, config);
  if (!parsed.success) {
    for (const issue of parsed.error.issues)
      for (const p of issueProblems(issue)) at([...path, ...p.path], p.message);
  }
  return parsed.data;
}

function readDeadLetters(raw: unknown, at: At): DeadLettersPlan | undefined {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    at(["dead_letters"], "must be a mapping with a type");
    return undefined;
  }
  const { type, ...rest } = raw as Record<string, unknown>;
  const types = REGISTRY.dead_letters;
  if (typeof type !== "string" || !Object.hasOwn(types, type)) {
    at(
      ["dead_letters", "type"],
      `must be one of ${Object.keys(types).join(", ")} (got ${JSON.stringify(type)})`,
    );
    return undefined;
  }
  return { type, config: parseConfig(types[type]!.schema, rest, ["dead_letters"], at) };
}

/** Inputs exist and are not sinks, no cycles, every non-sink feeds something. */
function checkGraph(components: Map<string, Component>, at: At): void {
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
  for (const c of components.values()) {
    if (c.section !== "sinks" && consumers(components, c.name).length === 0)
      at([c.section, c.name], "nothing reads from it");
  }
}

const consumers = (components: Map<string, Component>, name: string) =>
  [...components.values()].filter((c) => c.inputs.includes(name));

/** One source, a chain of transforms in their places, sinks at its end with exactly one durable sink. */
function checkShape(
  components: Map<string, Component>,
  at: At,
): { source: Component; chain: Component[]; sinks: Component[] } {
  const all = [...components.values()];
  const sources = all.filter((c) => c.section === "sources");
  if (sources.length !== 1) at(["sources"], `exactly one source is supported, found ${sources.length}`);
  const chain: Component[] = [];
  let tail = sources[0]!;
  for (;;) {
    const next = consumers(components, tail.name).filter((c) => c.section === "transforms");
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
  const place = (c: Component) => REGISTRY.transforms[c.type]!.place;
  if (chain[0] === undefined || place(chain[0]) !== "ingest") {
    at(
      ["transforms"],
      `the source must feed an ${namesOf(REGISTRY.transforms, (e) => e.place === "ingest")} transform first`,
    );
  }
  chain.forEach((c, i) => {
    if (i > 0 && place(c) === "ingest") at(["transforms", c.name], `${c.type} runs once, first`);
    if (chain.findIndex((o) => o.type === c.type) !== i)
      at(["transforms", c.name], `${c.type} runs at most once`);
    if (place(c) === "last" && i !== chain.length - 1)
      at(["transforms", c.name], `${c.type} must be the last transform (it writes whole groups)`);
  });
  const sinks = all.filter((c) => c.section === "sinks");
  for (const s of sinks) {
    if (s.inputs.length !== 1 || s.inputs[0] !== tail.name) {
      at(["sinks", s.name, "inputs"], `sinks read the end of the transform chain (${tail.name})`);
    }
  }
  const durable = sinks.filter((s) => REGISTRY.sinks[s.type]!.role === "durable");
  if (durable.length !== 1) {
    const types = namesOf(REGISTRY.sinks, (e) => e.role === "durable");
    at(["sinks"], `exactly one ${types} sink is needed (recovery trusts it), found ${durable.length}`);
  }
  return { source: sources[0]!, chain, sinks };
}

/** The registered types whose entry passes `test`, as "a or b". */
function namesOf<E>(entries: Record<string, E>, test: (e: E) => boolean): string {
  return Object.keys(entries)
    .filter((k) => test(entries[k]!))
    .join(" or ");
}

/**
 * Each output's config completed by its own entry from what the source shares (a topic's connection),
 * what cannot be recorded; no two outputs write to the same place.
 */
function resolveOutputs(
  sinks: Component[],
  deadLetters: DeadLettersPlan | undefined,
  shared: SharedSettings,
  at: At,
): { sinks: PlannedComponent[]; deadLetters: DeadLettersPlan | undefined } {
  const resolve = (
    entry: { resolve?: (config: never, shared: SharedSettings) => Resolved<unknown> },
    config: unknown,
    path: string[],
  ): unknown => {
    const r = entry.resolve?.(config as never, shared);
    if (r === undefined) return config;
    if ("config" in r) return r.config;
    at([...path, ...r.path], r.problem);
    return config;
  };
  const targets = new Set<string>();
  const resolved = sinks.map((s): PlannedComponent => {
    const entry = REGISTRY.sinks[s.type]!;
    const config = resolve(entry, s.config, ["sinks", s.name]);
    const target = entry.target?.(config as never);
    if (target !== undefined) {
      if (targets.has(target)) at(["sinks", s.name], `${target} is written twice`);
      targets.add(target);
    }
    return { name: s.name, type: s.type, config };
  });
  const letters =
    deadLetters === undefined
      ? undefined
      : {
          type: deadLetters.type,
          config: resolve(REGISTRY.dead_letters[deadLetters.type]!, deadLetters.config, ["dead_letters"]),
        };
  return { sinks: resolved, deadLetters: letters };
}

function invalid(problems: string[]): TrajflowError {
  return new TrajflowError("CONFIG_INVALID", `invalid pipeline:\n  ${problems.join("\n  ")}`, {
    details: { problems },
  });
}

/** One line naming what the pipeline does, for `validate` and the start of `run`. */
export function describePlan(plan: Plan): string {
  const steps = [`${plan.source.type} ${plan.source.name}`, ...plan.transforms.map((t) => t.name)];
  const sinks = plan.sinks.map((s) => REGISTRY.sinks[s.type]!.target?.(s.config as never) ?? s.name);
  const letters = REGISTRY.dead_letters[plan.deadLetters.type]!.target?.(plan.deadLetters.config as never);
  return `${steps.join(" → ")} → ${sinks.join(" + ")}${letters === undefined ? "" : `; ${letters}`}`;
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
