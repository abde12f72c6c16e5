/**
 * Removes credentials from text that leaves the process (logs, dead letters, the `reward_info` column):
 * the user and password of URLs, bearer/basic tokens, `sk-...` API keys, and every secret the
 * configuration holds (header values, passwords), wherever a server echoed them back.
 */
const URL_USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/@]+@/gi;
const AUTH_TOKEN = /\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]+/gi;
const API_KEY = /\bsk-[A-Za-z0-9_-]{8,}/g;

export function redactor(secrets: Iterable<string> = []): (text: string) => string {
  // Short values would erase ordinary words; credentials are longer.
  const known = [...secrets].filter((s) => s.length >= 6).sort((a, b) => b.length - a.length);
  return (text: string) => {
    let out = text.replace(URL_USERINFO, "$1***@").replace(AUTH_TOKEN, "$1 ***").replace(API_KEY, "sk-***");
    for (const s of known) out = out.split(s).join("***");
    return out;
  };
}

/**
 * Header values as secrets, for `redactor`: each whole value, and the credential of an
 * `<scheme> <credential>` value (Bearer, Basic, ...), which a server may echo without its scheme.
 */
export function headerSecrets(headers: Record<string, string>): string[] {
  return Object.values(headers).flatMap((v) => {
    const m = /^[A-Za-z-]+\s+(\S+)$/.exec(v.trim());
    return m === null ? [v] : [v, m[1]!];
  });
}

/** The password (and user) of a URL, for `redactor`. */
export function urlSecrets(url: string): string[] {
  try {
    const u = new URL(url);
    return [decodeURIComponent(u.password), u.password, decodeURIComponent(u.username)].filter(
      (s) => s !== "",
    );
  } catch {
    return [];
  }
}
