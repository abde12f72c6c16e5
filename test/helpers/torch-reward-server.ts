/**
 * Starts the torch reward server (test/fixtures/reward_server.py) from the project's Python environment,
 * for the reward-server test and bench/gpu-rewards.ts: on a free port, CUDA when torch sees a GPU.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { PYTHON } from "./python.ts";

const SERVER = new URL("../fixtures/reward_server.py", import.meta.url).pathname;

export interface TorchRewardServer {
  url: string;
  /** Where torch runs the model: "cuda" or "cpu". */
  device: string;
  child: ChildProcess;
}

/** Resolves once the server listens (its first stdout line); rejects with its stderr if it exits first. */
export async function startTorchRewardServer(model: string): Promise<TorchRewardServer> {
  const child = spawn(PYTHON, [SERVER, model, "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
  const first = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`reward_server.py exited with ${code}: ${stderr}`)));
  });
  const { port, device } = JSON.parse(first) as { port: number; device: string };
  return { url: `http://127.0.0.1:${port}`, device, child };
}
