/**
 * A tool call as stored: the model step's assistant message is a blob (history carries only
 * its hash); a call is read back from it by id. And what running a call comes to.
 */
import type { AssistantModelMessage } from 'ai';
import type { AttachmentRef } from '../../common/schemas.js';
import { getBlobText } from '../blobs.js';
import type { Db } from '../db.js';

export interface LoadedToolCall {
  toolCallId: string;
  toolName: string;
  input: unknown;
}

/** The tool call `toolCallId` of a stored assistant message. */
export async function loadToolCall(db: Db, messageHash: string, toolCallId: string): Promise<LoadedToolCall> {
  const message = JSON.parse(await getBlobText(db, messageHash)) as AssistantModelMessage;
  const parts = Array.isArray(message.content) ? message.content : [];
  for (const p of parts) {
    if (p.type === 'tool-call' && p.toolCallId === toolCallId) return { toolCallId, toolName: p.toolName, input: p.input };
  }
  throw new Error(`tool call ${toolCallId} is not in message ${messageHash}`);
}

export interface ToolOutcome {
  /** What the model is told. */
  text: string;
  ok: boolean;
  note?: string;
  attachment?: AttachmentRef;
  /** Facts for the receipt. */
  detail: Record<string, unknown>;
}
