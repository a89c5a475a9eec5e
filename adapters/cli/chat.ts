/**
 * `steward chat`: an interactive chat over the HTTP API. Each line goes out as a message
 * (commands too); immediate command replies print at once, and new transcript entries
 * (assistant replies, notices) are polled and printed as they arrive.
 */
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';

export interface ChatOptions {
  baseUrl: string;
  token: string;
  chatId: string;
  user: string;
  input?: Readable;
  output?: Writable;
  pollMs?: number;
}

interface Entry {
  seq?: number;
  role: 'user' | 'assistant' | 'system';
  text: string;
}

export async function runChat(opts: ChatOptions): Promise<void> {
  const out = opts.output ?? process.stdout;
  const write = (s: string) => out.write(s);
  const headers = { authorization: `Bearer ${opts.token}`, 'content-type': 'application/json' };
  const base = `${opts.baseUrl.replace(/\/$/, '')}/api/v1/chats/${encodeURIComponent(opts.chatId)}`;

  const fetchTranscript = async (after?: number): Promise<Entry[]> => {
    const r = await fetch(`${base}/messages${after !== undefined ? `?after=${after}` : '?limit=1'}`, { headers });
    if (r.status === 401) throw new Error('the API token was refused (check STEWARD_API_TOKEN or --token)');
    if (!r.ok) throw new Error(`the API answered ${r.status}`);
    return ((await r.json()) as { messages: Entry[] }).messages;
  };

  let lastSeq = 0;
  try {
    const recent = await fetchTranscript();
    lastSeq = recent.at(-1)?.seq ?? 0;
  } catch (err) {
    const why = err instanceof Error && err.message.startsWith('the API') ? err.message : `cannot reach Steward at ${opts.baseUrl}: is it running? (./steward start)`;
    write(`${why}\n`);
    return;
  }

  write(`Chatting as ${opts.user} in chat "${opts.chatId}". /help lists commands, /quit leaves.\n`);
  let polling = true;
  const poll = (async () => {
    while (polling) {
      try {
        for (const e of await fetchTranscript(lastSeq)) {
          lastSeq = Math.max(lastSeq, e.seq ?? lastSeq);
          if (e.role === 'assistant') write(`\nagent> ${e.text}\n`);
          else if (e.role === 'system') write(`\n[steward] ${e.text}\n`);
        }
      } catch (err) {
        write(`\n[steward] ${(err as Error).message}\n`);
      }
      await new Promise((r) => setTimeout(r, opts.pollMs ?? 250));
    }
  })();

  const rl = createInterface({ input: opts.input ?? process.stdin, terminal: false });
  for await (const raw of rl) {
    const line = raw.trim();
    if (!line) continue;
    if (line === '/quit' || line === '/exit') break;
    try {
      const r = await fetch(`${base}/messages`, {
        method: 'POST',
        headers: { ...headers, 'idempotency-key': randomUUID() },
        body: JSON.stringify({ text: line, user: opts.user }),
      });
      const body = (await r.json()) as { error?: string; reply?: string };
      if (!r.ok) write(`[steward] rejected (${r.status}): ${body.error ?? 'error'}\n`);
    } catch (err) {
      write(`[steward] cannot reach Steward: ${(err as Error).message}\n`);
    }
  }
  rl.close();
  polling = false;
  await poll;
  write('bye\n');
}
