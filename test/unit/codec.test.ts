/**
 * Steward's payload codec: AES-256-GCM with the key id in the metadata, compression above a
 * threshold, key rotation, pass-through of plaintext payloads (older histories, the replay
 * corpus), and clear errors for tampered payloads and unknown keys.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { DefaultPayloadConverter, type Payload } from '@temporalio/common';
import fc from 'fast-check';
import {
  CODEC_KEYS_FILE,
  COMPRESSION_KEY,
  CodecError,
  CodecKeysSchema,
  ENCODING_ENCRYPTED,
  KEY_ID_KEY,
  StewardCodec,
  formatCodecKeys,
  generateCodecKey,
  resolveCodecKeys,
  type CodecKey,
} from '../../common/codec.js';
import { ConfigError, loadConfig } from '../../config/index.js';
import { repoRoot } from '../helpers/process.js';

const converter = new DefaultPayloadConverter();
const key = (id: string): CodecKey => ({ id, key: randomBytes(32) });
const meta = (p: Payload, k: string) => (p.metadata?.[k] ? Buffer.from(p.metadata[k]).toString('utf8') : undefined);
const tmp = () => mkdtempSync(path.join(tmpdir(), 'steward-codec-'));

describe('payload codec', () => {
  it('round-trips values and hides them: binary/encrypted, the key id in the metadata, no plaintext', async () => {
    const codec = new StewardCodec({ keys: [key('k1')] });
    const value = { text: 'the secret sk-live-abc123', n: 42, nested: [1, 'two', null] };
    const plain = converter.toPayload(value);
    const [encoded] = await codec.encode([plain]);
    assert.equal(meta(encoded!, 'encoding'), ENCODING_ENCRYPTED);
    assert.equal(meta(encoded!, KEY_ID_KEY), 'k1');
    assert.equal(meta(encoded!, COMPRESSION_KEY), undefined, 'small payloads are not compressed');
    assert.deepEqual(Object.keys(encoded!.metadata!).sort(), ['encoding', KEY_ID_KEY].sort(), 'the original metadata is inside the ciphertext');
    assert.ok(!Buffer.from(encoded!.data!).includes('sk-live-abc123'));
    assert.ok(!Buffer.from(encoded!.data!).includes('json/plain'));
    const [decoded] = await codec.decode([encoded!]);
    assert.equal(meta(decoded!, 'encoding'), 'json/plain');
    assert.deepEqual(converter.fromPayload(decoded!), value);
    // a fresh IV each time: the same payload never encrypts to the same bytes
    const [again] = await codec.encode([plain]);
    assert.notDeepEqual(Buffer.from(again!.data!), Buffer.from(encoded!.data!));
  });

  it('gives every payload an IV of its own, across refills of the IV pool', async () => {
    const codec = new StewardCodec({ keys: [key('k-iv')] });
    const plain = converter.toPayload('same text every time');
    // 2,000 payloads: several refills of the pool of 341 IVs
    const encoded = await codec.encode(Array.from({ length: 2000 }, () => plain));
    const ivs = new Set(encoded.map((p) => Buffer.from(p.data!).subarray(0, 12).toString('hex')));
    assert.equal(ivs.size, 2000, 'no IV repeats');
    const decoded = await codec.decode(encoded);
    assert.ok(decoded.every((p) => converter.fromPayload(p) === 'same text every time'));
  });

  it('refuses a tampered payload with an error naming the key id', async () => {
    const codec = new StewardCodec({ keys: [key('k-tamper')] });
    const [encoded] = await codec.encode([converter.toPayload('do not change me')]);
    const data = Buffer.from(encoded!.data!);
    for (const at of [0, 13, data.length - 20, data.length - 1]) {
      const flipped = Buffer.from(data);
      flipped[at] = flipped[at]! ^ 0x01;
      await assert.rejects(codec.decode([{ metadata: encoded!.metadata!, data: flipped }]), (err: Error) => {
        assert.ok(err instanceof CodecError);
        assert.match(err.message, /key id "k-tamper" failed authentication: it was altered/);
        return true;
      });
    }
    // metadata is bound too: claiming compression that was not applied fails authentication
    await assert.rejects(
      codec.decode([{ metadata: { ...encoded!.metadata!, [COMPRESSION_KEY]: Buffer.from('gzip') }, data }]),
      /key id "k-tamper" failed authentication/,
    );
    await assert.rejects(codec.decode([{ metadata: encoded!.metadata!, data: data.subarray(0, 10) }]), /key id "k-tamper" is truncated/);
    await assert.rejects(codec.decode([{ metadata: { encoding: Buffer.from(ENCODING_ENCRYPTED) }, data }]), /carries no steward-key-id/);
  });

  it('refuses a payload of an unknown key id, naming it and the keyring', async () => {
    const [encoded] = await new StewardCodec({ keys: [key('gone-2024')] }).encode([converter.toPayload('x')]);
    const other = new StewardCodec({ keys: [key('current')] });
    await assert.rejects(other.decode([encoded!]), (err: Error) => {
      assert.ok(err instanceof CodecError);
      assert.match(err.message, /key id "gone-2024", which is not in the keyring \(current\)/);
      assert.match(err.message, /STEWARD_CODEC_KEYS/);
      return true;
    });
    // a key with the right id but other bytes is not silently accepted either
    const impostor = new StewardCodec({ keys: [key('gone-2024')] });
    await assert.rejects(impostor.decode([encoded!]), /key id "gone-2024" failed authentication/);
  });

  it('keeps old runs readable after rotation: the first key encrypts, every key decrypts', async () => {
    const old = key('k2023');
    const fresh = key('k2024');
    const before = new StewardCodec({ keys: [old] });
    const after = new StewardCodec({ keys: [fresh, old] });
    const [oldPayload] = await before.encode([converter.toPayload({ written: 'before rotation' })]);
    const [newPayload] = await after.encode([converter.toPayload({ written: 'after rotation' })]);
    assert.equal(meta(newPayload!, KEY_ID_KEY), 'k2024');
    const decoded = await after.decode([oldPayload!, newPayload!]);
    assert.deepEqual(decoded.map((p) => converter.fromPayload(p)), [{ written: 'before rotation' }, { written: 'after rotation' }]);
    // the old keyring cannot read what the new key wrote
    await assert.rejects(before.decode([newPayload!]), /key id "k2024", which is not in the keyring \(k2023\)/);
  });

  it('passes plaintext payloads through unchanged (histories from before the codec, the replay corpus)', async () => {
    const codec = new StewardCodec({ keys: [key('k1')] });
    const plain = [converter.toPayload({ a: 1 }), converter.toPayload(undefined), converter.toPayload(new Uint8Array([1, 2, 3])), {}];
    const decoded = await codec.decode(plain);
    for (const [i, p] of plain.entries()) assert.equal(decoded[i], p);

    const dir = path.join(repoRoot, 'test', 'replay', 'histories');
    const found: Payload[] = [];
    const walk = (v: unknown): void => {
      if (Array.isArray(v)) v.forEach(walk);
      else if (v && typeof v === 'object') {
        const o = v as Record<string, unknown>;
        if (o.metadata && typeof o.metadata === 'object' && typeof o.data === 'string') {
          found.push({
            metadata: Object.fromEntries(Object.entries(o.metadata as Record<string, string>).map(([k, b]) => [k, new Uint8Array(Buffer.from(b, 'base64'))])),
            data: new Uint8Array(Buffer.from(o.data, 'base64')),
          });
        } else Object.values(o).forEach(walk);
      }
    };
    const files = readdirSync(dir).filter((f) => f.endsWith('.json'));
    assert.ok(files.length > 0, 'the replay corpus has histories');
    for (const f of files) walk(JSON.parse(readFileSync(path.join(dir, f), 'utf8')));
    assert.ok(found.length > 10, `payloads found in the corpus: ${found.length}`);
    const out = await codec.decode(found);
    assert.deepEqual(out, found);
    for (const p of out) converter.fromPayload(p); // still readable by the default converter
  });

  it('compresses above the threshold (smaller when encoded) and not below it', async () => {
    const codec = new StewardCodec({ keys: [key('kc')], compressAboveBytes: 1024 });
    const big = converter.toPayload({ log: 'the same line again\n'.repeat(2000) });
    const [encodedBig] = await codec.encode([big]);
    assert.equal(meta(encodedBig!, COMPRESSION_KEY), 'gzip');
    assert.ok(encodedBig!.data!.length < big.data!.length / 10, `${encodedBig!.data!.length} vs ${big.data!.length}`);
    assert.deepEqual(converter.fromPayload((await codec.decode([encodedBig!]))[0]!), { log: 'the same line again\n'.repeat(2000) });

    const small = converter.toPayload('a'.repeat(500));
    const [encodedSmall] = await codec.encode([small]);
    assert.equal(meta(encodedSmall!, COMPRESSION_KEY), undefined);
    assert.ok(encodedSmall!.data!.length > small.data!.length, 'small payloads are only encrypted (IV, tag, metadata added)');

    // incompressible data above the threshold stays uncompressed rather than grow
    const noise = converter.toPayload(randomBytes(4096));
    const [encodedNoise] = await codec.encode([noise]);
    assert.equal(meta(encodedNoise!, COMPRESSION_KEY), undefined);
    assert.deepEqual(Buffer.from((await codec.decode([encodedNoise!]))[0]!.data!), Buffer.from(noise.data!));
  });

  it('round-trips any payload (property)', async () => {
    const codec = new StewardCodec({ keys: [key('kp'), key('kq')], compressAboveBytes: 64 });
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(fc.string({ minLength: 1, maxLength: 20 }), fc.uint8Array({ maxLength: 40 }), { maxKeys: 4 }),
        fc.oneof(fc.uint8Array({ maxLength: 3000 }), fc.string({ maxLength: 3000 }).map((s) => new Uint8Array(Buffer.from(s.repeat(3))))),
        async (metadata, data) => {
          const payload: Payload = { metadata, data };
          const [encoded] = await codec.encode([payload]);
          assert.equal(meta(encoded!, KEY_ID_KEY), 'kp');
          const [decoded] = await codec.decode([encoded!]);
          assert.deepEqual(Buffer.from(decoded!.data!), Buffer.from(data));
          assert.deepEqual(
            Object.fromEntries(Object.entries(decoded!.metadata!).map(([k, v]) => [k, Buffer.from(v).toString('hex')])),
            Object.fromEntries(Object.entries(metadata).map(([k, v]) => [k, Buffer.from(v).toString('hex')])),
          );
        },
      ),
      { numRuns: 200 },
    );
  });

  it('with encryption off, encodes nothing but still decrypts with its keys', async () => {
    const k = key('kept');
    const [encrypted] = await new StewardCodec({ keys: [k] }).encode([converter.toPayload('old run')]);
    const off = new StewardCodec({ keys: [k], encrypt: false });
    const plain = converter.toPayload('new run');
    assert.deepEqual(await off.encode([plain]), [plain]);
    assert.equal(converter.fromPayload((await off.decode([encrypted!]))[0]!), 'old run');
    assert.throws(() => new StewardCodec({ keys: [] }), /needs at least one key/);
    assert.throws(() => new StewardCodec({ keys: [{ id: 'short', key: randomBytes(16) }] }), /must be 32 bytes/);
  });
});

describe('codec keys', () => {
  it('parses STEWARD_CODEC_KEYS and rejects bad entries with a clear message, never showing key material', () => {
    const a = generateCodecKey();
    const b = key('older.key_1');
    const text = formatCodecKeys([a, b]);
    const parsed = CodecKeysSchema.parse(text);
    assert.deepEqual(parsed.map((k) => k.id), [a.id, 'older.key_1']);
    assert.deepEqual(Buffer.from(parsed[1]!.key), Buffer.from(b.key));

    const cwd = tmp();
    const c = loadConfig({ STEWARD_CODEC_KEYS: text, STEWARD_CODEC_COMPRESS_ABOVE: '2048', STEWARD_CODEC_CORS_ORIGINS: 'https://temporal.example.com/,http://127.0.0.1:9000' }, cwd);
    assert.deepEqual(c.codec.keys?.map((k) => k.id), [a.id, 'older.key_1']);
    assert.equal(c.codec.enabled, true);
    assert.equal(c.codec.compressAboveBytes, 2048);
    assert.deepEqual(c.codec.corsOrigins, ['https://temporal.example.com', 'http://127.0.0.1:9000']);
    const d = loadConfig({}, cwd);
    assert.equal(d.codec.enabled, true, 'on by default');
    assert.equal(d.codec.keys, undefined);
    assert.equal(d.codec.compressAboveBytes, 1024);
    assert.equal(loadConfig({ STEWARD_CODEC: 'off' }, cwd).codec.enabled, false);

    const secret = Buffer.from(randomBytes(16)).toString('base64');
    const bad: Array<[Record<string, string>, RegExp]> = [
      [{ STEWARD_CODEC_KEYS: `k1:${secret}` }, /STEWARD_CODEC_KEYS: expected keyid:base64-of-32-bytes .*key k1: expected 32 bytes .*got 16\); got \(hidden\)/],
      [{ STEWARD_CODEC_KEYS: 'just-a-key' }, /STEWARD_CODEC_KEYS: .*entry 1 is not keyid:base64-key/],
      [{ STEWARD_CODEC_KEYS: `bad id:${formatCodecKeys([a]).split(':')[1]}` }, /STEWARD_CODEC_KEYS: .*key id must be/],
      [{ STEWARD_CODEC_KEYS: 'k1:not*base64' }, /STEWARD_CODEC_KEYS: .*key k1: the key is not base64/],
      [{ STEWARD_CODEC_KEYS: `${formatCodecKeys([a])},${formatCodecKeys([{ id: a.id, key: randomBytes(32) }])}` }, /appears twice/],
      [{ STEWARD_CODEC: 'maybe' }, /STEWARD_CODEC: expected on or off/],
      [{ STEWARD_CODEC_COMPRESS_ABOVE: '-1' }, /STEWARD_CODEC_COMPRESS_ABOVE: expected a whole number of bytes/],
      [{ STEWARD_CODEC_CORS_ORIGINS: 'http://ui.example.com/path' }, /STEWARD_CODEC_CORS_ORIGINS: expected origins/],
    ];
    for (const [env, re] of bad) {
      assert.throws(() => loadConfig(env, cwd), (err: Error) => {
        assert.ok(err instanceof ConfigError, String(err));
        assert.match(err.message, re);
        assert.ok(!err.message.includes(secret), 'key material is never shown');
        return true;
      });
    }
  });

  it('generates one key on first use in <dataDir>/codec-keys.json (mode 0600) and keeps it', async () => {
    const dataDir = tmp();
    const none = await resolveCodecKeys({ dataDir, generate: false });
    assert.equal(none.source, 'none');
    // two processes starting at once on one data directory agree on the key
    const [first, second] = await Promise.all([resolveCodecKeys({ dataDir, generate: true }), resolveCodecKeys({ dataDir, generate: true })]);
    assert.deepEqual(first.keys, second.keys);
    assert.deepEqual([first.source, second.source].sort(), ['file', 'generated']);
    const file = path.join(dataDir, CODEC_KEYS_FILE);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const again = await resolveCodecKeys({ dataDir, generate: true });
    assert.equal(again.source, 'file');
    assert.deepEqual(again.keys.map((k) => [k.id, Buffer.from(k.key).toString('hex')]), first.keys.map((k) => [k.id, Buffer.from(k.key).toString('hex')]));
    // configured keys win over the file
    const configured = [key('from-env')];
    assert.equal((await resolveCodecKeys({ keys: configured, dataDir, generate: true })).keys, configured);
    // a damaged file stops start-up with a clear message instead of minting a new key
    writeFileSync(file, '{"keys":[{"id":"x","key":"short"}]}');
    await assert.rejects(resolveCodecKeys({ dataDir, generate: true }), /codec-keys\.json is not a codec key file/);
  });
});
