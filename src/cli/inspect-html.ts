/**
 * `trajflow inspect --html <out.html>`: a session as a person wants to see it. One self-contained HTML
 * file (no scripts or resources from elsewhere): per session its prefix tree of rows (branches, shared
 * prefixes), and per row its tokens coloured by role (prompt, context with mask 0, trained with mask 1),
 * decoded to text when a tokenizer is given (ids otherwise), the token id and logprob on hover, rewards,
 * flags and finish reasons.
 */
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { TrajflowError } from "../core/errors.ts";
import { sessionKey } from "../schemas/session.ts";
import type { TrajectoryRow } from "../schemas/trajectory.ts";

/** Decodes one token id to text (for display only). */
export type TokenDecoder = (id: number) => string;

const TOKENIZERS = ["cl100k_base", "o200k_base", "p50k_base", "r50k_base"] as const;
export type TokenizerName = (typeof TOKENIZERS)[number];

export function isTokenizerName(name: string): name is TokenizerName {
  return (TOKENIZERS as readonly string[]).includes(name);
}

/**
 * The decoder `--tokenizer` names: one of gpt-tokenizer's encodings, or a Hugging Face tokenizer (a model
 * directory holding tokenizer.json, as the gateway's --tokenizer-dir takes, or the tokenizer.json itself),
 * read offline with @huggingface/tokenizers. An id the tokenizer does not know shows as ⟨id⟩.
 */
export async function tokenDecoder(spec: string): Promise<TokenDecoder> {
  let decode: (ids: number[]) => string;
  if (isTokenizerName(spec)) {
    const encoding = (await import(`gpt-tokenizer/encoding/${spec}`)) as {
      decode: (ids: number[]) => string;
    };
    decode = (ids) => encoding.decode(ids);
  } else {
    const file = existsSync(spec) && statSync(spec).isDirectory() ? join(spec, "tokenizer.json") : spec;
    if (!existsSync(file))
      throw new TrajflowError(
        "USAGE",
        `--tokenizer must be ${TOKENIZERS.join(", ")}, a model directory with a tokenizer.json, or a ` +
          `tokenizer.json; ${file} does not exist`,
      );
    const { modelTokenizer } = await import("../gateway/continuation/local-renderer.ts");
    const tokenizer = modelTokenizer(file);
    decode = (ids) => tokenizer.decode(ids, { skip_special_tokens: false });
  }
  return (id) => {
    try {
      return decode([id]);
    } catch {
      return `⟨${id}⟩`;
    }
  };
}

const esc = (s: string) =>
  s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll('"', "&quot;");

function tokens(row: TrajectoryRow, decode: TokenDecoder | null): string {
  const out: string[] = [];
  const shared = row.parent_index === null ? 0 : row.shared_prefix_len;
  const span = (id: number, cls: string, position: number, logprob: number | null) => {
    const title = `#${position} id ${id}${logprob === null ? "" : ` · logprob ${logprob.toFixed(4)}`}`;
    const text = decode === null ? `${id} ` : decode(id);
    const shown = esc(text).replaceAll("\n", "↵<br>");
    out.push(
      `<span class="tok ${cls}${position < shared ? " shared" : ""}" data-id="${id}"` +
        `${logprob === null ? "" : ` data-logprob="${logprob}"`} title="${esc(title)}">${shown}</span>`,
    );
  };
  row.prompt_ids.forEach((id, i) => span(id, "p", i, null));
  const base = row.prompt_ids.length;
  row.response_ids.forEach((id, i) => {
    const trained = row.response_mask[i] === 1;
    const lp = trained && row.rollout_log_probs !== null ? row.rollout_log_probs[i]! : null;
    span(id, trained ? "g" : "c", base + i, lp);
  });
  return out.join("");
}

function rewardText(row: TrajectoryRow): string {
  const parts = row.reward_names.map((n, i) => `${esc(n)} ${row.reward_values[i] ?? "null"}`);
  return `${row.reward ?? "null"}${parts.length > 0 ? ` (${parts.join(", ")})` : ""}`;
}

function rowCard(row: TrajectoryRow, decode: TokenDecoder | null): string {
  const meta = [
    ["status", row.status],
    ["reward", rewardText(row)],
    ["turns", `${row.num_turns}: ${row.finish_reasons_raw.map(esc).join(", ")}`],
    [
      "tokens",
      `prompt ${row.prompt_ids.length} · response ${row.response_ids.length} · trained ${row.num_trained_tokens}`,
    ],
    [
      "policy",
      row.weight_version_min === null ? "-" : `${row.weight_version_min}..${row.weight_version_max}`,
    ],
    ...(row.parent_index === null
      ? []
      : [["branch", `from row ${row.parent_index} after ${row.shared_prefix_len} shared tokens`]]),
  ];
  const flags = row.flags.map((f) => `<span class="flag">${esc(f)}</span>`).join(" ");
  return `<article class="row" id="${esc(row.key)}" data-key="${esc(row.key)}" data-index="${row.index}">
<h3>row ${row.index} <code>${esc(row.key)}</code> ${flags}</h3>
<dl>${meta.map(([k, v]) => `<dt>${k}</dt><dd class="${k}">${v}</dd>`).join("")}</dl>
<div class="seq">${tokens(row, decode)}</div>
</article>`;
}

/** The rows' tree by parent_index, as nested lists linking to the row cards. */
function tree(rows: TrajectoryRow[]): string {
  const children = new Map<number | null, TrajectoryRow[]>();
  for (const r of rows) {
    const list = children.get(r.parent_index) ?? [];
    list.push(r);
    children.set(r.parent_index, list);
  }
  const render = (parent: number | null): string => {
    const list = children.get(parent);
    if (list === undefined) return "";
    return `<ul>${list
      .map(
        (r) =>
          `<li data-row="${r.index}"><a href="#${esc(r.key)}">row ${r.index}</a> · ${r.num_trained_tokens} trained` +
          `${r.parent_index === null ? "" : ` · shares ${r.shared_prefix_len}`} · reward ${r.reward ?? "null"}` +
          `${r.flags.length > 0 ? ` · ${r.flags.map(esc).join(", ")}` : ""}${render(r.index)}</li>`,
      )
      .join("")}</ul>`;
  };
  return render(null);
}

export function renderHtml(rows: TrajectoryRow[], decode: TokenDecoder | null): string {
  const sessions = new Map<string, TrajectoryRow[]>();
  for (const r of rows) {
    const key = sessionKey(r.uid, r.session_id);
    const list = sessions.get(key) ?? [];
    list.push(r);
    sessions.set(key, list);
  }
  const body = [...sessions.values()]
    .map((list) => {
      list.sort((a, b) => a.index - b.index);
      const { uid, session_id } = list[0]!;
      return `<section class="session" data-uid="${esc(uid)}" data-session="${esc(session_id)}">
<h2>${esc(uid)} / ${esc(session_id)} <small>${list.length} row${list.length === 1 ? "" : "s"}</small></h2>
<nav class="tree">${tree(list)}</nav>
${list.map((r) => rowCard(r, decode)).join("\n")}
</section>`;
    })
    .join("\n");
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>trajflow: ${rows.length} rows</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
.session{border-top:2px solid #999;margin-top:2em}
.tree ul{list-style:none;padding-left:1.2em;border-left:1px dashed #aaa}
.row{margin:1em 0;padding:.5em 1em;border:1px solid #ddd;border-radius:6px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:0 1em;margin:.3em 0}dt{color:#666}dd{margin:0}
.seq{font:12px/1.6 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
.tok.p{background:#eeeeee;color:#555}.tok.c{background:#dbe9ff}.tok.g{background:#c8f0c8}
.tok.shared{opacity:.45}.tok:hover{outline:1px solid #333}
.flag{font-size:11px;background:#ffe3b3;border-radius:3px;padding:0 .4em}
.legend span{padding:0 .5em;margin-right:.5em}
</style></head><body>
<h1>trajflow sessions</h1>
<p class="legend"><span class="tok p">prompt</span><span class="tok c">context (mask 0)</span><span class="tok g">trained (mask 1)</span><span class="tok g shared">shared with the parent row</span> · hover a token for its id and logprob${decode === null ? " · token ids shown (no tokenizer given)" : ""}</p>
${body}
</body></html>
`;
}
