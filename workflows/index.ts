/** The workflow bundle's entry: every workflow type the workers run. */
export { sessionWorkflow } from './session.js';
export { turnWorkflow } from './turn.js';
export { repoChangeWorkflow } from './repo-change.js';
export { objectiveRunWorkflow } from './objective.js';
