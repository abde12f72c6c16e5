/** `trajflow inspect`: rows a person can read, as text or an HTML page. */
import { writeFileSync } from "node:fs";
import { ExitCode, intOption, parse, throwFlagProblems, usageError } from "../args.ts";
import { isTokenizerName, renderHtml, tokenDecoder, type TokenizerName } from "../inspect-html.ts";
import { inspect, selectRows } from "../inspect.ts";

export const INSPECT_HELP = `trajflow inspect <file|dir|s3://bucket/prefix> [options]

Prints trajectory rows from a Parquet file, or every Parquet file under a directory: key, status,
reward, finish reasons, flags, token counts and the runs of the loss mask.

Options:
  --uid <uid>          only rows of this uid
  --session <id>       only rows of this session_id
  --limit <n>          at most n rows
  --tokens             also print the token ids and the mask
  --html <out.html>    write a page instead: each session's tree of rows, tokens coloured by mask,
                       logprobs on hover, rewards, flags and finish reasons
  --tokenizer <name>   with --html, show text: cl100k_base, o200k_base, p50k_base or r50k_base
                       (gpt-tokenizer's encodings; other tokenizers' ids are shown as ids)
  -h, --help           show this help
`;

export async function runInspect(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    uid: { type: "string" },
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
    session: values.session,
    limit: intOption("limit", values.limit),
    tokens: values.tokens,
  };
  throwFlagProblems();
  if (values.tokenizer !== undefined && !isTokenizerName(values.tokenizer)) {
    throw usageError(
      `--tokenizer must be cl100k_base, o200k_base, p50k_base or r50k_base, got ${values.tokenizer}`,
    );
  }
  if (values.html !== undefined) {
    const rows = await selectRows(positionals[0]!, filter);
    const decode =
      values.tokenizer === undefined ? null : await tokenDecoder(values.tokenizer as TokenizerName);
    writeFileSync(values.html, renderHtml(rows, decode));
    process.stderr.write(`${rows.length} row(s) in ${values.html}\n`);
    return ExitCode.OK;
  }
  if (values.tokenizer !== undefined) throw usageError("--tokenizer is for --html");
  const shown = await inspect(positionals[0]!, filter, (line) => process.stdout.write(`${line}\n`));
  process.stderr.write(`${shown} row(s)\n`);
  return ExitCode.OK;
}
