// The part of parquetjs-lite's API trajflow uses (the package ships no types).
declare module "parquetjs-lite" {
  import type { Writable } from "node:stream";

  export class ParquetSchema {
    constructor(fields: Record<string, unknown>);
  }
  export class ParquetWriter {
    static openStream(
      schema: unknown,
      stream: Writable,
      opts?: { rowGroupSize?: number },
    ): Promise<ParquetWriter>;
    setMetadata(key: string, value: string): void;
    appendRow(row: Record<string, unknown>): Promise<void>;
    close(): Promise<void>;
  }
  const parquet: { ParquetSchema: typeof ParquetSchema; ParquetWriter: typeof ParquetWriter };
  export default parquet;
}
