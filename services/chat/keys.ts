/** The intake's names for what comes in: an inbound message's key, the operator's user id. */

/** The user id an OpenHarness request carries when it authenticated with the operator's token. */
export const OPERATOR_USER_ID = 'operator';

/** The transcript key (and idempotency key) of an inbound message: one rule, in common/ids.ts. */
export { inboundMessageKey as inboundKey } from '../../common/ids.js';
