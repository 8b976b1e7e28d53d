/**
 * Claims by owner, for tests written against the owner's claims rather than a session object: one claim session per
 * (store, owner), opened at the owner's first call and closed by `relinquish(store, owner)` (the next call opens
 * another). Each call reaches the store's session exactly as the dispatcher's would, so what a session keeps between
 * claims (key walk cursors, recorded lanes, failed claims, a held connection) carries over between a test's calls.
 */
import type {
  ClaimedDelivery,
  ClaimParams,
  ClaimSession,
  ClaimSessionOptions,
  CompleteAndClaimResult,
  DeliveryLease,
  Store,
} from '../../src/store/contract.js';

/** A claim as an owner makes it: the session's owner and options with the claim's params. */
export interface OwnerClaimParams extends ClaimParams {
  readonly owner: string;
  readonly siblingOwners?: readonly string[];
  readonly holdConnection?: boolean;
}

const sessions = new WeakMap<object, Map<string, ClaimSession>>();

/** The open session of `owner` on `store` (opened with the options of the call that opens it). */
export function sessionOf(
  store: Pick<Store<unknown>, 'openClaims'>,
  owner: string,
  options: Pick<OwnerClaimParams, 'siblingOwners' | 'holdConnection'> = {},
): ClaimSession {
  let byOwner = sessions.get(store);
  if (byOwner === undefined) sessions.set(store, (byOwner = new Map()));
  let session = byOwner.get(owner);
  if (session === undefined) {
    const { siblingOwners, holdConnection } = options;
    session = store.openClaims(owner, {
      ...(siblingOwners === undefined ? {} : { siblingOwners }),
      ...(holdConnection === undefined ? {} : { holdConnection }),
    });
    byOwner.set(owner, session);
  }
  return session;
}

function split({ owner, siblingOwners, holdConnection, ...params }: OwnerClaimParams) {
  return { owner, options: { siblingOwners, holdConnection }, params: params as ClaimParams };
}

/** `owner`'s claim (`ClaimSession.claim`). */
export async function claim(
  store: Pick<Store<unknown>, 'openClaims'>,
  ownerParams: OwnerClaimParams,
): Promise<ClaimedDelivery[]> {
  const { owner, options, params } = split(ownerParams);
  return sessionOf(store, owner, options).claim(params);
}

/** `owner`'s claim with completions riding on it (`ClaimSession.completeAndClaim`). */
export async function completeAndClaim(
  store: Pick<Store<unknown>, 'openClaims'>,
  leases: readonly DeliveryLease[],
  ownerParams: OwnerClaimParams,
): Promise<CompleteAndClaimResult> {
  const { owner, options, params } = split(ownerParams);
  return sessionOf(store, owner, options).completeAndClaim(leases, params);
}

/** After a failed claim of `owner` (`ClaimSession.forgetInFlight`). */
export async function forgetInFlight(
  store: Pick<Store<unknown>, 'openClaims'>,
  { owner, holding }: { readonly owner: string; readonly holding: readonly string[] },
): Promise<number> {
  return sessionOf(store, owner).forgetInFlight(holding);
}

/** Hand back `owner`'s lanes that run nothing: close its session (`ClaimSession.close`). */
export async function relinquish(store: Pick<Store<unknown>, 'openClaims'>, owner: string): Promise<number> {
  const session = sessionOf(store, owner);
  sessions.get(store)?.delete(owner);
  return session.close();
}

/** A claim session's calls as an owner's: what `overrideClaims` and `spyStore` let tests replace. */
export interface OwnerClaimCalls {
  claim(params: OwnerClaimParams): Promise<ClaimedDelivery[]>;
  completeAndClaim(leases: readonly DeliveryLease[], params: OwnerClaimParams): Promise<CompleteAndClaimResult>;
  forgetInFlight(params: { readonly owner: string; readonly holding: readonly string[] }): Promise<number>;
  /** A session's `close()`. */
  relinquish(owner: string): Promise<number>;
}

/**
 * A claim session whose calls go to `calls` as the owner's (each with the owner and the session's options in its
 * params); what `calls` leaves out reaches `store` through the owner's session (`sessionOf`).
 */
export function ownerSession(
  store: Pick<Store<unknown>, 'openClaims'>,
  owner: string,
  options: ClaimSessionOptions | undefined,
  calls: Partial<OwnerClaimCalls>,
  self?: unknown,
): ClaimSession {
  const asOwner = { owner, ...options };
  const run = <M extends keyof OwnerClaimCalls>(
    method: M,
    args: Parameters<OwnerClaimCalls[M]>,
    own: () => ReturnType<OwnerClaimCalls[M]>,
  ) => {
    const replaced = calls[method] as ((...a: unknown[]) => ReturnType<OwnerClaimCalls[M]>) | undefined;
    return replaced === undefined ? own() : replaced.apply(self, args);
  };
  return {
    owner,
    claim: (params) => {
      const full = { ...asOwner, ...params };
      return run('claim', [full], () => claim(store, full));
    },
    completeAndClaim: (leases, params) => {
      const full = { ...asOwner, ...params };
      return run('completeAndClaim', [leases, full], () => completeAndClaim(store, leases, full));
    },
    forgetInFlight: (holding) =>
      run('forgetInFlight', [{ owner, holding }], () => forgetInFlight(store, { owner, holding })),
    close: () => run('relinquish', [owner], () => relinquish(store, owner)),
  };
}

/** `store` with its claim sessions' calls replaced by `calls` (see `ownerSession`); everything else is the store's. */
export function overrideClaims<S extends Pick<Store<unknown>, 'openClaims'>>(
  store: S,
  calls: Partial<OwnerClaimCalls>,
): S {
  return new Proxy(store, {
    get(target, name, receiver) {
      if (name === 'openClaims')
        return (owner: string, options?: ClaimSessionOptions) => ownerSession(target, owner, options, calls);
      const value = Reflect.get(target, name, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
