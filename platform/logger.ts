import { pino, type Logger } from 'pino';

/** Structured JSON logs on stderr; stdout stays for what the operator reads. */
export function createLogger(level: string): Logger {
  return pino({ level, base: { app: 'steward' }, redact: { paths: ['*.apiKey', '*.token', '*.authorization', '*.password', '*.pass'], censor: '***' } }, pino.destination(2));
}
