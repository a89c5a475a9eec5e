/**
 * The files that come with a chat message: fetched only once the sender has been let in,
 * checked against the media types and the size allowed, and stored by content hash (a
 * message and its history carry only the reference).
 */
import { putBlob } from '../../domain/blobs.js';
import type { Db } from '../../domain/db.js';
import { AttachmentRefSchema, MAX_ATTACHMENTS, type AttachmentRef } from '../../common/schemas.js';

/** A file that came with a message, fetched only once the sender has been let in. */
export interface PendingAttachment {
  name: string;
  mediaType: string;
  /** Size the platform declares (checked before downloading), if known. */
  size?: number;
  fetch(): Promise<Buffer>;
}


export interface AttachmentLimits {
  maxBytes: number;
  /** Allowed media types; `type/*` matches a whole family. */
  types: readonly string[];
}

export const DEFAULT_ATTACHMENT_LIMITS: AttachmentLimits = {
  maxBytes: 10 * 1024 * 1024,
  types: ['image/*', 'text/*', 'application/pdf', 'application/json'],
};


function mediaTypeAllowed(type: string, allowed: readonly string[]): boolean {
  const t = type.split(';')[0]?.trim().toLowerCase() ?? '';
  return allowed.some((a) => (a.endsWith('/*') ? t.startsWith(a.slice(0, -1)) : t === a.toLowerCase()));
}

function humanBytes(n: number): string {
  if (n >= 1024 * 1024) return `${(n / (1024 * 1024)).toFixed(1)} MB`;
  if (n >= 1024) return `${Math.round(n / 1024)} KB`;
  return `${n} bytes`;
}


/** Fetch, check and store the files of an admitted message; refusals are explained. */
export async function storeAttachments(db: Db, attachmentLimits: AttachmentLimits, pending: PendingAttachment[]): Promise<{ refs: AttachmentRef[]; refused: string[] }> {
  const refs: AttachmentRef[] = [];
  const refused: string[] = [];
  for (const p of pending.slice(0, MAX_ATTACHMENTS)) {
    const name = p.name.replace(/[\\/\u0000-\u001f]/g, '_').slice(0, 255) || 'file';
    if (!mediaTypeAllowed(p.mediaType, attachmentLimits.types)) {
      refused.push(`${name}: files of type ${p.mediaType} are not accepted (allowed: ${attachmentLimits.types.join(', ')})`);
      continue;
    }
    if (p.size !== undefined && p.size > attachmentLimits.maxBytes) {
      refused.push(`${name}: ${humanBytes(p.size)} is over the limit of ${humanBytes(attachmentLimits.maxBytes)}`);
      continue;
    }
    let data: Buffer;
    try {
      data = await p.fetch();
    } catch (err) {
      refused.push(`${name}: it could not be downloaded (${(err as Error).message})`);
      continue;
    }
    if (data.length > attachmentLimits.maxBytes) {
      refused.push(`${name}: ${humanBytes(data.length)} is over the limit of ${humanBytes(attachmentLimits.maxBytes)}`);
      continue;
    }
    const hash = await putBlob(db, data, p.mediaType);
    refs.push(AttachmentRefSchema.parse({ hash, name, mediaType: p.mediaType.split(';')[0]?.trim() || 'application/octet-stream', size: data.length }));
  }
  if (pending.length > MAX_ATTACHMENTS) refused.push(`only the first ${MAX_ATTACHMENTS} files of a message are taken`);
  return { refs, refused };
}
