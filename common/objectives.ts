/**
 * Objectives: standing instructions run on Temporal Schedules. The input schemas shared by the
 * API, the CLI and chat, and pure helpers. No I/O.
 */
import { z } from 'zod';
import { ModelRefSchema } from './schemas.js';
import { referenceRefusal } from './secret-refs.js';

export const OVERLAP_POLICIES = ['skip', 'buffer-one', 'buffer-all', 'cancel-other', 'terminate-other', 'allow-all'] as const;
export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number];

const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;
const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `30s`, `15m`, `1h`, `2d` in milliseconds; undefined when malformed. */
export function durationMs(text: string): number | undefined {
  const m = DURATION.exec(text.trim());
  if (!m) return undefined;
  return Math.round(Number(m[1]) * (UNITS[m[2]!] ?? 1));
}

const Duration = (what: string, minMs: number) =>
  z
    .string()
    .trim()
    .refine((v) => {
      const ms = durationMs(v);
      return ms !== undefined && ms >= minMs;
    }, `expected ${what} such as 30s, 15m, 1h or 2d (at least ${minMs / 1000}s)`);

export function validTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/** Five or six cron fields (Temporal's cron dialect); the server checks the rest. */
const Cron = z
  .string()
  .trim()
  .min(1)
  .max(200)
  .refine((c) => /^@(yearly|annually|monthly|weekly|daily|hourly|every\s+\S+)$/.test(c) || (c.split(/\s+/).length >= 5 && c.split(/\s+/).length <= 7), 'expected a cron expression such as "0 9 * * 1-5"');

export const ObjectiveScheduleSchema = z
  .strictObject({
    cron: z.union([Cron, z.array(Cron).min(1).max(10)]).optional(),
    every: Duration('an interval', 1000).optional(),
    timezone: z
      .string()
      .trim()
      .refine(validTimeZone, 'expected an IANA time zone such as Europe/Berlin')
      .optional(),
    jitter: Duration('a jitter', 0).optional(),
  })
  .refine((s) => (s.cron !== undefined) !== (s.every !== undefined), 'give exactly one of cron or every');
export type ObjectiveSchedule = z.infer<typeof ObjectiveScheduleSchema>;

export const ObjectiveNameSchema = z
  .string()
  .trim()
  .regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'a name uses lowercase letters, digits, - and _ (up to 64)');

/** An absolute POSIX path without `.`, `..`, repeated or trailing slashes (no I/O: symlinks stay). */
export function normalizeAbsolutePath(p: string): string {
  const out: string[] = [];
  for (const seg of p.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') out.pop();
    else out.push(seg);
  }
  return `/${out.join('/')}`;
}

/** Directories a watch may never point at (nor under): kernel and device trees. */
const FORBIDDEN_WATCH_ROOTS = ['/proc', '/sys', '/dev'];

/** Why a (normalised, absolute) directory may not be watched; undefined when it may. No I/O. */
export function watchPathRefusal(p: string): string | undefined {
  if (p === '/') return 'the root directory cannot be watched';
  const hit = FORBIDDEN_WATCH_ROOTS.find((r) => p === r || p.startsWith(`${r}/`));
  return hit ? `${hit} cannot be watched` : undefined;
}

/** A workspace directory to watch: absolute, normalised (no trailing slash), never /, /proc, /sys or /dev. */
export const WatchPathSchema = z
  .string()
  .trim()
  .min(1)
  .max(1024)
  .refine((p) => !p.includes('\0'), 'the path contains a NUL byte')
  .refine((p) => p.startsWith('/'), 'expected an absolute directory path such as /srv/workspace')
  .transform(normalizeAbsolutePath)
  .refine((p) => watchPathRefusal(p) === undefined, { error: (i) => watchPathRefusal(normalizeAbsolutePath(String(i.input))) ?? 'this path cannot be watched' });

/** An inbound email address (stored lower-case): the objective runs on mail to it. */
export const InboundEmailSchema = z
  .string()
  .trim()
  .max(254)
  .toLowerCase()
  .pipe(z.email('expected an email address such as ops@steward.example.com'));

/** Webhook secrets are read only from variables with this prefix: never Steward's own settings (the API token, model keys) nor the host's (HOME, PATH). */
export const HOOK_SECRET_PREFIX = 'STEWARD_HOOK_';
/** The shortest webhook secret taken, in bytes: a short one can be guessed offline from one signed request. */
export const MIN_HOOK_SECRET_BYTES = 32;

/** `env:STEWARD_HOOK_<NAME>`: the variable that holds an objective's webhook secret. */
export const WebhookSecretRefSchema = z
  .string()
  .trim()
  .regex(
    new RegExp(`^env:${HOOK_SECRET_PREFIX}[A-Z0-9_]{1,100}$`),
    `expected env:${HOOK_SECRET_PREFIX}<NAME> (a webhook secret is read only from a variable whose name starts with ${HOOK_SECRET_PREFIX}, never from another one such as HOME or STEWARD_API_TOKEN)`,
  )
  .superRefine((ref, ctx) => {
    const why = referenceRefusal(ref, 'hook');
    if (why) ctx.addIssue({ code: 'custom', message: why });
  });

export const WebhookSchema = z.strictObject({ secretRef: WebhookSecretRefSchema });

/** The variable a (valid) secret reference names: `env:STEWARD_HOOK_X` -> `STEWARD_HOOK_X`. */
export function hookSecretVariable(secretRef: string): string | undefined {
  const parsed = WebhookSecretRefSchema.safeParse(secretRef);
  return parsed.success ? parsed.data.slice('env:'.length) : undefined;
}

/** Why the value of a webhook secret variable cannot be used; undefined when it can. No I/O. */
export function hookSecretProblem(variable: string, value: string | undefined): string | undefined {
  if (value === undefined || value === '') return `the variable ${variable} is not set (set it to a random secret of at least ${MIN_HOOK_SECRET_BYTES} bytes, e.g. openssl rand -hex 32)`;
  const bytes = new TextEncoder().encode(value).length;
  if (bytes < MIN_HOOK_SECRET_BYTES) return `the variable ${variable} holds ${bytes} bytes: a webhook secret needs at least ${MIN_HOOK_SECRET_BYTES} (e.g. openssl rand -hex 32)`;
  return undefined;
}

/** `POST /api/v1/objectives`. */
export const NewObjectiveSchema = z.strictObject({
  name: ObjectiveNameSchema,
  prompt: z.string().trim().min(1, 'the prompt is empty').max(8000),
  chatId: z.string().trim().min(1).max(128).regex(/^[A-Za-z0-9._@+=-]+$/, 'only letters, digits and . _ @ + = - are allowed'),
  /** Where results go: an HTTP chat by default, or a bound Telegram/Discord chat. */
  platform: z.enum(['http', 'telegram', 'discord']).default('http'),
  account: z.string().trim().min(1).max(128).optional(),
  /** Absent: the objective runs on events (webhook) and triggers only. */
  schedule: ObjectiveScheduleSchema.optional(),
  /** Event trigger: a signed HTTP call or a repository push webhook, with the shared secret by reference. */
  webhook: WebhookSchema.optional(),
  /** Event trigger: a file changed in this workspace directory (absolute; watched recursively, .git/ ignored). */
  watch: z.strictObject({ path: WatchPathSchema }).optional(),
  /** Event trigger: an email to this address reached Steward's inbound SMTP listener. */
  inboundEmail: InboundEmailSchema.optional(),
  overlap: z.enum(OVERLAP_POLICIES).default('skip'),
  catchupWindow: Duration('a catch-up window', 10_000).default('1h'),
  pauseOnFailure: z.boolean().default(false),
  model: ModelRefSchema.optional(),
  paused: z.boolean().default(false),
}).refine(
  (o) => o.schedule !== undefined || o.webhook !== undefined || o.watch !== undefined || o.inboundEmail !== undefined,
  'give a schedule or at least one trigger (webhook, watch, inboundEmail)',
);
export type NewObjective = z.infer<typeof NewObjectiveSchema>;

/** `PATCH /api/v1/objectives/{id}`: any of the settings. */
export const ObjectivePatchSchema = z
  .strictObject({
    prompt: z.string().trim().min(1).max(8000).optional(),
    schedule: ObjectiveScheduleSchema.optional(),
    overlap: z.enum(OVERLAP_POLICIES).optional(),
    catchupWindow: Duration('a catch-up window', 10_000).optional(),
    pauseOnFailure: z.boolean().optional(),
    model: ModelRefSchema.optional(),
    /** A new watched directory, or null to stop watching. */
    watch: z.strictObject({ path: WatchPathSchema }).nullable().optional(),
    /** A new inbound address, or null to take no more email. */
    inboundEmail: InboundEmailSchema.nullable().optional(),
    /** A new webhook secret reference (rotation), or null to take no more webhook calls. */
    webhook: WebhookSchema.nullable().optional(),
  })
  .refine((p) => Object.keys(p).length > 0, 'nothing to change');
export type ObjectivePatch = z.infer<typeof ObjectivePatchSchema>;

/** `POST /api/v1/objectives/{id}/backfill`: the runs a time range would have had. */
export const BackfillSchema = z
  .strictObject({
    start: z.iso.datetime({ offset: true }),
    end: z.iso.datetime({ offset: true }),
    overlap: z.enum(OVERLAP_POLICIES).default('allow-all'),
  })
  .refine((b) => Date.parse(b.start) < Date.parse(b.end), 'start must be before end')
  .refine((b) => Date.parse(b.end) - Date.parse(b.start) <= 366 * 86_400_000, 'at most a year at a time');

/** The run's workflow id prefix; Temporal appends the scheduled time, so a run is never doubled. */
export function objectiveRunWorkflowId(objectiveId: string): string {
  return `objective-run:${objectiveId}`;
}

export function objectiveScheduleId(objectiveId: string): string {
  return `objective:${objectiveId}`;
}

/** An event id as senders give it (GitHub's delivery id, a caller's id): bounded, printable. */
export const EventIdSchema = z.string().trim().regex(/^[A-Za-z0-9._:-]{1,128}$/, 'an event id is 1-128 letters, digits and . _ : -');

/** GitHub's `X-GitHub-Event` (not signed by GitHub): an event name such as push or pull_request, nothing else. */
export const GithubEventNameSchema = z.string().regex(/^[a-z_]{1,64}$/, 'an event name is 1-64 lowercase letters and _ (such as push)');

/** `X-Steward-Timestamp`: when the sender signed, in unix seconds. */
export const HookTimestampSchema = z.string().trim().regex(/^\d{1,12}$/, 'expected the signing time in unix seconds (such as 1767225600)').transform(Number);

/** How far `X-Steward-Timestamp` may be from Steward's clock by default. */
export const DEFAULT_HOOK_TOLERANCE_MS = 5 * 60_000;

/**
 * What `X-Steward-Signature` signs: the timestamp, the event id and the raw body, joined by dots.
 * The signature is `sha256=` and the hex HMAC-SHA256 of this with the objective's secret.
 */
export function hookSignedContent(timestamp: string, eventId: string, rawBody: string): string {
  return `${timestamp}.${eventId}.${rawBody}`;
}

/** The id of an event Steward observed itself (a file change, an email's Message-ID): bounded, printable, no quotes. */
export const InternalEventIdSchema = z.string().regex(/^[A-Za-z0-9._:@+=-]{1,200}$/, 'an event id is 1-200 letters, digits and . _ : @ + = -');

export interface ObjectiveRunInput {
  objectiveId: string;
  /** The event that started this run (its payload is a blob). */
  event?: { id: string; source: string; payloadHash: string };
  /** The task queue of the run's activities and its turn's (the background queue). */
  activityQueue?: string;
  maxSteps: number;
}

export interface ObjectiveRunResult {
  status: 'done' | 'skipped' | 'failed';
  turnId?: string;
  outcome?: string;
  reason?: string;
}
