/** Pieces every group of routes uses: the error answers and JSON response shapes. */
import { z } from '@hono/zod-openapi';
import { ServiceInputError } from '../../services/requests.js';

/** The 4xx answers of a route group, their error body named `name` in the OpenAPI document. */
export function errorResponses(name: string) {
  const ErrorBody = z.object({ error: z.string() }).openapi(name);
  const res = (description: string) => ({ content: { 'application/json': { schema: ErrorBody } }, description });
  return {
    400: res('Invalid request'),
    401: res('Missing or wrong bearer token'),
    404: res('Not found'),
    409: res('Conflict: nothing changed'),
  };
}

export const json = <T extends z.ZodType>(schema: T, description: string) => ({ content: { 'application/json': { schema } }, description });

/** A service call's outcome for a route: its value, or the refusal (ServiceInputError) as a 4xx answer. */
export type Answer<T> = { ok: true; value: T } | { ok: false; status: 400 | 404 | 409; error: string };

/** Run a service call; the input errors services raise (ServiceInputError) become 4xx answers, anything else is thrown on. */
export async function answer<T>(fn: () => Promise<T>): Promise<Answer<T>> {
  try {
    return { ok: true, value: await fn() };
  } catch (err) {
    if (err instanceof ServiceInputError) return { ok: false, status: err.status, error: err.message };
    throw err;
  }
}

/** Send an answer: its value with `status`, or its error with its own status. */
export const reply = <T>(c: { json: (b: unknown, s: number) => Response }, r: Answer<T>, status = 200): Response => (r.ok ? c.json(r.value, status) : c.json({ error: r.error }, r.status));

/** The request body as JSON; an empty body is `{}` when `emptyIsObject`, else malformed. */
export async function jsonBody(c: { req: { text(): Promise<string> } }, emptyIsObject = false): Promise<{ ok: true; value: unknown } | { ok: false }> {
  const raw = await c.req.text();
  if (emptyIsObject && !raw.trim()) return { ok: true, value: {} };
  try {
    return { ok: true, value: JSON.parse(raw) as unknown };
  } catch {
    return { ok: false };
  }
}

/** The request body as JSON (as `jsonBody`); a malformed one is refused with a ServiceInputError (400). */
export async function parsedJsonBody(c: { req: { text(): Promise<string> } }, emptyIsObject = false): Promise<unknown> {
  const b = await jsonBody(c, emptyIsObject);
  if (!b.ok) throw new ServiceInputError('malformed JSON in the request body');
  return b.value;
}

/** The `{chatId}` path parameter of the chat routes (the HTTP API's chat ids). */
export const ChatIdParam = z.object({
  chatId: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9._@+=-]+$/, 'chat ids use letters, digits and . _ @ + = -')
    .openapi({ param: { name: 'chatId', in: 'path' }, example: 'support-room' }),
});

/** A transcript entry as the chat routes and the chat event stream send it. */
export const TranscriptEntrySchema = z.object({
  seq: z.number().int().optional(),
  role: z.enum(['user', 'assistant', 'system']),
  text: z.string(),
  at: z.string(),
  user: z.string().optional(),
  attachments: z.array(z.object({ hash: z.string(), name: z.string(), mediaType: z.string(), size: z.number() })).optional(),
});
