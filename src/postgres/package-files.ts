/**
 * Files shipped beside the code (`sql/`, `schema/migrations/`, the supplement) are read from the
 * package root, which is two folders up from `src/postgres/` and three from `dist/src/postgres/`.
 */
const here = new URL('.', import.meta.url);
const root = here.pathname.endsWith('/dist/src/postgres/') ? new URL('../../../', here) : new URL('../../', here);

/** URL of a file relative to the package root. */
export function packageFile(relativePath: string): URL {
  return new URL(relativePath, root);
}
