/**
 * The sweep behind `IngressRuntime.resumeHandoffs`: a chat message accepted (recorded and
 * receipted) whose handoff did not complete, and that no redelivery finished, is handed over
 * with its own key (services/handoff.ts), so its session takes it once.
 */
import { z } from 'zod';
import { isGoverned, lookupBinding, type BindingRecord } from '../../domain/governance.js';
import { receiptIdsByKeys, receiptsOfKindBetween } from '../../domain/receipts.js';
import { messagesByKeys } from '../../domain/transcript.js';
import { handedKey, handOverMessage, RESUME_MAX_PAGES, RESUME_PAGE, resumeWindow, type ResumeOptions } from '../handoff.js';
import type { ConversationKey } from '../../common/ids.js';
import { PlatformSchema } from '../../common/schemas.js';
import type { IngressDeps } from './intake.js';
import type { SessionStart } from './session-start.js';

/** What an ingress receipt written by this handoff says of its message (`acceptedSteps`). */
const AcceptedReceiptSchema = z.object({ platform: PlatformSchema, account: z.string(), chatId: z.string(), command: z.literal(false), handoff: z.literal(true) });

/** The sweep behind `Ingress.resumeHandoffs`: ingress receipts in the window without a handed-over mark, whose message was recorded. */
export async function resumeHandoffs(deps: IngressDeps, startOptions: (c: ConversationKey, b?: BindingRecord) => SessionStart, opts: ResumeOptions): Promise<number> {
  const { db } = deps;
  const { from, to } = resumeWindow(opts);
  let afterId = 0;
  let resumed = 0;
  for (let page = 0; page < RESUME_MAX_PAGES; page++) {
    const receipts = await receiptsOfKindBetween(db, 'ingress', from, to, '"handoff":true', afterId, RESUME_PAGE);
    if (receipts.length === 0) break;
    afterId = receipts.at(-1)!.id;
    const accepted = new Map<string, z.infer<typeof AcceptedReceiptSchema>>();
    for (const r of receipts) {
      if (!r.key?.endsWith(':ingress')) continue;
      const data = AcceptedReceiptSchema.safeParse(JSON.parse(r.data));
      if (data.success) accepted.set(r.key.slice(0, -':ingress'.length), data.data);
    }
    const handed = await receiptIdsByKeys(db, [...accepted.keys()].map(handedKey));
    const pending = [...accepted.keys()].filter((k) => !handed.has(handedKey(k)));
    for (const m of await messagesByKeys(db, pending)) {
      const a = accepted.get(m.key)!;
      const conversation: ConversationKey = { platform: a.platform, account: a.account, chatId: a.chatId };
      try {
        const found = isGoverned(a.platform) ? await lookupBinding(db, a.platform, a.account, a.chatId) : undefined;
        await handOverMessage(deps.client, db, {
          ref: { key: m.key, user: m.user ?? '', at: m.at, ...(m.identityId ? { identityId: m.identityId } : {}) },
          start: startOptions(conversation, found?.kind === 'bound' ? found.binding : undefined),
          actor: m.identityId ?? m.user ?? '',
          ...(deps.handoffAcceptMs !== undefined ? { acceptMs: deps.handoffAcceptMs } : {}),
        });
        resumed++;
        deps.log?.info({ key: m.key }, 'a message whose handoff did not complete was handed over');
      } catch (err) {
        deps.log?.warn({ err, key: m.key }, 'a message whose handoff did not complete could not be handed over');
      }
    }
    if (receipts.length < RESUME_PAGE) break;
  }
  return resumed;
}
