/** Pieces every group of routes uses: the error answers and JSON response shapes. */
import { z } from '@hono/zod-openapi';

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
