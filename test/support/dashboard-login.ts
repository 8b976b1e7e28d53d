/**
 * Logging in to `relaybus dashboard` as its login form does, for the tests that drive the dashboard over HTTP.
 */

/** Log in at `address` with `token`: the login's response, the session cookie, the page and its CSRF token. */
export async function logIn(
  address: string,
  token: string,
): Promise<{ login: Response; cookie: string; html: string; csrf: string }> {
  const login = await fetch(`${address}/login`, {
    method: 'POST',
    body: new URLSearchParams({ token }),
    redirect: 'manual',
  });
  const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
  const html = await (await fetch(address, { headers: { cookie } })).text();
  const csrf = /name="relaybus-csrf" content="([^"]+)"/.exec(html)![1]!;
  return { login, cookie, html, csrf };
}
