// What a workflow's report shows of a failure: the innermost cause's message, as Temporal wraps an activity's error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ActivityFailure, ApplicationFailure, RetryState } from '@temporalio/common';
import { innermostMessage } from '../../lib/failures.ts';

test("innermostMessage: an activity failure reads as its error's message, not 'Activity task failed'", () => {
  const cause = ApplicationFailure.create({ message: 'image swerl-task-x is not built', type: 'SandboxUnavailableError' });
  const e = new ActivityFailure('Activity task failed', 'validateTask', '1', RetryState.MAXIMUM_ATTEMPTS_REACHED, undefined, cause);
  assert.equal(e.message, 'Activity task failed');
  assert.equal(innermostMessage(e), 'image swerl-task-x is not built');
  assert.equal(innermostMessage(new Error('plain')), 'plain');
  assert.equal(innermostMessage('a string'), 'a string');
});
