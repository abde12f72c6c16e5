/**
 * The config schema of an output location. Apart from location.ts, which encoder threads load: zod costs a
 * thread ~100 ms of CPU and ~19 MiB to load (measured), and only configuration needs it.
 */
import { z } from "zod";
import { locationProblem } from "./location.ts";

/** An output directory, or `s3://bucket/prefix`; other URL schemes are refused. */
export const outputLocationSchema = z
  .string()
  .min(1)
  .superRefine((path, ctx) => {
    const problem = locationProblem(path);
    if (problem !== null) ctx.addIssue({ code: "custom", message: problem });
  });
