/**
 * How the intake starts (or finds) a conversation's session workflow: its id, task queue, input,
 * search attributes and summary. Every surface that reaches a session (a message's handoff, a
 * command's signal or update, the resume sweep, the runtime) starts it with these options.
 */
import type { BindingRecord } from '../../domain/governance.js';
import { sessionWorkflowId, type ConversationKey } from '../../common/ids.js';
import { ChatAttr, KindAttr, PlatformAttr } from '../../workflows/search-attributes.js';
import type { SessionInput, SessionLimits } from '../../workflows/types.js';

/** The start options of a conversation's session workflow (the binding's model, else the default). */
export function sessionStartOptions(deps: { taskQueue: string; defaultModel: string; limits: SessionLimits }, conversation: ConversationKey, binding?: BindingRecord) {
  const input: SessionInput = {
    conversation,
    settings: { model: binding?.model ?? deps.defaultModel, think: 'off' },
    limits: deps.limits,
  };
  return {
    workflowId: sessionWorkflowId(conversation),
    taskQueue: deps.taskQueue,
    args: [input] as [SessionInput],
    typedSearchAttributes: [
      { key: PlatformAttr, value: conversation.platform },
      { key: ChatAttr, value: conversation.chatId },
      { key: KindAttr, value: 'session' },
    ],
    staticSummary: `Conversation session: ${conversation.platform} chat ${conversation.chatId} (account ${conversation.account})`,
    // the way back from the Temporal UI to the console's page of the chat (the console opens HTTP chats)
    ...(conversation.platform === 'http' ? { staticDetails: `[Open this chat in the Steward console](/console/chats/${encodeURIComponent(conversation.chatId)})` } : {}),
  };
}

export type SessionStart = ReturnType<typeof sessionStartOptions>;
