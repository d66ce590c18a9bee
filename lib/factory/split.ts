// The train/validation split by repository (issue 28): validation never sees a repository used in training.
// The validation repositories are the ones named, else round(n × fraction) of them (at least one when there
// are two or more and the fraction is above 0), those whose names hash lowest. The split depends on the
// repositories' names only, not on the factory's seed, so task sets made with other seeds split alike. Pure.
import { hashString, mix32 } from '../seed.ts';

export function validationRepos(repos: readonly string[], o: { fraction: number; repos?: readonly string[] | undefined }): string[] {
  if (o.repos) {
    const unknown = o.repos.filter((r) => !repos.includes(r));
    if (unknown.length) throw new Error(`validation.repos: ${unknown.map((r) => JSON.stringify(r)).join(', ')} not among the repositories (${repos.join(', ')})`);
    return [...o.repos].sort();
  }
  if (o.fraction <= 0 || repos.length < 2) return [];
  const n = Math.min(repos.length - 1, Math.max(1, Math.round(repos.length * o.fraction)));
  return [...repos]
    .sort((a, b) => mix32(hashString(a)) - mix32(hashString(b)) || (a < b ? -1 : 1))
    .slice(0, n)
    .sort();
}
