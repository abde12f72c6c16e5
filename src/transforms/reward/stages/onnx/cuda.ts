/**
 * Whether onnxruntime-node's CUDA execution provider is installed. The npm package ships the CPU backend
 * only; the CUDA provider's libraries are downloaded by its install script (which this project skips, see
 * docs/rewards.md "The CUDA provider"). Without them onnxruntime fails with "Failed to load shared library"
 * and prints a native error; saying which file is missing, and where the instructions are, is clearer.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/** The libraries the `cuda12` install of onnxruntime-node puts beside its binding. */
export const CUDA_PROVIDER_LIBRARIES = [
  "libonnxruntime_providers_shared.so",
  "libonnxruntime_providers_cuda.so",
];

/** The directory onnxruntime-node loads its native libraries from on this platform. */
export function onnxruntimeBinDir(): string {
  const packageJson = createRequire(import.meta.url).resolve("onnxruntime-node/package.json");
  return join(dirname(packageJson), "bin", "napi-v6", process.platform, process.arch);
}

/** Why the CUDA provider cannot load, when a file it needs is missing; null when it is installed. */
export function cudaProviderMissing(): string | null {
  if (process.platform !== "linux") return null; // other platforms: onnxruntime's own error says it
  const dir = onnxruntimeBinDir();
  const missing = CUDA_PROVIDER_LIBRARIES.filter((f) => !existsSync(join(dir, f)));
  if (missing.length === 0) return null;
  return (
    `onnxruntime-node's CUDA provider is not installed (${missing.join(", ")} missing in ${dir}); ` +
    `docs/rewards.md#the-cuda-provider says how to install it`
  );
}
