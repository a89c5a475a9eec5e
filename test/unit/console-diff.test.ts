/**
 * The console's diff renderer (adapters/console/diff.tsx): a patch as git writes it split into
 * files, hunks and numbered lines; renames, new, deleted and binary files; a huge patch capped
 * with its note and the link to the whole patch; HTML in a patch shown as text.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DiffView, readDiff } from '../../adapters/console/diff.js';

/** Written by `git diff --cached --binary --full-index -M` in a scratch repository. */
const PATCH = `diff --git a/a.txt b/a.txt
index b00a0f1b675b8fc8b8aff62e13f2139842d025eb..f94270c84adcdbe67d5518f38672e58fdbdd9aeb 100644
--- a/a.txt
+++ b/a.txt
@@ -1,8 +1,9 @@
 one
-two
+TWO
 three
 four
 five
 six
 seven
 eight
+nine
\\ No newline at end of file
diff --git a/added.txt b/added.txt
new file mode 100644
index 0000000000000000000000000000000000000000..587be6b4c3f93f93c489c0111bba5596147a26cb
--- /dev/null
+++ b/added.txt
@@ -0,0 +1 @@
+x
diff --git a/img.bin b/img.bin
index 8352675d67aed6625ece79af41c27fdb4ee2e867..85025d98693fe77b700bcf818dfd8fcd13c4e961 100644
GIT binary patch
literal 5
McmZQzWMXCk000>P3jhEB

literal 3
KcmZQzWC8#H2LJ>B

diff --git a/old-name.txt b/new-name.txt
similarity index 74%
rename from old-name.txt
rename to new-name.txt
index 7a28df3c975fa62270a452251c4e0b24d685c4ba..600d48ac740e0e5904838e02446d117c410ec089 100644
--- a/old-name.txt
+++ b/new-name.txt
@@ -2,3 +2,4 @@ alpha
 beta
 gamma
 delta
+epsilon
`;

const html = (el: unknown) => String(el);

describe('console diff: reading a patch', () => {
  it('splits files and hunks and numbers every line on its side', () => {
    const d = readDiff(PATCH);
    assert.equal(d.capped, false);
    assert.deepEqual(
      d.files.map((f) => [f.path, f.status, f.additions, f.deletions, f.binary]),
      [
        ['a.txt', 'modified', 2, 1, false],
        ['added.txt', 'added', 1, 0, false],
        ['img.bin', 'modified', 0, 0, true],
        ['new-name.txt', 'renamed', 1, 0, false],
      ],
    );
    const [a] = d.files;
    assert.equal(a!.hunks.length, 1);
    assert.equal(a!.hunks[0]!.header, '@@ -1,8 +1,9 @@');
    const lines = a!.hunks[0]!.lines;
    assert.deepEqual(lines[0], { kind: 'ctx', text: 'one', oldNo: 1, newNo: 1 });
    assert.deepEqual(lines[1], { kind: 'del', text: 'two', oldNo: 2 });
    assert.deepEqual(lines[2], { kind: 'add', text: 'TWO', newNo: 2 });
    assert.deepEqual(lines[9], { kind: 'add', text: 'nine', newNo: 9 });
    assert.deepEqual(lines[10], { kind: 'note', text: 'No newline at end of file' });
    assert.equal(d.shownLines, 11 + 1 + 4);
    assert.equal(d.totalLines, PATCH.split('\n').length - 1);
  });

  it('reads a rename with its source, similarity and the hunk after it', () => {
    const r = readDiff(PATCH).files[3]!;
    assert.equal(r.oldPath, 'old-name.txt');
    assert.equal(r.similarity, 74);
    assert.deepEqual(r.hunks[0]!.lines.at(-1), { kind: 'add', text: 'epsilon', newNo: 5 });
    assert.deepEqual(r.hunks[0]!.lines[0], { kind: 'ctx', text: 'beta', oldNo: 2, newNo: 2 });
    // a pure rename: no hunks, drawn as such
    const pure = readDiff('diff --git a/x/old.md b/y/new.md\nsimilarity index 100%\nrename from x/old.md\nrename to y/new.md\n').files[0]!;
    assert.deepEqual([pure.path, pure.oldPath, pure.status, pure.hunks.length], ['y/new.md', 'x/old.md', 'renamed', 0]);
    assert.match(html(DiffView({ diff: readDiff('diff --git a/x/old.md b/y/new.md\nsimilarity index 100%\nrename from x/old.md\nrename to y/new.md\n') })), /x\/old\.md → y\/new\.md[\s\S]*renamed only/);
  });

  it('reads binary files (git binary patch and "Binary files differ") without drawing their bytes', () => {
    const d = readDiff(PATCH);
    assert.equal(d.files[2]!.binarySize, 5);
    assert.equal(d.files[2]!.hunks.length, 0);
    const out = html(DiffView({ diff: d }));
    assert.match(out, /Binary file \(5 bytes\): not shown\./);
    assert.doesNotMatch(out, /McmZQz/);
    const added = readDiff('diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000..1111111\nBinary files /dev/null and b/logo.png differ\n').files[0]!;
    assert.deepEqual([added.path, added.status, added.binary], ['logo.png', 'added', true]);
    const deleted = readDiff('diff --git a/old.png b/old.png\ndeleted file mode 100644\nindex 1111111..0000000\nBinary files a/old.png and /dev/null differ\n').files[0]!;
    assert.deepEqual([deleted.path, deleted.status], ['old.png', 'deleted']);
  });

  it('reads deletions, mode changes and C-quoted names', () => {
    const del = readDiff('diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\nindex 1..0\n--- a/gone.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n').files[0]!;
    assert.deepEqual([del.path, del.status, del.deletions, del.hunks[0]!.lines.map((l) => l.oldNo)], ['gone.txt', 'deleted', 2, [1, 2]]);
    const mode = readDiff('diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n').files[0]!;
    assert.deepEqual([mode.status, mode.oldMode, mode.newMode], ['mode', '100644', '100755']);
    assert.match(html(DiffView({ diff: readDiff('diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n') })), /mode 100644 → 100755/);
    const quoted = readDiff('diff --git "a/caf\\303\\251 menu.txt" "b/caf\\303\\251 menu.txt"\nnew file mode 100644\nindex 0..1\n--- /dev/null\n+++ "b/caf\\303\\251 menu.txt"\n@@ -0,0 +1 @@\n+soup\n').files[0]!;
    assert.equal(quoted.path, 'café menu.txt');
  });

  it('keeps reading when a hunk ends early, and a CRLF patch reads like an LF one', () => {
    const d = readDiff('diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\ndiff --git a/y b/y\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-1\n+2\n');
    assert.deepEqual(d.files.map((f) => f.path), ['x', 'y']);
    assert.deepEqual(d.files[1]!.hunks[0]!.lines.map((l) => l.kind), ['del', 'add']);
    const crlf = readDiff('diff --git a/x b/x\r\n--- a/x\r\n+++ b/x\r\n@@ -1,2 +1,2 @@\r\n a\r\n-b\r\n+c\r\n');
    assert.deepEqual(crlf.files[0]!.hunks[0]!.lines.map((l) => [l.kind, l.text.replace('\r', '')]), [['ctx', 'a'], ['del', 'b'], ['add', 'c']]);
    assert.deepEqual(readDiff('').files, []);
  });
});

describe('console diff: drawing it', () => {
  it('marks added, removed and context lines with classes, signs and line numbers', () => {
    const out = html(DiffView({ diff: readDiff(PATCH), rawHref: '/console/changes/chg-0123456789ab/patch' }));
    assert.match(out, /<tr class="diff-del"><td class="ln">2<\/td><td class="ln"><\/td><td class="code"><span class="sign" aria-hidden="true">-<\/span><span class="vh">removed: <\/span>two<\/td><\/tr>/);
    assert.match(out, /<tr class="diff-add"><td class="ln"><\/td><td class="ln">2<\/td><td class="code"><span class="sign" aria-hidden="true">\+<\/span><span class="vh">added: <\/span>TWO<\/td><\/tr>/);
    assert.match(out, /<tr class="diff-ctx"><td class="ln">1<\/td><td class="ln">1<\/td>/);
    assert.match(out, /<tr class="diff-hunk"><td colspan="3">@@ -1,8 \+1,9 @@<\/td><\/tr>/);
    assert.match(out, /4 files changed/);
    assert.match(out, /href="\/console\/changes\/chg-0123456789ab\/patch"/);
    assert.doesNotMatch(out, /only its first/);
    // files listed with anchors when there are several
    assert.match(out, /<a href="#file-4">new-name\.txt<\/a>/);
  });

  it('escapes HTML in paths, hunk headers and lines', () => {
    const evil = [
      'diff --git a/<img src=x onerror=alert(1)>.html b/<img src=x onerror=alert(1)>.html',
      '--- a/<img src=x onerror=alert(1)>.html',
      '+++ b/<img src=x onerror=alert(1)>.html',
      '@@ -1 +1 @@ <b>section</b>',
      '-<p>old & "quoted"</p>',
      '+<script>alert("x")</script>',
      '',
    ].join('\n');
    const out = html(DiffView({ diff: readDiff(evil) }));
    assert.doesNotMatch(out, /<script>|<img|<b>|<p>/);
    assert.match(out, /&lt;script&gt;alert\(&quot;x&quot;\)&lt;\/script&gt;/);
    assert.match(out, /&lt;p&gt;old &amp; &quot;quoted&quot;&lt;\/p&gt;/);
    assert.match(out, /&lt;img src=x onerror=alert\(1\)&gt;\.html/);
    assert.match(out, /@@ -1 \+1 @@ &lt;b&gt;section&lt;\/b&gt;/);
  });

  it('caps a huge patch by lines and by bytes, says so and links the whole patch', () => {
    const n = 50_000;
    const big = `diff --git a/big.txt b/big.txt\nnew file mode 100644\nindex 0..1\n--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1,${n} @@\n${Array.from({ length: n }, (_, i) => `+line ${i + 1}`).join('\n')}\ndiff --git a/after.txt b/after.txt\n--- a/after.txt\n+++ b/after.txt\n@@ -1 +1 @@\n-a\n+b\n`;
    const d = readDiff(big, { maxLines: 1000 });
    assert.equal(d.capped, true);
    assert.equal(d.shownLines, 1000);
    assert.equal(d.files.length, 1, 'the files after the cap are not read');
    assert.equal(d.files[0]!.hunks[0]!.lines.length, 1000);
    assert.deepEqual(d.files[0]!.hunks[0]!.lines.at(-1), { kind: 'add', text: 'line 1000', newNo: 1000 });
    assert.equal(d.totalLines, n + 6 + 6);
    const out = html(DiffView({ diff: d, rawHref: '/console/changes/chg-0123456789ab/patch' }));
    assert.match(out, /This patch is large \(50,012 lines, [\d.]+ KB\): only its first 1,000 changed lines are shown here\. <a href="\/console\/changes\/chg-0123456789ab\/patch">Download the whole patch<\/a>/);
    assert.equal((out.match(/<tr class="diff-add">/g) ?? []).length, 1000);

    // by bytes: only the first maxBytes are read, and a line cut in two is not drawn
    const byBytes = readDiff(big, { maxBytes: 4096, maxLines: 1_000_000 });
    assert.equal(byBytes.capped, true);
    assert.ok(byBytes.shownLines > 100 && byBytes.shownLines < 500, String(byBytes.shownLines));
    const last = byBytes.files[0]!.hunks[0]!.lines.at(-1)!;
    assert.equal(last.text, `line ${last.newNo}`);
    // the default cap draws a patch of 3,000 changed lines at most
    assert.equal(readDiff(big).shownLines, 3000);
  });
});
