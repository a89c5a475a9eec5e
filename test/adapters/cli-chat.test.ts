/** `steward chat` against a real HTTP server: lines go out as messages, replies print, EOF ends it. */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import { runChat } from '../../adapters/cli/chat.js';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import type { Ingress, TranscriptEntry } from '../../services/chat/intake.js';

const unused: Pick<Ingress, 'handleAction' | 'decidePairing' | 'decideApproval'> = {
  handleAction: async () => {
    throw new Error('unused');
  },
  decidePairing: async () => {
    throw new Error('unused');
  },
  decideApproval: async () => {
    throw new Error('unused');
  },
};

describe('CLI chat', () => {
  it('sends lines, prints the agent and steward messages, and ends on EOF', async () => {
    const entries: TranscriptEntry[] = [];
    const sent: string[] = [];
    const ingress: Ingress = {
      async handle(msg) {
        sent.push(msg.text);
        entries.push({ seq: entries.length + 1, role: 'user', text: msg.text, at: msg.at });
        entries.push({ seq: entries.length + 1, role: msg.text.startsWith('/') ? 'system' : 'assistant', text: `re: ${msg.text}`, at: msg.at });
        return { workflowId: 'w', kind: 'message', duplicate: false };
      },
      async transcript(_id, opts) {
        return opts?.afterSeq !== undefined ? entries.filter((e) => (e.seq ?? 0) > (opts.afterSeq ?? 0)) : entries.slice(-(opts?.limit ?? 200));
      },
      async status() {
        throw new Error('unused');
      },
      ...unused,
    };
    const token = 'cli-test-token-0123456789';
    const server = await startHttpServer(createHttpApp({ ingress, apiToken: token, health: async () => ({ ok: true, checks: {} }) }), { host: '127.0.0.1', port: 0 });
    const input = new PassThrough();
    const output = new PassThrough();
    let printed = '';
    output.on('data', (d: Buffer) => (printed += d.toString()));
    const done = runChat({ baseUrl: server.url, token, chatId: 'cli-room', user: 'bob', input, output, pollMs: 20 });
    const waitFor = async (re: RegExp) => {
      for (let i = 0; i < 200 && !re.test(printed); i++) await new Promise((r) => setTimeout(r, 20));
      assert.match(printed, re);
    };
    await waitFor(/Chatting as bob/);
    input.write('hello agent\n');
    await waitFor(/agent> re: hello agent/);
    input.write('/status\n');
    await waitFor(/\[steward\] re: \/status/);
    input.end();
    await done;
    assert.deepEqual(sent, ['hello agent', '/status']);
    assert.match(printed, /bye/);
    await server.close();
  });

  it('says so when the token is refused', async () => {
    const server = await startHttpServer(
      createHttpApp({ ingress: { handle: async () => { throw new Error('no'); }, transcript: async () => [], status: async () => { throw new Error('no'); }, ...unused }, apiToken: 'right-token-0123456789', health: async () => ({ ok: true, checks: {} }) }),
      { host: '127.0.0.1', port: 0 },
    );
    const output = new PassThrough();
    let printed = '';
    output.on('data', (d: Buffer) => (printed += d.toString()));
    await runChat({ baseUrl: server.url, token: 'wrong-token-0123456789', chatId: 'x', user: 'u', input: new PassThrough(), output });
    assert.match(printed, /token was refused/);
    await server.close();
  });
});
