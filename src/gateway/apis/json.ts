/** JSON values as the API codecs read them: objects by key, checked before use. */
export type Json = Record<string, unknown>;

export const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
