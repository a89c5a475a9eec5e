/**
 * Zod schemas shared by adapters and activities. Pure: no I/O. Workflows check by the plain
 * values in common/limits.ts instead (zod stays out of the workflow bundle).
 */
import { z } from 'zod';
import { MAX_MESSAGE_CHARS, MAX_STEER_CHARS, MODEL_REF_MESSAGE, MODEL_REF_PATTERN, PROVIDERS, THINK_LEVELS } from './limits.js';

export { MAX_MESSAGE_CHARS, MAX_STEER_CHARS, PROVIDERS, THINK_LEVELS };
export const ProviderSchema = z.enum(PROVIDERS);
export type Provider = z.infer<typeof ProviderSchema>;

/** `provider:model`, e.g. `openai:gpt-4.1` or `openai-compatible:llama3.1`. */
export const ModelRefSchema = z.string().trim().regex(MODEL_REF_PATTERN, MODEL_REF_MESSAGE);
export type ModelRef = z.infer<typeof ModelRefSchema>;

export function parseModelRef(ref: string): { provider: Provider; model: string } {
  const parsed = ModelRefSchema.parse(ref);
  const idx = parsed.indexOf(':');
  return { provider: ProviderSchema.parse(parsed.slice(0, idx)), model: parsed.slice(idx + 1) };
}

export const ThinkLevelSchema = z.enum(THINK_LEVELS);
export type ThinkLevel = z.infer<typeof ThinkLevelSchema>;

export const PLATFORMS = ['http', 'cli', 'telegram', 'discord', 'openharness'] as const;
export const PlatformSchema = z.enum(PLATFORMS);
export type Platform = z.infer<typeof PlatformSchema>;

const idPart = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9._@+=-]+$/, 'only letters, digits and . _ @ + = - are allowed');

export const ChatIdSchema = idPart;

/** A file that came with a message or goes out with one: the bytes are a blob (claim-check). */
export const AttachmentRefSchema = z.object({
  hash: z.string().regex(/^[a-f0-9]{64}$/, 'expected a SHA-256 hex digest'),
  name: z
    .string()
    .min(1)
    .max(255)
    .refine((n) => !/[\\/\u0000-\u001f]/.test(n), 'a file name has no slashes or control characters'),
  mediaType: z.string().min(1).max(255),
  size: z.number().int().min(0),
});
export type AttachmentRef = z.infer<typeof AttachmentRefSchema>;

export const MAX_ATTACHMENTS = 10;

/** The one inbound message type every adapter normalises into (without the text-or-files rule). */
export const InboundMessageBaseSchema = z
  .object({
    /** Adapter-unique id of this message; a redelivered message with the same id is ignored. */
    id: z.string().min(1).max(200),
    platform: PlatformSchema,
    /** The bot/account the message reached (one deployment may serve several). */
    account: idPart,
    chatId: idPart,
    /** The sender's display name. */
    user: z.string().min(1).max(200),
    /**
     * The sender's platform user id (chat platforms, OpenHarness shells): what identity and
     * role are looked up by. Absent for the operator's own HTTP API and CLI.
     */
    userId: idPart.optional(),
    /** A direct message, or a group / guild channel. */
    chatType: z.enum(['dm', 'group']).default('dm'),
    /** In a group: the message mentions the bot or replies to one of its messages. */
    addressed: z.boolean().default(true),
    text: z.string().max(MAX_MESSAGE_CHARS, `text is longer than ${MAX_MESSAGE_CHARS} characters`),
    attachments: z.array(AttachmentRefSchema).max(MAX_ATTACHMENTS).default([]),
    /** ISO-8601 receive time. */
    at: z.string(),
  });

/** An inbound message: text, or files, or both. */
export const InboundMessageSchema = InboundMessageBaseSchema.refine((m) => m.text.trim().length > 0 || m.attachments.length > 0, {
  message: 'text must not be empty',
  path: ['text'],
});
export type InboundMessage = z.input<typeof InboundMessageSchema>;
export type NormalizedInbound = z.output<typeof InboundMessageSchema>;

/** A zod error as one line a person can act on: `path: message; ...`. */
export function describeIssues(err: { issues: ReadonlyArray<{ path: PropertyKey[]; message: string }> }): string {
  return err.issues.map((i) => `${i.path.map(String).join('.') || '(body)'}: ${i.message}`).join('; ');
}
