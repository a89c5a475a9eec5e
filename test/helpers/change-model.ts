/**
 * A scripted model for repo changes on the OpenAI-compatible model server double: answers the
 * intake (submit_task_draft), the planner (submit_plan) and the built-in coding agent (its
 * tools) by looking at the tools a request offers, so one script drives a whole change.
 */
import type { RecordedRequest, ScriptedReply } from './model-server.js';

interface ChatBody {
  tools?: Array<{ function?: { name?: string } }>;
  messages?: Array<{ role: string; content?: unknown }>;
}

export function offeredTools(req: RecordedRequest): string[] {
  return ((req.body as ChatBody | undefined)?.tools ?? []).map((t) => t.function?.name ?? '').filter(Boolean);
}

/** How many tool results the conversation already holds (the agent's step index). */
export function toolResults(req: RecordedRequest): number {
  return ((req.body as ChatBody | undefined)?.messages ?? []).filter((m) => m.role === 'tool').length;
}

export function bodyText(req: RecordedRequest): string {
  return JSON.stringify(req.body ?? {});
}

let seq = 0;
const call = (name: string, args: unknown): ScriptedReply => ({ toolCalls: [{ id: `call_${name}_${++seq}`, name, arguments: JSON.stringify(args) }] });

/** A complete task draft for the greeting change the suites' git fixtures hold (intake needs no question). */
export const GREETING_DRAFT = {
  intent: 'feature',
  goal: 'Make the greeting say Hello, Steward',
  scope: ['greeting.txt'],
  acceptance: ['sh test.sh exits 0'],
  constraints: [],
  assumptions: [],
  open_questions: [],
  risk_signals: [],
  summary: 'Change the greeting.',
};

export interface ChangeScript {
  intake: (req: RecordedRequest, round: number) => Record<string, unknown>;
  plan?: Record<string, unknown>;
  /** The agent's tool calls in order ({ name, args }); after the last one it finishes. */
  agent?: Array<{ name: string; args: unknown }>;
}

/** A reply function for `ModelServer.setDefault`. */
export function changeModel(script: ChangeScript): (req: RecordedRequest) => ScriptedReply {
  let intakeRounds = 0;
  return (req) => {
    const tools = offeredTools(req);
    if (tools.includes('submit_task_draft')) return call('submit_task_draft', script.intake(req, intakeRounds++));
    if (tools.includes('submit_plan')) {
      return call('submit_plan', script.plan ?? { summary: 'Make the change the draft asks for.', steps: ['Edit the file', 'Run the check'], files: [], checks: ['test'] });
    }
    if (tools.includes('write_file')) {
      const steps = script.agent ?? [];
      const i = toolResults(req);
      const step = steps[i];
      if (step) return call(step.name, step.args);
      return call('finish', { summary: 'Done: the change is in the work tree.' });
    }
    return { text: 'ok' };
  };
}
