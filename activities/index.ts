/**
 * Every activity the workers register, by feature: chat turns (chat.ts), repository changes
 * (changes.ts) and objective runs (objectives.ts), each created from injected dependencies.
 * Workflows import only the type of `createActivities`.
 */
import { createChatActivities, type ActivityDeps } from './chat.js';
import { createRepoChangeActivities, DEFAULT_REPO_CHANGE_SETTINGS } from './changes.js';
import { createKnowledgeActivities } from './knowledge.js';
import { createObjectiveActivities } from './objectives.js';
import { createTaskActivities } from './tasks.js';
import { createLimiter, DEFAULT_LIMITS } from '../domain/limits.js';

export * from './chat.js';

export function createActivities(deps: ActivityDeps) {
  const senders = deps.senders ?? {};
  const common = {
    ...(deps.log ? { log: deps.log } : {}),
    ...(deps.runLink ? { runLink: deps.runLink } : {}),
    ...(deps.onTranscript ? { onTranscript: deps.onTranscript } : {}),
  };
  return {
    ...createObjectiveActivities({
      db: deps.db,
      senders,
      defaultModel: deps.defaultModel ?? deps.repoChanges?.defaultModel ?? DEFAULT_REPO_CHANGE_SETTINGS.defaultModel,
      limiter: createLimiter({ db: deps.db, settings: deps.limits ?? DEFAULT_LIMITS, senders }),
      // the model budgets hold the objective's turn: a run whose budget is spent is skipped before it
      ...(deps.models.spend ? { budgets: true } : {}),
      ...common,
    }),
    ...createRepoChangeActivities({ db: deps.db, models: deps.models, senders, settings: deps.repoChanges ?? DEFAULT_REPO_CHANGE_SETTINGS, ...common }),
    ...createChatActivities(deps),
    ...createKnowledgeActivities(deps.knowledge ? { db: deps.db, knowledge: deps.knowledge } : undefined),
    ...createTaskActivities({ db: deps.db, models: deps.models, senders }),
  };
}
