/**
 * Rendering in the gateway itself from the model directory's own files, instead of the engine's routes: the
 * chat template (tokenizer_config.json's `chat_template`, or chat_template.jinja) through @huggingface/jinja,
 * and the tokenizer (tokenizer.json) through @huggingface/tokenizers, both pure JavaScript and offline. No
 * round trip to the engine: a continuation costs a render of a few messages and one encode in-process.
 *
 * The template gets what Hugging Face's apply_chat_template passes: the messages (tool-call arguments as
 * objects, as vLLM and llama.cpp pass them), `tools`, `add_generation_prompt`, `bos_token`, `eos_token`,
 * the call's `chat_template_kwargs` and `reasoning_effort`. The rendered text is encoded without special
 * tokens added (the template writes its own BOS), special tokens' text read as those tokens.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import type { PromptRenderer } from "../engines/engine.ts";

type Json = Record<string, unknown>;

/** A special token as tokenizer_config.json writes it: a string, or `{content: ...}`. */
function tokenText(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  const content = (value as { content?: unknown } | null | undefined)?.content;
  return typeof content === "string" ? content : undefined;
}

/** The default chat template of a model directory (a named list's `default`, else its first). */
function chatTemplate(dir: string, config: Json): string {
  const t = config.chat_template;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const named = t as Array<{ name?: unknown; template?: unknown }>;
    const chosen = named.find((x) => x.name === "default") ?? named[0];
    if (typeof chosen?.template === "string") return chosen.template;
  }
  const file = join(dir, "chat_template.jinja");
  if (existsSync(file)) return readFileSync(file, "utf8");
  throw new Error(
    `${dir} has no chat template (tokenizer_config.json chat_template, or chat_template.jinja)`,
  );
}

function readJson(path: string): Json {
  if (!existsSync(path)) throw new Error(`${path} is missing`);
  return JSON.parse(readFileSync(path, "utf8")) as Json;
}

/** Tool-call arguments as objects (a JSON string the agent sent back is parsed; anything else kept). */
function templateMessages(messages: unknown): unknown[] {
  if (!Array.isArray(messages)) return [];
  return messages.map((m) => {
    const calls = (m as { tool_calls?: unknown } | null)?.tool_calls;
    if (!Array.isArray(calls)) return m;
    return {
      ...(m as Json),
      tool_calls: calls.map((c: Json) => {
        const fn = c?.function as Json | undefined;
        if (typeof fn?.arguments !== "string") return c;
        try {
          return { ...c, function: { ...fn, arguments: JSON.parse(fn.arguments) as unknown } };
        } catch {
          return c;
        }
      }),
    };
  });
}

/** A model's tokenizer.json, with the tokenizer_config.json beside it when there is one, read offline. */
export function modelTokenizer(file: string): Tokenizer {
  const configFile = join(dirname(file), "tokenizer_config.json");
  return new Tokenizer(readJson(file), existsSync(configFile) ? readJson(configFile) : {});
}

/** The renderer of a model directory (tokenizer.json, tokenizer_config.json); throws what is missing. */
export function localRenderer(dir: string): PromptRenderer {
  const config = readJson(join(dir, "tokenizer_config.json"));
  const tokenizer = modelTokenizer(join(dir, "tokenizer.json"));
  const template = new Template(chatTemplate(dir, config));
  const bos = tokenText(config.bos_token);
  const eos = tokenText(config.eos_token);
  const render = (body: Json): string => {
    const kwargs = (body.chat_template_kwargs ?? {}) as Json;
    return template.render({
      ...kwargs,
      messages: templateMessages(body.messages),
      ...(Array.isArray(body.tools) ? { tools: body.tools } : {}),
      ...(body.reasoning_effort !== undefined ? { reasoning_effort: body.reasoning_effort } : {}),
      add_generation_prompt: true,
      ...(bos !== undefined ? { bos_token: bos } : {}),
      ...(eos !== undefined ? { eos_token: eos } : {}),
    });
  };
  const encode = (text: string) => Int32Array.from(tokenizer.encode(text, { add_special_tokens: false }).ids);
  return {
    renderIds: async (body) => encode(render(body)),
    renderText: async (body) => render(body),
    tokenize: async (text) => encode(text),
  };
}
