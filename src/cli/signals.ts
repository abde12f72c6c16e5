import type { Logger } from "../core/logger.ts";

/**
 * Resolves on the first SIGTERM or SIGINT (graceful stop: finish files in flight, commit, exit); a second
 * signal exits at once with 130, which is safe: committed files are whole and offsets cover only them.
 */
export function stopOnSignals(logger: Logger): Promise<void> {
  return new Promise<void>((resolve) => {
    let signals = 0;
    const onSignal = (signal: string) => {
      if (++signals > 1) process.exit(130);
      logger.info({ signal }, "Stopping: finishing files in flight and committing offsets.");
      resolve();
    };
    process.on("SIGTERM", () => onSignal("SIGTERM"));
    process.on("SIGINT", () => onSignal("SIGINT"));
  });
}
