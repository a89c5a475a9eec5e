/** A chat's transcript as the adapters and the API read it. */
import type { Db } from '../../domain/db.js';
import { readTranscript, type TranscriptRow } from '../../domain/transcript.js';
import { AttachmentRefSchema, type AttachmentRef } from '../../common/schemas.js';

export interface TranscriptEntry {
  /** Position in the transcript; pass it back as `afterSeq` to read only newer entries. */
  seq?: number;
  role: 'user' | 'assistant' | 'system';
  text: string;
  at: string;
  user?: string;
  attachments?: AttachmentRef[];
}


/** A transcript row as the API shows it (its attachments parsed; unreadable ones left out). */
export function transcriptEntry(r: TranscriptRow): TranscriptEntry {
  let attachments: AttachmentRef[] | undefined;
  if (r.attachments) {
    try {
      const p = AttachmentRefSchema.array().safeParse(JSON.parse(r.attachments));
      if (p.success && p.data.length) attachments = p.data;
    } catch {
      attachments = undefined;
    }
  }
  return { seq: r.seq, role: r.role, text: r.text, at: r.at, ...(r.user ? { user: r.user } : {}), ...(attachments ? { attachments } : {}) };
}

/** A session's transcript, oldest first (`afterSeq`: only the entries after it). */
export async function transcriptOf(db: Db, sessionId: string, opts: { limit?: number; afterSeq?: number } = {}): Promise<TranscriptEntry[]> {
  const rows = await readTranscript(db, sessionId, {
    ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
    ...(opts.afterSeq !== undefined ? { afterSeq: opts.afterSeq } : {}),
  });
  return rows.map(transcriptEntry);
}
