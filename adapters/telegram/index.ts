/** The Telegram channel: the sender (egress, usable without polling) and the polling adapter (ingress). */
export {
  createTelegramSender,
  isEntityError,
  MAX_RATE_LIMIT_WAIT_SECONDS,
  TELEGRAM_EDIT_INTERVAL_MS,
  TELEGRAM_LIMIT,
  telegramAccountFromToken,
  telegramAutoRetry,
  telegramChatId,
  telegramKeyboard,
  toDeliveryError,
  type TelegramSender,
  type TelegramSenderOptions,
} from './sender.js';
export {
  addressing,
  createTelegramAdapter,
  normalizeTelegramMessage,
  telegramCommandDescription,
  telegramCommandMenus,
  telegramDisplayName,
  type TelegramAdapter,
  type TelegramAdapterOptions,
  type TelegramBotIdentity,
  type TelegramFileRef,
  type TelegramInbound,
} from './adapter.js';
