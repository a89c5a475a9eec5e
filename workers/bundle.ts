/**
 * The workflow bundle. Development and tests bundle from source (`workflowsPath`);
 * `node --import tsx workers/bundle.ts <out.js>` writes a prebuilt bundle for production
 * workers (`STEWARD_WORKFLOW_BUNDLE`).
 */
import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';

export const workflowsPath = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));

export async function buildWorkflowBundle(): Promise<WorkflowBundleWithSourceMap> {
  return bundleWorkflowCode({ workflowsPath });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const out = process.argv[2] ?? 'generated/workflow-bundle.js';
  const bundle = await buildWorkflowBundle();
  await writeFile(out, bundle.code);
  console.log(`wrote ${out} (${Math.round(bundle.code.length / 1024)} KiB)`);
}
