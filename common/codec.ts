/**
 * Steward's payload codec: every payload Temporal stores (workflow and activity inputs and
 * results, signals, updates, queries, memos, heartbeat details) is encrypted with AES-256-GCM
 * before it leaves the process, and compressed first when it is larger than a threshold.
 *
 * An encoded payload:
 *   metadata  encoding = binary/encrypted        (Temporal's convention for encrypted payloads)
 *             steward-key-id = <key id>          (which key of the keyring encrypted it)
 *             steward-compression = gzip         (only when the plaintext was compressed)
 *   data      iv (12 bytes) || ciphertext || auth tag (16 bytes)
 * The plaintext is the original payload (metadata and data) in its protobuf encoding. The key id
 * and compression are bound to the ciphertext as additional authenticated data, so a changed
 * byte anywhere (data or those metadata values) fails authentication.
 *
 * Keyring: the first key encrypts, every key decrypts, so a rotated-out key keeps old runs
 * readable for as long as it stays in the list. Decoding passes every payload that is not
 * `binary/encrypted` through unchanged (histories written before the codec was on).
 */
import { createCipheriv, createDecipheriv, createSecretKey, randomBytes, type KeyObject } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { gunzipSync, gzipSync, inflateSync } from 'node:zlib';
import type { DataConverter, Payload, PayloadCodec } from '@temporalio/common';
import protoModule from '@temporalio/proto';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';

// @temporalio/proto is CommonJS: under ESM its namespace arrives as the default export
const ProtoPayload = protoModule.temporal.api.common.v1.Payload;

export const ENCODING_KEY = 'encoding';
export const ENCODING_ENCRYPTED = 'binary/encrypted';
export const KEY_ID_KEY = 'steward-key-id';
export const COMPRESSION_KEY = 'steward-compression';
export const CODEC_KEYS_FILE = 'codec-keys.json';
/** Payloads whose serialized form is larger than this many bytes are compressed (default). */
export const DEFAULT_COMPRESS_ABOVE_BYTES = 1024;

const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;
const COMPRESSIONS = ['gzip', 'deflate'] as const;
type Compression = (typeof COMPRESSIONS)[number];

export interface CodecKey {
  id: string;
  /** 32 bytes of AES-256 key material. */
  key: Uint8Array;
}

export class CodecError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CodecError';
  }
}

export const KEY_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$|^[A-Za-z0-9_-]+$/;

/** One `keyid:base64` entry; the message says what is wrong without showing key material. */
function parseKeyEntry(entry: string, index: number): CodecKey | string {
  const colon = entry.indexOf(':');
  if (colon < 0) return `entry ${index + 1} is not keyid:base64-key`;
  const id = entry.slice(0, colon).trim();
  const b64 = entry.slice(colon + 1).trim();
  if (!KEY_ID_PATTERN.test(id)) return `entry ${index + 1}: key id must be 1-64 letters, digits, '.', '_' or '-'`;
  if (!BASE64.test(b64)) return `key ${id}: the key is not base64`;
  const key = Buffer.from(b64, b64.includes('-') || b64.includes('_') ? 'base64url' : 'base64');
  if (key.length !== KEY_BYTES) return `key ${id}: expected ${KEY_BYTES} bytes of key (base64 of 32 random bytes, e.g. \`openssl rand -base64 32\`), got ${key.length}`;
  return { id, key };
}

/** `STEWARD_CODEC_KEYS`: a comma list of `keyid:base64-of-32-bytes`, the encrypting key first. */
export const CodecKeysSchema = z
  .string()
  .trim()
  .transform((v, ctx) => {
    const entries = v.split(',').map((s) => s.trim()).filter(Boolean);
    if (entries.length === 0) {
      ctx.addIssue({ code: 'custom', message: 'expected keyid:base64-key entries separated by commas' });
      return z.NEVER;
    }
    const keys: CodecKey[] = [];
    for (const [i, entry] of entries.entries()) {
      const k = parseKeyEntry(entry, i);
      if (typeof k === 'string') {
        ctx.addIssue({ code: 'custom', message: `expected keyid:base64-of-32-bytes entries separated by commas (${k})` });
        return z.NEVER;
      }
      if (keys.some((x) => x.id === k.id)) {
        ctx.addIssue({ code: 'custom', message: `key id ${k.id} appears twice: every key needs its own id` });
        return z.NEVER;
      }
      keys.push(k);
    }
    return keys;
  });

export interface StewardCodecOptions {
  /** The keyring: the first key encrypts, all of them decrypt. */
  keys: CodecKey[];
  /** Serialized payloads larger than this are compressed before encryption. */
  compressAboveBytes?: number;
  /** false: encode passes payloads through (decode still decrypts with the keyring). */
  encrypt?: boolean;
}

/**
 * IVs are cut from a pool of CSPRNG bytes, refilled with a new buffer when used up: one
 * `randomBytes` call per 341 payloads instead of one each (each call costs about as much as the
 * encryption of a small payload). Every IV is still 12 fresh random bytes, never reused.
 */
const IV_POOL_BYTES = IV_BYTES * 341;
let ivPool: Buffer = Buffer.alloc(0);
let ivTaken = 0;
function nextIv(): Buffer {
  if (ivTaken + IV_BYTES > ivPool.length) {
    ivPool = randomBytes(IV_POOL_BYTES);
    ivTaken = 0;
  }
  const iv = ivPool.subarray(ivTaken, ivTaken + IV_BYTES);
  ivTaken += IV_BYTES;
  return iv;
}

const text = (b: Uint8Array | null | undefined): string | undefined => (b ? Buffer.from(b).toString('utf8') : undefined);
const bytes = (s: string): Uint8Array => Buffer.from(s, 'utf8');
const aadText = (keyId: string, compression: Compression | undefined) => `steward-codec/v1\n${keyId}\n${compression ?? 'none'}`;

export class StewardCodec implements PayloadCodec {
  readonly keys: ReadonlyArray<CodecKey>;
  readonly compressAboveBytes: number;
  readonly encrypts: boolean;
  /**
   * Each key as a KeyObject, made once: a cipher made from one skips the raw key's validation
   * and copy, about 40% of the cost of a small payload's encryption.
   */
  private readonly byId: Map<string, KeyObject>;
  /** The additional authenticated data per key id and compression, made once each. */
  private readonly aads = new Map<string, Buffer>();

  constructor(opts: StewardCodecOptions) {
    this.encrypts = opts.encrypt ?? true;
    if (this.encrypts && opts.keys.length === 0) throw new CodecError('the payload codec needs at least one key to encrypt with');
    for (const k of opts.keys) {
      if (!KEY_ID_PATTERN.test(k.id)) throw new CodecError(`codec key id ${JSON.stringify(k.id)} must be 1-64 letters, digits, '.', '_' or '-'`);
      if (k.key.length !== KEY_BYTES) throw new CodecError(`codec key ${k.id} must be ${KEY_BYTES} bytes, not ${k.key.length}`);
    }
    this.keys = opts.keys;
    this.byId = new Map(opts.keys.map((k) => [k.id, createSecretKey(k.key)]));
    if (this.byId.size !== opts.keys.length) throw new CodecError('codec key ids must be unique');
    this.compressAboveBytes = opts.compressAboveBytes ?? DEFAULT_COMPRESS_ABOVE_BYTES;
  }

  private aad(keyId: string, compression: Compression | undefined): Buffer {
    const t = aadText(keyId, compression);
    let b = this.aads.get(t);
    if (!b) {
      b = Buffer.from(t, 'utf8');
      // bounded by the keyring: ids come from it (decode refuses an unknown one first)
      this.aads.set(t, b);
    }
    return b;
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    if (!this.encrypts) return payloads;
    return payloads.map((p) => this.encodeOne(p));
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((p) => this.decodeOne(p));
  }

  encodeOne(payload: Payload): Payload {
    const first = this.keys[0];
    const key = first ? this.byId.get(first.id) : undefined;
    if (!first || !key) throw new CodecError('the payload codec has no key to encrypt with');
    let plain: Uint8Array = ProtoPayload.encode({ metadata: payload.metadata ?? {}, data: payload.data ?? new Uint8Array() }).finish();
    let compression: Compression | undefined;
    if (plain.length > this.compressAboveBytes) {
      const packed = gzipSync(plain);
      if (packed.length < plain.length) {
        plain = packed;
        compression = 'gzip';
      }
    }
    const iv = nextIv();
    const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(this.aad(first.id, compression));
    const sealed = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
    return {
      metadata: {
        [ENCODING_KEY]: bytes(ENCODING_ENCRYPTED),
        [KEY_ID_KEY]: bytes(first.id),
        ...(compression ? { [COMPRESSION_KEY]: bytes(compression) } : {}),
      },
      data: sealed,
    };
  }

  decodeOne(payload: Payload): Payload {
    const meta = payload.metadata ?? {};
    if (text(meta[ENCODING_KEY]) !== ENCODING_ENCRYPTED) return payload;
    const keyId = text(meta[KEY_ID_KEY]);
    if (keyId === undefined) throw new CodecError(`an encrypted payload carries no ${KEY_ID_KEY}: it was not written by Steward's codec`);
    const key = this.byId.get(keyId);
    if (!key) {
      throw new CodecError(
        `payload encrypted with key id "${keyId}", which is not in the keyring (${this.keys.map((k) => k.id).join(', ') || 'no keys'}): ` +
          'add that key to STEWARD_CODEC_KEYS (keep rotated-out keys after the new one)',
      );
    }
    const compressionText = text(meta[COMPRESSION_KEY]);
    if (compressionText !== undefined && !(COMPRESSIONS as readonly string[]).includes(compressionText)) {
      throw new CodecError(`payload encrypted with key id "${keyId}" names an unknown compression ${JSON.stringify(compressionText)}`);
    }
    const compression = compressionText as Compression | undefined;
    const data = Buffer.from(payload.data ?? new Uint8Array());
    if (data.length < IV_BYTES + TAG_BYTES) throw new CodecError(`payload encrypted with key id "${keyId}" is truncated (${data.length} bytes)`);
    let plain: Buffer;
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES), { authTagLength: TAG_BYTES });
      decipher.setAAD(this.aad(keyId, compression));
      decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
      plain = Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]);
    } catch {
      throw new CodecError(`payload encrypted with key id "${keyId}" failed authentication: it was altered, or key "${keyId}" is not the key it was encrypted with`);
    }
    try {
      if (compression === 'gzip') plain = gunzipSync(plain);
      else if (compression === 'deflate') plain = inflateSync(plain);
      const inner = ProtoPayload.decode(plain);
      return { metadata: { ...inner.metadata }, data: inner.data };
    } catch (err) {
      throw new CodecError(`payload encrypted with key id "${keyId}" decrypted but does not hold a payload: ${(err as Error).message}`);
    }
  }
}

/** The data converter clients and workers share: Steward's codec behind the default converters. */
/** `common/failure-converter.cjs`: failure messages and stack traces as encoded (so encrypted) attributes. */
export const failureConverterPath = fileURLToPath(new URL('./failure-converter.cjs', import.meta.url));

export function codecDataConverter(codec: PayloadCodec): DataConverter {
  return { payloadCodecs: [codec], failureConverterPath };
}

const KeyFileSchema = z.object({
  keys: z.array(z.object({ id: z.string().regex(KEY_ID_PATTERN), key: z.string().min(1) })).min(1),
});

/** A new key: id `k<yyyymmdd>-<6 hex digits>` and 32 random bytes. */
export function generateCodecKey(now = new Date()): CodecKey {
  const day = now.toISOString().slice(0, 10).replaceAll('-', '');
  return { id: `k${day}-${randomBytes(3).toString('hex')}`, key: randomBytes(KEY_BYTES) };
}

export function formatCodecKeys(keys: CodecKey[]): string {
  return keys.map((k) => `${k.id}:${Buffer.from(k.key).toString('base64')}`).join(',');
}

/**
 * The keyring: the configured keys (STEWARD_CODEC_KEYS), else the ones kept in
 * `<dataDir>/codec-keys.json`, else (when `generate`) a new key written there with mode 0600.
 * Two processes starting at once on one data directory end up with the same key.
 */
export async function resolveCodecKeys(opts: { keys?: CodecKey[]; dataDir: string; generate: boolean }): Promise<{ keys: CodecKey[]; source: 'config' | 'file' | 'generated' | 'none'; file?: string }> {
  if (opts.keys && opts.keys.length > 0) return { keys: opts.keys, source: 'config' };
  const file = path.join(opts.dataDir, CODEC_KEYS_FILE);
  const read = async (): Promise<CodecKey[] | undefined> => {
    let raw: string;
    try {
      raw = await readFile(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new CodecError(`cannot read the codec keys in ${file}: ${(err as Error).message}`);
    }
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch {
      json = undefined;
    }
    const parsed = KeyFileSchema.safeParse(json);
    const keys = parsed.success ? CodecKeysSchema.safeParse(parsed.data.keys.map((k) => `${k.id}:${k.key}`).join(',')) : undefined;
    if (!keys?.success) {
      throw new CodecError(`${file} is not a codec key file ({"keys":[{"id":"...","key":"<base64 of 32 bytes>"}]}); fix it, or set STEWARD_CODEC_KEYS`);
    }
    return keys.data;
  };
  const existing = await read();
  if (existing) return { keys: existing, source: 'file', file };
  if (!opts.generate) return { keys: [], source: 'none' };
  const key = generateCodecKey();
  const body = `${JSON.stringify({ keys: [{ id: key.id, key: Buffer.from(key.key).toString('base64') }] }, null, 2)}\n`;
  await mkdir(opts.dataDir, { recursive: true });
  try {
    await writeFile(file, body, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    // another process wrote it first: use theirs (retry briefly while it is being written)
    for (let i = 0; i < 20; i++) {
      try {
        const theirs = await read();
        if (theirs) return { keys: theirs, source: 'file', file };
      } catch (e) {
        if (i === 19) throw e;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new CodecError(`${file} appeared but holds no keys`);
  }
  await chmod(file, 0o600);
  return { keys: [key], source: 'generated', file };
}
