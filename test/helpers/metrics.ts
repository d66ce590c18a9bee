// Reads this process's Prometheus registry (lib/metrics.ts): the sum of one series' samples whose
// labels include `labels` (`name` may be a histogram's `_count` / `_sum`).
import { registry } from '../../lib/metrics.ts';

export async function metricValue(name: string, labels: Record<string, string> = {}): Promise<number> {
  const family = name.replace(/_(count|sum)$/, '');
  const metric = registry.getSingleMetric(name) ?? registry.getSingleMetric(family);
  if (!metric) throw new Error(`no metric ${name} in the registry`);
  const { values } = await metric.get();
  return values
    .filter((v) => ((v as { metricName?: string }).metricName ?? family) === name && Object.entries(labels).every(([k, x]) => String(v.labels[k]) === x))
    .reduce((a, v) => a + v.value, 0);
}
