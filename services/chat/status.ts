/**
 * A chat session's status as /status, the API and the CLI show it: asked of the session
 * workflow (a query), with the running turn's own status when that turn runs as a workflow of
 * its own (sessions recorded before turns ran inline).
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { statusQuery, turnStatusQuery } from '../../workflows/messages.js';
import type { SessionStatus, TurnStatus } from '../../workflows/types.js';

export interface SessionStatusView {
  workflowId: string;
  exists: boolean;
  running: null | {
    turnId: string;
    /** The workflow the turn runs in: the session (turns run inside it), or the turn's own workflow in older sessions. */
    runWorkflowId: string;
    step: number;
    phase: string;
    startedAt: string;
    tool?: string;
    approvalId?: string;
  };
  queueLength: number;
  model: string;
  think: string;
  tokens: { input: number; output: number; total: number };
  turns: number;
}

/** The status as one chat answer. */
export function formatStatus(s: SessionStatusView): string {
  if (!s.exists) return `No session yet. Model: ${s.model}, thinking: ${s.think}.`;
  const r = s.running;
  const what = r ? (r.phase === 'approval' ? `waiting for approval ${r.approvalId ?? ''}`.trim() : r.phase === 'tool' ? `running ${r.tool ?? 'a tool'}` : r.phase === 'budget' ? 'waiting for a budget to be raised' : r.phase) : '';
  const lines = [
    r ? `Running: turn ${r.turnId.split(':turn:')[1]?.split(':')[0] ?? '?'}, step ${r.step} (${what}), since ${r.startedAt}` : 'Idle: no turn is running.',
    `Queue: ${s.queueLength} message${s.queueLength === 1 ? '' : 's'}`,
    `Model: ${s.model}, thinking: ${s.think}`,
    `Tokens: ${s.tokens.total} (in ${s.tokens.input}, out ${s.tokens.output})`,
    `Turns: ${s.turns}`,
  ];
  return lines.join('\n');
}

/** The session's status as /status and the API show it (with the running turn's, when that runs as a workflow of its own). */
export async function sessionStatus(client: Client, defaultModel: string, sessionId: string): Promise<SessionStatusView> {
  const base: SessionStatusView = {
    workflowId: sessionId,
    exists: false,
    running: null,
    queueLength: 0,
    model: defaultModel,
    think: 'off',
    tokens: { input: 0, output: 0, total: 0 },
    turns: 0,
  };
  let s: SessionStatus;
  try {
    s = await client.workflow.getHandle(sessionId).query(statusQuery);
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return base;
    throw err;
  }
  let turn: TurnStatus | undefined = s.running?.turn;
  if (s.running && !turn) {
    // a turn started as its own workflow (sessions recorded before turns ran inline)
    try {
      turn = await client.workflow.getHandle(s.running.turnId).query(turnStatusQuery);
    } catch {
      turn = undefined; // the turn is starting or just ended
    }
  }
  return {
    workflowId: sessionId,
    exists: true,
    running: s.running
      ? {
          turnId: s.running.turnId,
          runWorkflowId: s.running.turn ? sessionId : s.running.turnId,
          step: turn?.step ?? 0,
          phase: turn?.phase ?? 'starting',
          startedAt: turn?.startedAt ?? s.running.startedAt,
          ...(turn?.tool ? { tool: turn.tool } : {}),
          ...(turn?.approvalId ? { approvalId: turn.approvalId } : {}),
        }
      : null,
    queueLength: s.queueLength,
    model: s.settings.model,
    think: s.settings.think,
    tokens: {
      input: s.tokens.input + (turn?.usage.input ?? 0),
      output: s.tokens.output + (turn?.usage.output ?? 0),
      total: s.tokens.total + (turn?.usage.total ?? 0),
    },
    turns: s.turnsStarted,
  };
}
