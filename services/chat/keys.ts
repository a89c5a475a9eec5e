/** The intake's names for what comes in: an inbound message's key, the operator's user id. */

/** The user id an OpenHarness request carries when it authenticated with the operator's token. */
export const OPERATOR_USER_ID = 'operator';

/** The transcript key (and idempotency key) of an inbound message. */
export function inboundKey(msg: { platform: string; account: string; chatId: string; id: string }): string {
  return `in:${msg.platform}:${msg.account}:${msg.chatId}:${msg.id}`;
}
