import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';

/**
 * The dashboard's security rules, in one place:
 *
 * - It binds to 127.0.0.1 unless told otherwise; any bind that is not a loopback address needs a
 *   token (`--token` or RELAYBUS_DASHBOARD_TOKEN), at least `MIN_TOKEN_LENGTH` characters.
 * - With a token, every route but the login form needs a session (a random id in an HttpOnly,
 *   SameSite=Strict cookie, given by POST /login with the token) or `Authorization: Bearer <token>`.
 * - Every action that changes data is a POST carrying JSON and a CSRF token (`x-relaybus-csrf`, from
 *   the page's meta tag, per session), from the dashboard's own origin (`Origin`, when the browser
 *   sends one). A bearer request is exempt from the CSRF token, not from the origin check: a browser
 *   never attaches an Authorization header by itself, so a cross-site form or fetch cannot carry one.
 * - Logging out is a form POST from the dashboard's own origin carrying the session's CSRF token (a
 *   `csrf` field): another site, another port of the same host included (same site, so the SameSite
 *   cookie is sent), cannot end the session. Logging in checks the origin (there is no session yet).
 * - On a loopback bind the `Host` header must name a loopback host (a DNS-rebinding page cannot
 *   read the page or its CSRF token).
 * - Responses carry a strict Content-Security-Policy (scripts and styles from the dashboard only),
 *   `nosniff`, no framing, no referrer to other sites, no caching. The page writes data with `textContent` only.
 */

/** The shortest token accepted. */
export const MIN_TOKEN_LENGTH = 16;
/** The environment variable holding the token when `--token` is absent. */
export const TOKEN_ENV = 'RELAYBUS_DASHBOARD_TOKEN';
export const SESSION_COOKIE = 'relaybus_dashboard';
export const CSRF_HEADER = 'x-relaybus-csrf';
const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
const MAX_SESSIONS = 1_000;

/** True for a host name or address that only this machine reaches. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (bare === 'localhost') return true;
  if (isIP(bare) === 4) return bare.startsWith('127.');
  if (isIP(bare) === 6) return bare === '::1';
  return false;
}

/** Why `token` is not acceptable, or undefined when it is. */
export function tokenProblem(token: string): string | undefined {
  if (token.length < MIN_TOKEN_LENGTH)
    return `it has ${token.length} characters; use at least ${MIN_TOKEN_LENGTH} (e.g. openssl rand -hex 24)`;
  if (/[\s\p{Cc}]/u.test(token)) return 'it holds whitespace or control characters';
  return undefined;
}

const digest = (text: string): Buffer => createHash('sha256').update(text).digest();

/** Compare `given` with `expected` in constant time. */
export function sameSecret(given: string, expected: string): boolean {
  return timingSafeEqual(digest(given), digest(expected));
}

/** The cookies of a request. */
export function cookiesOf(request: IncomingMessage): Map<string, string> {
  const cookies = new Map<string, string>();
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const at = part.indexOf('=');
    if (at > 0) cookies.set(part.slice(0, at).trim(), part.slice(at + 1).trim());
  }
  return cookies;
}

/** Headers every response carries. */
export function securityHeaders(response: ServerResponse): void {
  response.setHeader(
    'content-security-policy',
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  );
  response.setHeader('x-content-type-options', 'nosniff');
  response.setHeader('x-frame-options', 'DENY');
  response.setHeader('referrer-policy', 'same-origin'); // not no-referrer: Chromium then sends `Origin: null` with same-origin form posts
  response.setHeader('cache-control', 'no-store');
}

/** Who a request is, once checked. */
export type Access =
  | { readonly kind: 'open'; readonly csrf: string }
  | { readonly kind: 'session'; readonly csrf: string }
  | { readonly kind: 'bearer' }
  | { readonly kind: 'anonymous' };

/** Sessions and CSRF tokens of one dashboard process. */
export class Gate {
  readonly #token: string | undefined;
  readonly #loopback: boolean;
  /** The CSRF token of an open (tokenless, loopback) dashboard. */
  readonly #openCsrf = randomBytes(24).toString('base64url');
  readonly #sessions = new Map<string, { readonly csrf: string; readonly expires: number }>();

  constructor(options: { readonly token: string | undefined; readonly loopback: boolean }) {
    this.#token = options.token;
    this.#loopback = options.loopback;
  }

  get requiresToken(): boolean {
    return this.#token !== undefined;
  }

  /** On a loopback bind, the Host header must be a loopback name (DNS rebinding). */
  hostAllowed(request: IncomingMessage): boolean {
    if (!this.#loopback) return true;
    const host = request.headers.host;
    if (host === undefined) return false;
    const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.split(':')[0]!;
    return isLoopbackHost(name);
  }

  access(request: IncomingMessage): Access {
    if (this.#token === undefined) return { kind: 'open', csrf: this.#openCsrf };
    const authorization = request.headers.authorization;
    if (authorization !== undefined && /^Bearer /i.test(authorization)) {
      return sameSecret(authorization.slice(7).trim(), this.#token) ? { kind: 'bearer' } : { kind: 'anonymous' };
    }
    const id = cookiesOf(request).get(SESSION_COOKIE);
    const session = id === undefined ? undefined : this.#sessions.get(id);
    if (session === undefined || session.expires < Date.now()) return { kind: 'anonymous' };
    return { kind: 'session', csrf: session.csrf };
  }

  /** A new session when `token` is right; the cookie header to set. */
  login(token: string): string | undefined {
    if (this.#token === undefined || !sameSecret(token, this.#token)) return undefined;
    const now = Date.now();
    for (const [id, session] of this.#sessions)
      if (session.expires < now || this.#sessions.size >= MAX_SESSIONS) this.#sessions.delete(id);
    const id = randomBytes(24).toString('base64url');
    this.#sessions.set(id, { csrf: randomBytes(24).toString('base64url'), expires: now + SESSION_TTL_MS });
    return `${SESSION_COOKIE}=${id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${SESSION_TTL_MS / 1000}`;
  }

  /** The origin of a request from another origin (another site or another port), or undefined when it is ours or unsaid. */
  crossOrigin(request: IncomingMessage): string | undefined {
    const origin = request.headers.origin;
    return origin !== undefined && origin !== `http://${request.headers.host ?? ''}` ? origin : undefined;
  }

  /**
   * End the session of `request` when the logout form is ours: same origin, and the session's CSRF token in the
   * `csrf` field. Returns the cookie header that clears the session, or why the logout is refused. A request with no
   * live session has nothing to end: it only clears the cookie.
   */
  logout(
    request: IncomingMessage,
    csrf: string | null,
  ): { readonly cookie: string } | { readonly status: number; readonly reason: string } {
    const origin = this.crossOrigin(request);
    if (origin !== undefined) return { status: 403, reason: `cross-origin logout from ${origin} refused` };
    const access = this.access(request);
    if (access.kind === 'session') {
      if (csrf === null || !sameSecret(csrf, access.csrf))
        return { status: 403, reason: 'missing or wrong csrf field (log out from the page)' };
      this.#sessions.delete(cookiesOf(request).get(SESSION_COOKIE)!);
    }
    return { cookie: `${SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0` };
  }

  /**
   * Why a data-changing POST by `access` is refused (the status and the reason), or undefined when
   * it may go on: authenticated, JSON, same origin, and the CSRF token unless it came with a bearer.
   */
  refusePost(
    request: IncomingMessage,
    access: Access,
  ): { readonly status: number; readonly reason: string } | undefined {
    if (access.kind === 'anonymous')
      return { status: 401, reason: 'a token is required: log in, or send Authorization: Bearer <token>' };
    if (!/^application\/json\b/i.test(request.headers['content-type'] ?? ''))
      return { status: 415, reason: 'send JSON (content-type: application/json)' };
    const origin = this.crossOrigin(request);
    if (origin !== undefined) return { status: 403, reason: `cross-origin request from ${origin} refused` };
    if (access.kind === 'bearer') return undefined;
    const sent = request.headers[CSRF_HEADER];
    if (typeof sent !== 'string' || !sameSecret(sent, access.csrf))
      return { status: 403, reason: `missing or wrong ${CSRF_HEADER} header (reload the page)` };
    return undefined;
  }
}
