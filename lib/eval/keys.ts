// Artifact-store keys of evaluations and Best@K selections (lib/store.ts conventions: one prefix per
// evaluation, task ids as one escaped segment, results at keys derived from their identity).
import { safeSegment } from '../store.ts';

const ev = (evalId: string) => `evals/${evalId}`;
const sel = (evalId: string, selectionId: string) => `${ev(evalId)}/selections/${selectionId}`;

export const evalKeys = {
  eval: ev,
  config: (evalId: string) => `${ev(evalId)}/config.json`,
  /** tasks, runs, repositories and the resolved model of the evaluation */
  plan: (evalId: string) => `${ev(evalId)}/plan.json`,
  episodes: (evalId: string) => `${ev(evalId)}/episodes`,
  /** one finished episode of (task, run): written once, never run again */
  episode: (evalId: string, taskId: string, run: number) => `${ev(evalId)}/episodes/${safeSegment(taskId)}/${run}.json`,
  errors: (evalId: string) => `${ev(evalId)}/errors`,
  /** an episode that could not happen after its retries, with the reason */
  error: (evalId: string, taskId: string, run: number) => `${ev(evalId)}/errors/${safeSegment(taskId)}/${run}.json`,
  /** report files (summary, predictions, SWE-bench reports, plots) */
  report: (evalId: string) => `${ev(evalId)}/report`,
  /** what has been delivered to MLflow (activities/report.ts MlflowState), as keys.mlflowState of a run */
  mlflowState: (evalId: string) => `${ev(evalId)}/tracking/mlflow.json`,
  selection: sel,
  selectionConfig: (evalId: string, selectionId: string) => `${sel(evalId, selectionId)}/config.json`,
  /** execution-free verifier score of one candidate */
  executionFree: (evalId: string, selectionId: string, taskId: string, run: number) => `${sel(evalId, selectionId)}/ef/${safeSegment(taskId)}/${run}.json`,
  /** the repository tests passing at the base commit, per task */
  regressionBase: (evalId: string, selectionId: string, taskId: string) => `${sel(evalId, selectionId)}/regression-base/${safeSegment(taskId)}.json`,
  /** generated reproduction tests, per task */
  reproductionTests: (evalId: string, selectionId: string, taskId: string) => `${sel(evalId, selectionId)}/reproduction-tests/${safeSegment(taskId)}.json`,
  /** regression and reproduction scores of one candidate */
  execution: (evalId: string, selectionId: string, taskId: string, run: number) => `${sel(evalId, selectionId)}/exec/${safeSegment(taskId)}/${run}.json`,
  selectionReport: (evalId: string, selectionId: string) => `${sel(evalId, selectionId)}/report`,
};
