/**
 * The agent-harness protocol JSON schemas (specs/agent-harness-protocol/, draft 2020-12)
 * compiled with Ajv, to check the records Steward writes: task draft, intake result, task
 * state, report.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

const dir = new URL('../../specs/agent-harness-protocol/', import.meta.url);
// ajv-formats is CommonJS: its default export arrives as the module object under ESM
const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ?? addFormatsModule) as unknown as (ajv: Ajv2020) => void;

let ajv: Ajv2020 | undefined;
function instance(): Ajv2020 {
  if (ajv) return ajv;
  ajv = new Ajv2020({ allErrors: true, strict: false });
  addFormats(ajv);
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.schema.json'))) {
    ajv.addSchema(JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as object);
  }
  return ajv;
}

export type HarnessSchema = 'task-draft' | 'intake-result' | 'task-state' | 'report' | 'audit-log';

/** The schema's errors for a record (empty when it validates). */
export function harnessErrors(schema: HarnessSchema, value: unknown): string[] {
  const validate = instance().getSchema(`https://harness.local/schemas/${schema}.schema.json`);
  if (!validate) throw new Error(`no schema ${schema}`);
  if (validate(value)) return [];
  return (validate.errors ?? []).map((e) => `${e.instancePath || '(root)'} ${e.message ?? ''}`);
}
