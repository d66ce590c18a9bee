// Calls through a policy server that may move: when its learner worker restarts, the server comes back on
// another port and a call fails with PolicyUnavailable. The answer is one syncPolicy shared by every call
// that saw the same server go (not one per rollout), then the call again on the new URL. Workflow-safe.
import { FailureType, isFailureType } from './failures.ts';

/** syncPolicy rounds one call may ask for before its failure stands */
export const MAX_POLICY_RESYNCS = 3;

export interface PolicyResync {
  /** the URL calls use now */
  readonly url: string | undefined;
  /** `call(url)`, re-synced and called again (up to MAX_POLICY_RESYNCS times) while it fails with PolicyUnavailable */
  run<T>(call: (url: string | undefined) => Promise<T>): Promise<T>;
}

/**
 * `sync` makes the server serve the right model again and returns its URL; without one (a server we do not
 * manage) a PolicyUnavailable failure stands.
 */
export function policyResync(firstUrl: string | undefined, sync?: () => Promise<string>): PolicyResync {
  let url = firstUrl;
  let pending: Promise<void> | null = null;
  const resync = (failedUrl: string | undefined): Promise<void> => {
    // another call already moved to a new server since this one started: just try again there
    if (!sync || failedUrl !== url) return Promise.resolve();
    pending ??= sync()
      .then((u) => {
        url = u;
      })
      .finally(() => {
        pending = null;
      });
    return pending;
  };
  return {
    get url() {
      return url;
    },
    async run<T>(call: (url: string | undefined) => Promise<T>): Promise<T> {
      for (let round = 0; ; round++) {
        const at = url;
        try {
          return await call(at);
        } catch (err) {
          if (round >= MAX_POLICY_RESYNCS || !sync || !isFailureType(err, FailureType.PolicyUnavailable)) throw err;
          await resync(at);
        }
      }
    },
  };
}
