/**
 * The plan of `steward cluster` read from the real docker-compose.yml: the Temporal version, the
 * Steward processes' commands and environments (compose interpolation), the nodes' ports and
 * configuration, and the errors a bad compose file gets.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { ClusterPlanError, interpolate, nodeConfigYaml, nodePorts, processEnvironment, readComposeTopology } from '../../platform/cluster-plan.js';
import { running } from '../../platform/cluster.js';
import { repoRoot } from '../helpers/process.js';

const compose = readFileSync(path.join(repoRoot, 'docker-compose.yml'), 'utf8');

describe('cluster plan', () => {
  it('reads the Temporal version and the api, worker and repo-worker services from docker-compose.yml', () => {
    const t = readComposeTopology(compose);
    assert.match(t.temporalVersion, /^\d+\.\d+\.\d+$/);
    assert.ok(compose.includes(`temporalio/admin-tools:${t.temporalVersion}`), 'the schema tool image matches the server');
    assert.deepEqual(
      t.processes.map((p) => [p.service, p.args]),
      [
        ['api', ['api']],
        ['worker', ['worker', '--queues', 'interactive,background', '--concurrency', 'interactive=100,background=20']],
        ['repo-worker', ['worker', '--queues', 'repo', '--concurrency', 'repo=2']],
      ],
    );
    // the x-steward block is merged into each
    for (const p of t.processes) assert.equal(p.environment.STEWARD_TASK_QUEUE, 'steward-interactive');
    assert.equal(t.processes[0]!.environment.TELEGRAM_BOT_TOKEN, '${TELEGRAM_BOT_TOKEN:-}');
  });

  it('interpolates as compose does', () => {
    const env = { A: 'a', EMPTY: '' };
    assert.equal(interpolate('${A}-${B}-$A', env, 'x'), 'a--a');
    assert.equal(interpolate('${B:-dflt} ${EMPTY:-dflt} ${EMPTY-dflt}', env, 'x'), 'dflt dflt ');
    assert.equal(interpolate('$$A costs $${A}', env, 'x'), '$A costs ${A}');
    assert.throws(() => interpolate('${B:?set B please}', env, 'service api, B'), (e: Error) => e instanceof ClusterPlanError && e.message === 'service api, B: set B please');
    assert.throws(() => interpolate('${EMPTY:?}', env, 'w'), /w: EMPTY is not set/);
  });

  it("gives each process the compose environment with this machine's hosts, ports and data directory", () => {
    const [api, worker] = readComposeTopology(compose).processes;
    const site = { temporalAddress: '127.0.0.1:7253', databaseUrl: 'postgresql://s:p@127.0.0.1:5432/steward', dataDir: '/tmp/c/api', httpPort: 8787, metricsPort: 7433 };
    assert.throws(() => processEnvironment(api!, {}, site), /service api, STEWARD_API_TOKEN: set STEWARD_API_TOKEN/);
    const env = processEnvironment(api!, { STEWARD_API_TOKEN: 't'.repeat(20), STEWARD_CODEC_KEYS: 'k1:x', STEWARD_MODEL: 'openai-compatible:m' }, site);
    assert.equal(env.TEMPORAL_ADDRESS, '127.0.0.1:7253');
    assert.equal(env.DATABASE_URL, site.databaseUrl);
    assert.equal(env.STEWARD_MODEL, 'openai-compatible:m');
    assert.equal(env.STEWARD_LOG_LEVEL, 'info');
    assert.equal(env.STEWARD_CODEC_CORS_ORIGINS, 'http://localhost:8233');
    assert.equal(env.STEWARD_HTTP_PORT, '8787');
    assert.equal(env.STEWARD_METRICS_PORT, undefined, 'the api has no metrics port in compose');
    const w = processEnvironment(worker!, { STEWARD_API_TOKEN: 't'.repeat(20), STEWARD_CODEC_KEYS: 'k1:x' }, site);
    assert.equal(w.STEWARD_METRICS_PORT, '7433');
    assert.equal(w.STEWARD_METRICS_HOST, '127.0.0.1', 'loopback on one machine, not 0.0.0.0');
  });

  it('plans distinct ports per node and a valid node configuration', () => {
    const a = Object.values(nodePorts(7233, 0));
    const b = Object.values(nodePorts(7233, 1));
    assert.equal(new Set([...a, ...b]).size, a.length + b.length);
    assert.equal(nodePorts(7233, 0).frontend, 7233);
    const target = { host: '127.0.0.1', port: 5432, user: 'u', password: 'p"w', database: 'temporal' };
    const yaml = parseYaml(nodeConfigYaml({ ports: nodePorts(7233, 1), store: target, visibility: { ...target, database: 'temporal_visibility' }, dynamicConfigFile: '/x/dc.yaml', clusterAddress: '127.0.0.1:7233', shards: 4 })) as {
      persistence: { datastores: Record<string, { sql: { password: string; databaseName: string } }>; numHistoryShards: number };
      services: Record<string, { rpc: { grpcPort: number; membershipPort: number } }>;
    };
    assert.equal(yaml.persistence.numHistoryShards, 4);
    assert.equal(yaml.persistence.datastores['postgres-default']!.sql.password, 'p"w');
    assert.equal(yaml.persistence.datastores['postgres-visibility']!.sql.databaseName, 'temporal_visibility');
    assert.equal(yaml.services.frontend!.rpc.grpcPort, 7253);
    assert.equal(yaml.services.history!.rpc.membershipPort, nodePorts(7233, 1).historyMembership);
  });

  it('knows a recorded process by its pid and start time, so a reused pid is not taken for it', () => {
    const stat = readFileSync(`/proc/${process.pid}/stat`, 'utf8');
    const startedAt = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
    assert.equal(running({ pid: process.pid, started: startedAt }), true);
    assert.equal(running({ pid: process.pid, started: startedAt + 1 }), false, 'the same pid, another process');
    assert.equal(running({ pid: null, started: null }), false);
    assert.equal(running({ pid: 2 ** 22 + 7, started: null }), false, 'no such process');
  });

  it('refuses a compose file it cannot run', () => {
    assert.throws(() => readComposeTopology('services: ['), /not valid YAML/);
    assert.throws(() => readComposeTopology(compose.replace(/temporalio\/server:[0-9.]+/, 'temporalio/auto-setup:1.28')), /temporal service's image must be temporalio\/server:X\.Y\.Z \(found temporalio\/auto-setup:1\.28\)/);
    assert.throws(() => readComposeTopology(compose.replace(/\n {2}repo-worker:/, '\n  other-worker:')), /has no repo-worker service/);
  });
});
