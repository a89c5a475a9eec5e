/**
 * Chat channels from configuration: the senders (REST only, so a worker process can deliver
 * without a gateway connection) and the adapters that receive (Telegram long polling, the
 * Discord gateway). Both platforms are optional; neither starts without its token.
 */
import type { Logger } from 'pino';
import type { Db } from '../domain/db.js';
import { adminConversations } from '../domain/governance.js';
import type { Senders } from '../domain/outbox.js';
import type { Ingress } from '../services/chat/intake.js';
import type { StewardConfig } from '../config/index.js';

/**
 * The senders of the configured chat platforms. A platform's modules (grammY, discord.js) are
 * loaded only when it is configured: discord.js alone is about 12 MB of heap and 50 MB of RSS.
 */
export async function createSenders(config: StewardConfig, log?: Logger): Promise<Senders> {
  const senders: Senders = {};
  if (config.telegram) {
    const { createTelegramSender } = await import('../adapters/telegram/index.js');
    senders.telegram = createTelegramSender({ token: config.telegram.token, ...(config.telegram.apiRoot ? { apiRoot: config.telegram.apiRoot } : {}), ...(log ? { log } : {}) });
  }
  if (config.discord) {
    const { createDiscordSender } = await import('../adapters/discord/index.js');
    senders.discord = createDiscordSender({ token: config.discord.token, ...(config.discord.apiUrl ? { api: config.discord.apiUrl } : {}), ...(log ? { log } : {}) });
  }
  return senders;
}

export interface RunningChannel {
  platform: 'telegram' | 'discord';
  account: string;
  stop(): Promise<void>;
  /** The connection's own state: long polling running (Telegram), the gateway ready (Discord). */
  connected(): boolean;
}

/** Start the receiving side of every configured chat platform. */
export async function startChannels(config: StewardConfig, deps: { ingress: Ingress; senders: Senders; db: Db; log: Logger }): Promise<RunningChannel[]> {
  const running: RunningChannel[] = [];
  try {
    if (config.telegram) {
      const { createTelegramAdapter } = await import('../adapters/telegram/index.js');
      const adapter = createTelegramAdapter({
        token: config.telegram.token,
        ...(config.telegram.apiRoot ? { apiRoot: config.telegram.apiRoot } : {}),
        ingress: deps.ingress,
        log: deps.log,
        // the admin command menu shows in the admin channel, else in the admins' DMs
        adminChats: async () => (await adminConversations(deps.db, deps.senders)).filter((c) => c.platform === 'telegram').map((c) => c.chatId),
      });
      await adapter.start();
      running.push({ platform: 'telegram', account: adapter.account, stop: () => adapter.stop(), connected: () => adapter.bot.isRunning() });
    }
    if (config.discord) {
      const sender = deps.senders.discord;
      if (!sender) throw new Error('the Discord sender is missing');
      const { createDiscordAdapter } = await import('../adapters/discord/index.js');
      const adapter = createDiscordAdapter({
        token: config.discord.token,
        ingress: deps.ingress,
        sender,
        log: deps.log,
        ...(config.discord.guildId ? { guildId: config.discord.guildId } : {}),
        ...(config.discord.apiUrl ? { clientOptions: { rest: { api: config.discord.apiUrl } } } : {}),
      });
      await adapter.start();
      running.push({ platform: 'discord', account: adapter.account, stop: () => adapter.stop(), connected: () => adapter.client.isReady() });
    }
  } catch (err) {
    for (const r of running.reverse()) await r.stop().catch(() => undefined);
    throw err;
  }
  return running;
}

/** A link to a workflow run in the Temporal UI. */
export function runLinker(uiBase: string | undefined, namespace: string): ((workflowId: string) => string | undefined) | undefined {
  if (!uiBase) return undefined;
  const base = uiBase.replace(/\/$/, '');
  return (workflowId) => `${base}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}
