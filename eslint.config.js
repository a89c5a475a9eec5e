/**
 * ESLint (flat config) with typescript-eslint: the rules that keep the layers apart and the
 * workflow code deterministic. `npm run lint`; CI runs it before the tests and a violation
 * fails the run. The rules, by folder:
 *
 * - Workflow code (workflows/, and the workflows the tests and benchmarks bundle) imports only
 *   @temporalio/workflow, @temporalio/common, the workflow side of the OpenTelemetry
 *   interceptors, other workflow modules and the pure modules of common/ (PURE_COMMON). Types
 *   may come from anywhere (`import type` is erased).
 * - The pure modules of common/ import only zod and each other: they run inside workflows.
 * - Nothing imports the runtime (platform/, workers/: start, workers, CLI) but the runtime
 *   itself, the tests, the benchmarks and the scripts.
 * (Later blocks replace an earlier block's rule for the files they name: the stricter come last.)
 * - Everywhere: no floating promises (a promise is awaited, returned, or marked `void`).
 */
import { builtinModules } from 'node:module';
import tseslint from 'typescript-eslint';

/** The modules of common/ that workflow code may import: no I/O, no Node built-ins. */
const PURE_COMMON = ['ids', 'schemas', 'objectives', 'limits'];

const WORKFLOW_CODE = ['workflows/**/*.ts', 'test/**/fixtures/*.ts', 'bench/floor/workflows.ts'];
const PRODUCT = ['common/**/*.ts', 'config/**/*.ts', 'workflows/**/*.ts', 'activities/**/*.ts', 'adapters/**/*.ts'];

const builtins = builtinModules.flatMap((m) => (m.startsWith('node:') ? [m] : [m, `node:${m}`]));

const noBuiltins = (why) => builtins.map((name) => ({ name, message: why }));

export default tseslint.config(
  { ignores: ['node_modules/**', 'generated/**', '.data/**', 'prisma/engine-bridge/**', '**/*.cjs', '**/*.mjs', 'eslint.config.js'] },
  {
    files: ['**/*.ts'],
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
    files: PRODUCT,
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '(^|/)(platform|workers)/',
              allowTypeImports: true,
              message: 'Nothing imports the runtime (platform/, workers/): pass what is needed in as a dependency.',
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
              regex: '^(?!@temporalio/workflow(/|$)|@temporalio/common(/|$)|@temporalio/interceptors-opentelemetry/lib/workflow(/|$)|@opentelemetry/api$|\\.)',
              allowTypeImports: true,
              message: 'Workflow code imports only @temporalio/workflow, @temporalio/common and pure modules (types may come from anywhere).',
            },
            {
              regex: '(^|/)(activities|adapters|platform|workers|config|generated|prisma)(/|$)',
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
);
