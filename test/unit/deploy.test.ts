/**
 * The container deployment, checked without a container engine: `docker-compose config`
 * validates and resolves docker-compose.yml (Debian's docker-compose; ./steward test installs it), and
 * the resolved services are inspected: Temporal with PostgreSQL, the UI pointed at Steward's
 * codec endpoint, Steward's database, and Steward as an API service plus worker services by
 * queue role that can scale (no fixed names or host ports). The Dockerfile is read for its
 * stages: production dependencies only, a prebuilt workflow bundle, a non-root user, and
 * only files that exist in the repository.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { z } from 'zod';
import { repoRoot } from '../helpers/process.js';
import { needs } from '../helpers/requirements.js';

const composeBin = [...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean).map((d) => path.join(d, 'docker-compose')), '/usr/bin/docker-compose', '/usr/local/bin/docker-compose'].find((p) => existsSync(p));
const ENV = { ...process.env, STEWARD_API_TOKEN: 'compose-token-0123456789', STEWARD_CODEC_KEYS: 'k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=' };

const Service = z.object({
  image: z.string().optional(),
  build: z.unknown().optional(),
  command: z.array(z.string()).optional(),
  environment: z.record(z.string(), z.string().nullable()).optional(),
  ports: z.array(z.unknown()).optional(),
  container_name: z.string().optional(),
  depends_on: z.unknown().optional(),
});
const Compose = z.object({ services: z.record(z.string(), Service) });

function resolvedCompose(env: NodeJS.ProcessEnv): z.infer<typeof Compose> {
  const yaml = execFileSync(composeBin!, ['-f', 'docker-compose.yml', 'config'], { cwd: repoRoot, env, encoding: 'utf8' });
  // docker-compose is Python and brings PyYAML: YAML to JSON through it
  const json = execFileSync('python3', ['-c', 'import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))'], { input: yaml, encoding: 'utf8' });
  return Compose.parse(JSON.parse(json));
}

// skipped only off CI (test/helpers/requirements.ts): with CI=true a missing docker-compose fails
describe('docker-compose.yml', { skip: await needs('docker-compose') }, () => {
  it('has docker-compose to validate with', () => assert.ok(composeBin, 'docker-compose is installed (apt-get install docker-compose)'));

  it('validates, and refuses to resolve without the API token or codec keys', () => {
    const missing = spawnSync(composeBin!, ['-f', 'docker-compose.yml', 'config', '-q'], {
      cwd: repoRoot,
      env: { ...process.env, STEWARD_API_TOKEN: '', STEWARD_CODEC_KEYS: '' },
      encoding: 'utf8',
    });
    assert.notEqual(missing.status, 0);
    assert.match(missing.stderr, /STEWARD_API_TOKEN|STEWARD_CODEC_KEYS/);
    const ok = spawnSync(composeBin!, ['-f', 'docker-compose.yml', 'config', '-q'], { cwd: repoRoot, env: ENV, encoding: 'utf8' });
    assert.equal(ok.status, 0, ok.stderr);
  });

  it('runs Temporal on PostgreSQL, the UI on the codec endpoint, and Steward by role', () => {
    const { services } = resolvedCompose(ENV);
    assert.equal(services.temporal?.environment?.DB, 'postgres12');
    assert.equal(services['temporal-ui']?.environment?.TEMPORAL_CODEC_ENDPOINT, 'http://localhost:8787/codec');
    assert.equal(services['temporal-ui']?.environment?.TEMPORAL_CODEC_INCLUDE_CREDENTIALS, 'true');
    assert.ok(services['steward-db']);
    assert.deepEqual(services.api?.command, ['api']);
    assert.equal(services.api?.environment?.STEWARD_CODEC_CORS_ORIGINS, 'http://localhost:8233');
    assert.deepEqual(services.worker?.command?.slice(0, 3), ['worker', '--queues', 'interactive,background']);
    assert.deepEqual(services['repo-worker']?.command?.slice(0, 3), ['worker', '--queues', 'repo']);
    for (const name of ['api', 'worker', 'repo-worker']) {
      const s = services[name]!;
      assert.ok(s.build, `${name} is built from the Dockerfile`);
      assert.equal(s.environment?.TEMPORAL_ADDRESS, 'temporal:7233');
      assert.match(s.environment?.DATABASE_URL ?? '', /^postgresql:\/\/.*@steward-db:5432\//);
      assert.equal(s.environment?.STEWARD_CODEC_KEYS, ENV.STEWARD_CODEC_KEYS, `${name} shares the codec keys`);
    }
    // workers scale with --scale: no fixed container name, no host port
    for (const name of ['worker', 'repo-worker']) {
      assert.equal(services[name]!.container_name, undefined);
      assert.equal(services[name]!.ports, undefined);
    }
    // the roles and flags the services use are ones `steward` accepts
    const help = execFileSync(process.execPath, ['--import', 'tsx', 'platform/main.ts', 'help'], { cwd: repoRoot, encoding: 'utf8' });
    assert.match(help, /^\s+api\s/m);
    assert.match(help, /worker \[--queues interactive,background,repo\] \[--concurrency/);
  });
});

describe('Dockerfile', () => {
  const text = readFileSync(path.join(repoRoot, 'Dockerfile'), 'utf8');
  const stages = [...text.matchAll(/^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/gim)].map((m) => ({ image: m[1], name: m[2] }));
  const finalStage = text.slice(text.lastIndexOf('\nFROM '));

  it('is multi-stage: the final stage has production dependencies, the prebuilt bundle, a non-root user', () => {
    assert.ok(stages.length >= 3, `stages: ${JSON.stringify(stages)}`);
    assert.match(text, /npm ci --omit=dev/);
    assert.match(text, /workers\/bundle\.ts generated\/workflow-bundle\.js/);
    assert.match(finalStage, /COPY --from=prod-deps \/app\/node_modules/);
    assert.match(finalStage, /STEWARD_WORKFLOW_BUNDLE=\/app\/generated\/workflow-bundle\.js/);
    assert.match(finalStage, /^USER node$/m);
    assert.doesNotMatch(finalStage, /npm ci(?! --omit=dev)/, 'no dev dependencies installed in the final stage');
  });

  it('copies only files that exist, and migrations run from production dependencies', () => {
    for (const m of finalStage.matchAll(/^COPY (?!--from)(.+) \S+$/gm)) {
      for (const src of m[1]!.split(/\s+/)) assert.ok(existsSync(path.join(repoRoot, src)), `${src} exists`);
    }
    const pkg = z.object({ dependencies: z.record(z.string(), z.string()) }).parse(JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')));
    // `migrate deploy` runs at start in the image: the prisma CLI and its offline engine are production dependencies
    for (const dep of ['prisma', '@prisma/schema-engine-wasm', 'tsx']) assert.ok(pkg.dependencies[dep], `${dep} is a production dependency`);
  });
});
