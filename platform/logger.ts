import { pino, type DestinationStream, type Logger } from 'pino';
import { maskHeldSecrets } from '../domain/secrets.js';

/**
 * Structured JSON logs on stderr; stdout stays for what the operator reads. Every line is a view:
 * the secrets Steward holds (domain/secrets.ts) are masked in it, wherever they stand (an error's
 * message, a URL, a field of any name).
 */
export function createLogger(level: string, destination: DestinationStream = pino.destination(2)): Logger {
  return pino(
    {
      level,
      base: { app: 'steward' },
      redact: { paths: ['*.apiKey', '*.token', '*.authorization', '*.password', '*.pass'], censor: '***' },
      hooks: { streamWrite: (line) => maskHeldSecrets(line) },
    },
    destination,
  );
}
