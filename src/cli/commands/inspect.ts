/** `trajflow inspect`: rows a person can read, as text or an HTML page. */
import { writeFileSync } from "node:fs";
import { ExitCode, flagProblem, intOption, parse, throwFlagProblems, usageError } from "../args.ts";
import { renderHtml, tokenDecoder } from "../inspect-html.ts";
import { TrajflowError } from "../../core/errors.ts";
import type { TrajectoryRow } from "../../schemas/trajectory.ts";
import { inspect, NearestKeys, selectRows } from "../inspect.ts";

export const INSPECT_HELP = `trajflow inspect <file|dir|s3://bucket/prefix> [options]

Prints trajectory rows from a Parquet file, or every Parquet file under a directory: key, status,
reward, finish reasons, flags, token counts and the runs of the loss mask.

Options:
  --uid <uid|key>      only rows of this uid, or the row of this key (as each printed row starts)
  --key <key>          only the row of this key
  --session <id>       only rows of this session_id
  --limit <n>          at most n rows
  --tokens             also print the token ids and the mask
  --json               one JSON object per row, every column, exact values (the text view rounds)
  --html <out.html>    write a page instead: each session's tree of rows, tokens coloured by mask,
                       logprobs on hover, rewards, flags and finish reasons
  --tokenizer <name>   with --html, show text: cl100k_base, o200k_base, p50k_base, r50k_base
                       (gpt-tokenizer's encodings), or a model directory with a tokenizer.json
                       (as the gateway's --tokenizer-dir) or the tokenizer.json itself
  -h, --help           show this help
`;

export async function runInspect(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    uid: { type: "string" },
    key: { type: "string" },
    json: { type: "boolean" },
    session: { type: "string" },
    limit: { type: "string" },
    tokens: { type: "boolean" },
    html: { type: "string" },
    tokenizer: { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help === true) {
    process.stdout.write(INSPECT_HELP);
    return ExitCode.OK;
  }
  if (positionals.length !== 1) throw usageError("inspect needs exactly one file or directory");
  const filter = {
    uid: values.uid,
    key: values.key,
    session: values.session,
    limit: nonNegative(intOption("limit", values.limit)),
    tokens: values.tokens,
  };
  throwFlagProblems();
  if (values.html !== undefined) {
    // Read before the rows: a wrong --tokenizer is the user's to fix first.
    const decode = values.tokenizer === undefined ? null : await tokenDecoder(values.tokenizer);
    const rows = await selectRows(positionals[0]!, filter);
    writeFileSync(values.html, renderHtml(rows, decode));
    process.stderr.write(`${rows.length} row(s) in ${values.html}\n`);
    return ExitCode.OK;
  }
  if (values.tokenizer !== undefined) throw usageError("--tokenizer is for --html");
  const asked = values.key ?? values.uid;
  const near = asked === undefined ? undefined : new NearestKeys(asked);
  const print = (line: string) => process.stdout.write(`${line}\n`);
  const shown =
    values.json === true
      ? await inspect(
          positionals[0]!,
          filter,
          () => {},
          (row) => print(rowJson(row)),
          near,
        )
      : await inspect(positionals[0]!, filter, print, undefined, near);
  if (shown === 0 && near !== undefined) {
    const flag = values.key !== undefined ? "--key" : "--uid";
    const keys = near.keys();
    throw new TrajflowError(
      "NO_ROWS_MATCH",
      `no row matches ${flag} ${asked}${keys.length > 0 ? `; the closest keys: ${keys.join(", ")}` : " (the input has no rows)"}`,
    );
  }
  process.stderr.write(`${shown} row(s)\n`);
  return ExitCode.OK;
}

/** `--limit`: a count, so not below 0 (recorded as a flag problem, reported with the others). */
function nonNegative(n: number | undefined): number | undefined {
  if (n !== undefined && n < 0) {
    flagProblem(`--limit must be 0 or more, got ${n}`);
    return undefined;
  }
  return n;
}

/** A row as one JSON line: every column, typed arrays as arrays, binary as base64. */
function rowJson(row: TrajectoryRow): string {
  return JSON.stringify(row, (_key, value: unknown) =>
    value instanceof Uint8Array
      ? Buffer.from(value).toString("base64")
      : ArrayBuffer.isView(value)
        ? Array.from(value as unknown as ArrayLike<number>)
        : typeof value === "bigint"
          ? Number(value)
          : value,
  );
}
