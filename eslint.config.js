/**
 * ESLint (flat config) with typescript-eslint: the rules that keep the layers apart and the
 * workflow code deterministic. `npm run lint`; the test suite runs it too (test/unit/lint.test.ts),
 * so a violation fails CI. The rules, by folder:
 *
 * - Workflow code (workflows/, and the workflows the tests and benchmarks bundle) imports only
 *   @temporalio/workflow, @temporalio/common, @opentelemetry/api, other workflow modules and the
 *   pure modules of common/ (PURE_COMMON). Types may come from anywhere (`import type` is
 *   erased).
 * - The pure modules of common/ import only zod and each other: they run inside workflows.
 * - The repository change policy (common/changes/policy.ts and common/changes/policy/) does no I/O:
 *   no Node built-ins; besides its own modules it imports only zod and the parsers it is built
 *   on (REPO_POLICY_PACKAGES: minimatch, jsdiff). Workflow code cannot import it (it is not
 *   a pure module).
 * - Nothing imports the runtime (platform/, workers/: start, workers, CLI) but the runtime
 *   itself, the tests, the benchmarks and the scripts.
 * - domain/ (the store, governance, the model client, sandbox, git) imports no activity,
 *   service, adapter or workflow: it is the library the layers above it use.
 * - Prisma queries live in domain/ only (domain/store/ has a module per aggregate; outbox,
 *   receipts, blobs, transcript, governance and actions own their tables): activities,
 *   services, adapters and the runtime call domain functions, never `db.<model>.<query>()`,
 *   `$transaction` or raw SQL, and import no value from the generated client.
 * - services/ (the application services: chat, changes, objectives) imports no adapter: the
 *   adapters call it.
 * - Adapters translate only: a file of adapters/ imports no value from a store module (types
 *   may come from anywhere). A store module is domain/store/**, and every other module of
 *   domain/ whose source runs a Prisma query (`.<model>.<query>(` for a model of
 *   prisma/models.prisma, `$transaction`, raw SQL): STORE_MODULES is computed from the source
 *   here, so a domain module that starts owning a table is covered. What an adapter needs from
 *   them it gets from a service (services/), which does the application's work.
 * - Everywhere (product, workers, tests, scripts, benchmarks): the Temporal SDK's public surface
 *   only, no import of a package's `lib/` modules (`@temporalio/<package>/lib/...`), types
 *   included. The one module that reaches SDK internals is named here (SDK_INTERNALS_MODULE,
 *   workers/sdk-internals.cjs: Steward's workflow threads, docs/performance.md); ESLint skips
 *   .cjs files, so test/unit/sdk-surface.test.ts holds every .cjs, .mjs and .js file, and every
 *   `require()` and `import()`, to the same rule.
 * (Later blocks replace an earlier block's rule for the files they name: the stricter come last.)
 * - Everywhere: no floating promises (a promise is awaited, returned, or marked `void`).
 * - Product code: no function over 150 lines (blank lines and comments not counted); the ones
 *   that were longer when the rule came carry a marked exception, to be split.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { sep } from 'node:path';
import tseslint from 'typescript-eslint';

/** The modules of common/ that workflow code may import: no I/O, no Node built-ins. */
const PURE_COMMON = ['ids', 'schemas', 'objectives', 'limits'];

/** The packages the repository change policy is built on (issue 13: well-kept code, not hand-written parsers). */
const REPO_POLICY_PACKAGES = ['zod', 'minimatch', 'diff'];

const WORKFLOW_CODE = ['workflows/**/*.ts', 'test/**/fixtures/*.ts', 'bench/floor/workflows.ts'];
const PRODUCT = ['common/**/*.ts', 'config/**/*.ts', 'domain/**/*.ts', 'workflows/**/*.ts', 'activities/**/*.ts', 'services/**/*.ts', 'adapters/**/*.{ts,tsx}'];
const RUNTIME = ['platform/**/*.ts', 'workers/**/*.ts'];

/** Folders above the store: they call domain functions, never a Prisma query of their own. */
const ABOVE_STORE = ['activities/**/*.ts', 'services/**/*.ts', 'adapters/**/*.{ts,tsx}', ...RUNTIME];

/** The Prisma models' client names (`Message` -> `message`), read from the schema so a new model is covered. */
const MODELS = [...readFileSync(new URL('./prisma/models.prisma', import.meta.url), 'utf8').matchAll(/^model (\w+) \{/gm)].map(([, m]) => m[0].toLowerCase() + m.slice(1));
const QUERIES = ['findUnique', 'findUniqueOrThrow', 'findFirst', 'findFirstOrThrow', 'findMany', 'create', 'createMany', 'createManyAndReturn', 'update', 'updateMany', 'updateManyAndReturn', 'upsert', 'delete', 'deleteMany', 'count', 'aggregate', 'groupBy'];
const STORE_MESSAGE = 'Prisma queries live in domain/ (a store module per aggregate: domain/store/, or the domain module that owns the table): call a domain function here.';
const NO_QUERIES = [
  { selector: `CallExpression > MemberExpression.callee[property.name=/^(${QUERIES.join('|')})$/] > MemberExpression.object[property.name=/^(${MODELS.join('|')})$/]`, message: STORE_MESSAGE },
  { selector: 'MemberExpression[property.name=/^\\$(transaction|queryRaw|queryRawUnsafe|executeRaw|executeRawUnsafe)$/]', message: STORE_MESSAGE },
];

/**
 * The store modules (paths under domain/, without `.ts`): domain/store/** and every domain module
 * whose source runs a Prisma query, found the way NO_QUERIES finds them above the store.
 */
const QUERY_IN_SOURCE = new RegExp(`\\.(${MODELS.join('|')})\\s*\\.\\s*(${QUERIES.join('|')})\\s*\\(|\\$(transaction|queryRaw|queryRawUnsafe|executeRaw|executeRawUnsafe)\\b`);
const STORE_MODULES = readdirSync(new URL('./domain/', import.meta.url), { recursive: true })
  .filter((f) => f.endsWith('.ts'))
  .map((f) => f.split(sep).join('/').slice(0, -'.ts'.length))
  .filter((m) => m.startsWith('store/') || QUERY_IN_SOURCE.test(readFileSync(new URL(`./domain/${m}.ts`, import.meta.url), 'utf8')))
  .sort();
const escapeRe = (t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const NO_STORE = {
  regex: `(^|/)domain/(${STORE_MODULES.map(escapeRe).join('|')})(\\.js)?$`,
  allowTypeImports: true,
  message: 'Adapters translate only: no value from a store module of domain/ (domain/store/, or a domain module that runs Prisma queries). Call a service (services/) that does the work; types may be imported.',
};
/** The generated Prisma client is the store's: types may be used above it, values not. */
const NO_GENERATED = { regex: '(^|/)generated/prisma/', allowTypeImports: true, message: STORE_MESSAGE };

const builtins = builtinModules.flatMap((m) => (m.startsWith('node:') ? [m] : [m, `node:${m}`]));

/** Nothing imports the runtime but the runtime (and tests, benchmarks, scripts). */
const NO_RUNTIME = {
  regex: '(^|/)(platform|workers)/',
  allowTypeImports: true,
  message: 'Nothing imports the runtime (platform/, workers/): pass what is needed in as a dependency.',
};

const noBuiltins = (why) => builtins.map((name) => ({ name, message: why }));

/** The one module allowed to reach the Temporal SDK's internals (its `lib/` modules). */
export const SDK_INTERNALS_MODULE = 'workers/sdk-internals.cjs';

/** A module of a Temporal SDK package's `lib/`: not its public surface (see SDK_INTERNALS_MODULE). */
export const SDK_LIB_IMPORT = {
  regex: '^@temporalio/[^/]+/lib(/|$)',
  message: `The Temporal SDK's public surface only: import from the package itself (@temporalio/<package>), not its lib/ modules; only ${SDK_INTERNALS_MODULE} reaches SDK internals.`,
};

export default tseslint.config(
  { ignores: ['node_modules/**', 'generated/**', '.data/**', 'prisma/engine-bridge/**', '**/*.cjs', '**/*.mjs', 'eslint.config.js'] },
  {
    files: ['**/*.{ts,tsx}'],
    languageOptions: {
      parser: tseslint.parser,
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    plugins: { '@typescript-eslint': tseslint.plugin },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        // node:test's describe/it return promises the runner itself tracks
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['describe', 'it', 'test', 'suite', 'before', 'after', 'beforeEach', 'afterEach'] }] },
      ],
    },
  },
  {
    // the base rule (the layers' rules below are typescript-eslint's): type imports are refused too
    files: ['**/*.{ts,tsx}'],
    ignores: [SDK_INTERNALS_MODULE],
    rules: { 'no-restricted-imports': ['error', { patterns: [SDK_LIB_IMPORT] }] },
  },
  {
    files: PRODUCT,
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: [NO_RUNTIME] }] },
  },
  {
    files: [...PRODUCT, ...RUNTIME],
    // a function a reader can hold in view; the older ones above it are marked where they start
    rules: { 'max-lines-per-function': ['error', { max: 150, skipBlankLines: true, skipComments: true, IIFEs: true }] },
  },
  {
    files: ['domain/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            NO_RUNTIME,
            {
              regex: '(^|/)(activities|services|adapters|workflows)/',
              allowTypeImports: true,
              message: 'domain/ is the library the layers above use: it imports no activity, service, adapter or workflow (types only).',
            },
          ],
        },
      ],
    },
  },
  {
    files: WORKFLOW_CODE,
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: noBuiltins('Workflow code is deterministic and has no I/O: no Node built-ins here (do the work in an activity).'),
          patterns: [
            {
              regex: '^(?!@temporalio/workflow$|@temporalio/common$|@opentelemetry/api$|\\.)',
              allowTypeImports: true,
              message: 'Workflow code imports only @temporalio/workflow, @temporalio/common and pure modules (types may come from anywhere).',
            },
            {
              regex: '(^|/)(activities|domain|adapters|platform|workers|config|generated|prisma)(/|$)',
              allowTypeImports: true,
              message: 'Workflow code calls activities through proxies: import their types only (`import type`).',
            },
            {
              regex: `(^|/)common/(?!(${PURE_COMMON.join('|')})\\.js$)`,
              allowTypeImports: true,
              message: `Workflow code imports only the pure modules of common/ (${PURE_COMMON.join(', ')}).`,
            },
          ],
        },
      ],
    },
  },
  {
    files: ['common/changes/policy.ts', 'common/changes/policy/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: noBuiltins('The repository change policy does no I/O: no Node built-ins (the caller reads and passes what it needs).'),
          patterns: [
            {
              regex: `^(?!(${REPO_POLICY_PACKAGES.join('|')})$|\\./)`,
              allowTypeImports: true,
              message: `The repository change policy imports only its own modules and ${REPO_POLICY_PACKAGES.join(', ')}.`,
            },
          ],
        },
      ],
    },
  },
  {
    files: PURE_COMMON.map((m) => `common/${m}.ts`),
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: noBuiltins('A pure module of common/ runs inside workflows: no Node built-ins.'),
          patterns: [
            {
              regex: '^(?!zod$|\\./)',
              allowTypeImports: true,
              message: 'A pure module of common/ imports only zod and other modules of common/.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['activities/**/*.ts', 'adapters/**/*.{ts,tsx}'],
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: [NO_RUNTIME, NO_GENERATED] }] },
  },
  {
    files: ['adapters/**/*.{ts,tsx}'],
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: [NO_RUNTIME, NO_GENERATED, NO_STORE] }] },
  },
  {
    files: RUNTIME,
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: [NO_GENERATED] }] },
  },
  {
    files: ['services/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            NO_RUNTIME,
            NO_GENERATED,
            {
              regex: '(^|/)adapters/',
              allowTypeImports: true,
              message: 'services/ is what the adapters call: it imports no adapter (types only).',
            },
          ],
        },
      ],
    },
  },
  {
    files: ABOVE_STORE,
    rules: { 'no-restricted-syntax': ['error', ...NO_QUERIES] },
  },
);
