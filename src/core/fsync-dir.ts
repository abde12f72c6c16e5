import { promises as fs } from "node:fs";

/** Makes a directory's entries durable (a new or renamed file survives a crash only once its directory is synced). */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
