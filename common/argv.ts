/**
 * The one rule for the program of a command Steward runs in the sandbox (domain/sandbox.ts):
 * argv[0] is a bare program name, found on the sandbox's PATH (`sh`, `npm`), or an absolute
 * path. A path relative to the work tree (`./check.sh`, `scripts/test`) is refused, because
 * the sandbox would refuse it at every run. Registration (a repository's checks and coding
 * agent command) applies this same function, so what is accepted can run: a script of the
 * repository is registered through its interpreter (`["sh", "./check.sh"]`).
 * Pure: no I/O, no Node imports (shared with workflow code).
 */

/** Why `argv` cannot be run by the sandbox, or undefined when its shape is runnable. */
export function argvRefusal(argv: readonly unknown[]): string | undefined {
  if (argv.length === 0) return 'argv is empty';
  for (const a of argv) {
    if (typeof a !== 'string' || a.includes('\0')) return 'argv holds a non-string or a NUL byte';
  }
  const program = argv[0] as string;
  if (program === '' || (program.includes('/') && !program.startsWith('/'))) {
    return `argv[0] must be a bare program name or an absolute path: ${JSON.stringify(program)} (a path relative to the work tree is never run; run a repository's script through its interpreter, such as ["sh", ${JSON.stringify(program || './check.sh')}])`;
  }
  return undefined;
}
