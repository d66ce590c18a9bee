// The Temporal web UI as a run dashboard: saved views (visibility queries) and list columns (our search
// attributes). The UI keeps both per browser in localStorage; uiViewsScript() sets them in one paste.

/** Saved views: name → visibility query (docs/monitoring.md lists the same). */
export const RUN_SAVED_VIEWS: { id: string; name: string; query: string }[] = [
  { id: 'swerl-runs', name: 'Training runs', query: "WorkflowType = 'trainingRun'" },
  { id: 'swerl-running', name: 'Runs in progress', query: "WorkflowType = 'trainingRun' AND ExecutionStatus = 'Running'" },
  { id: 'swerl-learning', name: 'Runs above 0.5 reward', query: "WorkflowType = 'trainingRun' AND RlMeanReward > 0.5" },
  { id: 'swerl-failed', name: 'Failed runs and iterations', query: "WorkflowType IN ('trainingRun', 'rlIteration') AND ExecutionStatus = 'Failed'" },
];

/** List columns: the UI's own plus the RL search attributes. */
export const RUN_COLUMNS: { label: string; pinned: boolean }[] = [
  { label: 'Status', pinned: true },
  { label: 'Workflow ID', pinned: true },
  { label: 'Type', pinned: false },
  { label: 'RlIteration', pinned: false },
  { label: 'RlPhase', pinned: false },
  { label: 'RlMeanReward', pinned: false },
  { label: 'Start', pinned: false },
  { label: 'Execution Duration', pinned: false },
];

/**
 * JavaScript for the UI page's browser console (or a browser's init script): adds the saved views and
 * sets the list columns for `namespace`, keeping the other namespaces' and the user's own views.
 */
export function uiViewsScript(namespace = 'default'): string {
  return `((ns, views, columns) => {
  const read = (k) => JSON.parse(localStorage.getItem(k) || '{}');
  const saved = read('saved-namespace-queries');
  saved[ns] = (saved[ns] || []).filter((v) => !views.some((w) => w.id === v.id)).concat(views);
  localStorage.setItem('saved-namespace-queries', JSON.stringify(saved));
  const cols = read('namespace-workflow-table-columns');
  cols[ns] = columns;
  localStorage.setItem('namespace-workflow-table-columns', JSON.stringify(cols));
})(${JSON.stringify(namespace)}, ${JSON.stringify(RUN_SAVED_VIEWS)}, ${JSON.stringify(RUN_COLUMNS)});`;
}
