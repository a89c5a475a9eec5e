export {
  createDiscordSender,
  discordAccountFromToken,
  discordComponents,
  discordNonce,
  discordRestOptions,
  DISCORD_EDIT_INTERVAL_MS,
  DISCORD_LIMIT,
  MAX_RATE_LIMIT_WAIT_MS,
  toDeliveryError,
  type DiscordSender,
  type DiscordSenderOptions,
} from './sender.js';
export {
  attachmentFetcher,
  commandText,
  createDiscordAdapter,
  discordCommands,
  DISCORD_ATTACHMENT_HOSTS,
  type DiscordAdapter,
  type DiscordAdapterOptions,
} from './adapter.js';
