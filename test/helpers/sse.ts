/** Reading server-sent-event streams in tests, as they arrive. */

type Json = Record<string, unknown>;

/** Every event of a stream in order: its `event:` name (if any) and its parsed `data:` (stops at `[DONE]`). */
export async function* sseEvents(response: Response): AsyncGenerator<{ event?: string; data: Json }> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const bytes of response.body!) {
    buffer += decoder.decode(bytes as Uint8Array, { stream: true });
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event: string | undefined;
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        yield { ...(event !== undefined ? { event } : {}), data: JSON.parse(data) as Json };
      }
    }
  }
}

/** Every `data:` object of a stream, in order, as it arrives (stops at `[DONE]`). */
export async function* sseData(response: Response): AsyncGenerator<Json> {
  for await (const e of sseEvents(response)) yield e.data;
}
