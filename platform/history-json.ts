/**
 * Workflow histories and payloads as proto JSON: the JSON that `temporal workflow show -o json`
 * and the Temporal UI write, and the format of the replay corpus (test/replay/histories/).
 *
 * The SDK does this in the proto-utils module of its common package (protobufjs's protojson), which is
 * not part of its public surface; Steward keeps to the public packages, so this module walks the
 * message types of `@temporalio/proto` (the public protobufjs reflection of Temporal's API) with
 * the rules of proto3 JSON that histories need: field JSON names, fields at their default left
 * out, 64-bit integers as strings, bytes in base64, enums by name, maps and repeated fields, and
 * `google.protobuf.Timestamp`, `Duration` and the wrapper types in their JSON forms. Any other
 * well-known type is refused with its name (no history field uses one).
 * test/unit/history-json.test.ts holds it to the corpus: every recorded file reads and writes
 * back to the same text.
 */
import protoModule, { type temporal } from '@temporalio/proto';

const { temporal: api } = protoModule;

/** The protobufjs reflection this module reads (the shape of protobufjs's Type, Enum and Field). */
interface ReflectedField {
  name: string;
  jsonName: string;
  type: string;
  repeated: boolean;
  map: boolean;
  hasPresence?: boolean;
  resolvedType: ReflectedType | ReflectedEnum | null;
  resolve(): ReflectedField;
}
interface ReflectedType {
  fullName: string;
  fieldsArray: ReflectedField[];
  fromObject(object: Record<string, unknown>): unknown;
}
interface ReflectedEnum {
  fullName: string;
  values: Record<string, number>;
  valuesById: Record<number, string>;
}

export type History = temporal.api.history.v1.IHistory;
export type Payload = temporal.api.common.v1.IPayload;
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

const HISTORY = api.api.history.v1.History as unknown as ReflectedType;
const PAYLOAD = api.api.common.v1.Payload as unknown as ReflectedType;

const isType = (t: ReflectedField['resolvedType']): t is ReflectedType => t !== null && 'fieldsArray' in t;
const isEnum = (t: ReflectedField['resolvedType']): t is ReflectedEnum => t !== null && 'valuesById' in t;
const LONG = new Set(['int64', 'uint64', 'sint64', 'fixed64', 'sfixed64']);
const WRAPPERS = new Set(['DoubleValue', 'FloatValue', 'Int64Value', 'UInt64Value', 'Int32Value', 'UInt32Value', 'BoolValue', 'StringValue', 'BytesValue'].map((n) => `.google.protobuf.${n}`));

type Long = { toNumber(): number; toString(): string };
function toNumber(v: unknown): number {
  if (v == null) return 0;
  if (typeof v === 'number') return v;
  if (typeof (v as Long).toNumber === 'function') return (v as Long).toNumber();
  return Number(v) || 0;
}

/** Nanoseconds as protojson writes them: 9 digits, trailing groups of 000 dropped. */
function nanosText(nanos: number): string {
  let s = String(Math.abs(nanos)).padStart(9, '0');
  while (s.length > 3 && s.endsWith('000')) s = s.slice(0, -3);
  return s;
}

function base64(bytes: unknown): string {
  if (bytes == null) return '';
  if (typeof bytes === 'string') return bytes;
  const b = bytes as Uint8Array;
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('base64');
}

function isImplicitDefault(field: ReflectedField, value: unknown): boolean {
  if (field.hasPresence || field.repeated || field.map || isType(field.resolvedType)) return false;
  if (isEnum(field.resolvedType)) return value === 0;
  switch (field.type) {
    case 'bool':
      return value === false;
    case 'string':
      return value === '';
    case 'bytes':
      return value == null || (value as Uint8Array).length === 0;
    default:
      return toNumber(value) === 0;
  }
}

function writeValue(field: ReflectedField, value: unknown): JsonValue {
  const t = field.resolvedType;
  if (isType(t)) return writeMessage(t, value as Record<string, unknown>);
  if (isEnum(t)) return t.valuesById[value as number] ?? (value as number);
  if (LONG.has(field.type)) return value == null ? '0' : String(value);
  if (field.type === 'bytes') return base64(value);
  if ((field.type === 'double' || field.type === 'float') && typeof value === 'number' && !Number.isFinite(value)) return String(value);
  return value as JsonValue;
}

function writeMessage(type: ReflectedType, message: Record<string, unknown>): JsonValue {
  switch (type.fullName) {
    case '.google.protobuf.Timestamp': {
      const seconds = toNumber(message.seconds);
      const nanos = (message.nanos as number | undefined) ?? 0;
      const iso = new Date(seconds * 1000).toISOString();
      return nanos ? iso.replace(/\.\d+Z$/, `.${nanosText(nanos)}Z`) : iso.replace(/\.\d+Z$/, 'Z');
    }
    case '.google.protobuf.Duration': {
      const seconds = toNumber(message.seconds);
      const nanos = (message.nanos as number | undefined) ?? 0;
      return `${seconds < 0 || nanos < 0 ? '-' : ''}${Math.abs(seconds)}${nanos ? `.${nanosText(nanos)}` : ''}s`;
    }
  }
  if (WRAPPERS.has(type.fullName)) return writeValue(type.fieldsArray[0]!.resolve(), message.value);
  if (type.fullName.startsWith('.google.protobuf.')) throw new Error(`history JSON: ${type.fullName.slice(1)} is not supported`);
  const out: JsonObject = {};
  for (const f of type.fieldsArray) {
    const field = f.resolve();
    const value = message[field.name];
    if (value == null) continue;
    if (field.map) {
      const keys = Object.keys(value);
      if (keys.length === 0) continue;
      out[field.jsonName] = Object.fromEntries(keys.map((k) => [k, writeValue(field, (value as Record<string, unknown>)[k])]));
    } else if (field.repeated) {
      const list = value as unknown[];
      if (list.length === 0) continue;
      out[field.jsonName] = list.map((v) => writeValue(field, v));
    } else {
      if (!Object.prototype.hasOwnProperty.call(message, field.name) || isImplicitDefault(field, value)) continue;
      out[field.jsonName] = writeValue(field, value);
    }
  }
  return out;
}

/** Seconds and nanoseconds of an RFC 3339 timestamp (`2026-11-28T04:54:37.123456Z`). */
function parseTimestamp(text: string, where: string): { seconds: number; nanos: number } {
  const m = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/.exec(text);
  const millis = new Date(text).getTime();
  if (!m || Number.isNaN(millis)) throw new TypeError(`${where}: invalid timestamp ${JSON.stringify(text)}`);
  return { seconds: Math.floor(millis / 1000), nanos: m[1] ? Number(m[1].padEnd(9, '0')) : 0 };
}

function parseDuration(text: string, where: string): { seconds: number; nanos: number } {
  const m = /^(-)?(\d+)(?:\.(\d{1,9}))?s$/.exec(text);
  if (!m) throw new TypeError(`${where}: invalid duration ${JSON.stringify(text)}`);
  const sign = m[1] ? -1 : 1;
  return { seconds: sign * Number(m[2]) || 0, nanos: m[3] ? sign * Number(m[3].padEnd(9, '0')) || 0 : 0 };
}

/** A proto JSON value as the plain object protobufjs's `fromObject` takes (it reads enum names, 64-bit strings and base64 itself). */
function readValue(field: ReflectedField, value: unknown, where: string): unknown {
  const t = field.resolvedType;
  return isType(t) ? readMessage(t, value, where) : value;
}

function readMessage(type: ReflectedType, json: unknown, where: string): unknown {
  if (type.fullName === '.google.protobuf.Timestamp') return parseTimestamp(String(json), where);
  if (type.fullName === '.google.protobuf.Duration') return parseDuration(String(json), where);
  if (WRAPPERS.has(type.fullName)) return { value: json };
  if (type.fullName.startsWith('.google.protobuf.')) throw new Error(`history JSON: ${type.fullName.slice(1)} is not supported`);
  if (json === null || typeof json !== 'object' || Array.isArray(json)) throw new TypeError(`${where}: expected an object for ${type.fullName.slice(1)}`);
  const input = json as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const f of type.fieldsArray) {
    const field = f.resolve();
    const value = input[field.jsonName] ?? input[field.name];
    if (value == null) continue;
    const at = `${where}.${field.jsonName}`;
    if (field.map) out[field.name] = Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, readValue(field, v, `${at}.${k}`)]));
    else if (field.repeated) out[field.name] = (value as unknown[]).map((v, i) => readValue(field, v, `${at}[${i}]`));
    else out[field.name] = readValue(field, value, at);
  }
  return out;
}

/** A history (as `fetchHistory()` returns it, or a plain object of the same shape) as the proto JSON Temporal's tools write, indented by 2. */
export function historyToJSON(history: History): string {
  return JSON.stringify(writeMessage(HISTORY, HISTORY.fromObject(history as Record<string, unknown>) as Record<string, unknown>), null, 2);
}

/** A proto JSON history (a parsed file of the corpus) as a History message. */
export function historyFromJSON(json: unknown): History {
  if (json === null || typeof json !== 'object' || !Array.isArray((json as { events?: unknown }).events)) {
    throw new TypeError('invalid history: expected an object with an array of events');
  }
  return HISTORY.fromObject(readMessage(HISTORY, json, 'history') as Record<string, unknown>) as History;
}

/** A payload as proto JSON (`metadata` values and `data` in base64). */
export function payloadToJSON(payload: Payload): JsonObject {
  return writeMessage(PAYLOAD, PAYLOAD.fromObject(payload as Record<string, unknown>) as Record<string, unknown>) as JsonObject;
}

/** A proto JSON payload as a Payload. */
export function payloadFromJSON(json: unknown): Payload {
  return PAYLOAD.fromObject(readMessage(PAYLOAD, json, 'payload') as Record<string, unknown>) as Payload;
}
