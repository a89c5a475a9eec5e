/** The workflow bundle's entry: every workflow type the workers run. */
export { sessionWorkflow } from './chat/session.js';
export { turnWorkflow } from './chat/turn.js';
export { repoChangeWorkflow } from './changes/repo-change.js';
export { objectiveRunWorkflow } from './objectives/objective.js';
export { workspaceIndexWorkflow } from './knowledge/index-workspace.js';
export { triageWorkflow } from './tasks/triage.js';
export { taskReminderWorkflow } from './tasks/reminder.js';
export { replayTurnsWorkflow, replayTurnWorkflow } from './replays/replay.js';
