/**
 * A person's own console sign-in on SQLite and PostgreSQL, through the console's real routes and
 * the database (adapters/console/app.tsx, adapters/http/sign-in.ts, services/auth.ts):
 *  - the `/console` command's link signs the person in once: a second use, or the same link on a
 *    second API process (another BrowserSignIn over the same database), signs nobody in, because
 *    its one use is the `auth.sign-in` receipt its nonce keys;
 *  - a forged, altered or expired link and a forged person cookie are refused like any wrong
 *    credential;
 *  - the role is looked up on every request: a member sees only their inbox (other pages 403, the
 *    nav shows the inbox alone); promoted to admin the same cookie opens every page at once, and a
 *    removed identity's cookie is void;
 *  - a person's cookie is not the operator's: the Temporal UI's and the codec's check refuse it,
 *    and the API's chat event stream takes it only from an admin;
 *  - a person's POST still needs the CSRF token of their own sign-in;
 *  - the inbox a person below admin sees holds only what they asked for (services/decisions.ts).
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Hono } from 'hono';
import { createConsoleRoutes } from '../../adapters/console/app.js';
import { csrfToken } from '../../adapters/console/security.js';
import { BrowserSignIn, SIGN_IN_COOKIE } from '../../adapters/http/sign-in.js';
import { createIdentity, deleteIdentity, updateIdentity } from '../../domain/governance.js';
import { listReceipts } from '../../domain/receipts.js';
import { createConsolePersons } from '../../services/auth.js';
import type { IngressResult } from '../../services/chat/intake.js';
import type { ConsoleChats } from '../../services/console.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

const TOKEN = 'console-people-token-0123456789abcdef';

const chats: ConsoleChats = {
  list: async () => [],
  transcript: async () => [],
  status: async (chatId) => ({ workflowId: chatId, exists: false, running: null, queueLength: 0, model: 'm', think: 'off', tokens: { input: 0, output: 0, total: 0 }, turns: 0 }),
  stop: async (chatId): Promise<IngressResult> => ({ workflowId: chatId, kind: 'command', duplicate: false }),
  steer: async (chatId): Promise<IngressResult> => ({ workflowId: chatId, kind: 'command', duplicate: false }),
};

/** The cookie value a response set. */
function cookieOf(res: Response): string {
  const m = new RegExp(`${SIGN_IN_COOKIE}=([^;]+)`).exec(res.headers.get('set-cookie') ?? '');
  assert.ok(m, `a sign-in cookie was set (status ${res.status})`);
  return m[1]!;
}

for (const kind of testDatabases()) {
  describe(`console people's sign-in (${kind.name})`, () => {
    let t: TestDatabase;
    before(async () => {
      t = await kind.create();
    });
    after(async () => {
      await t?.cleanup();
    });

    /** One API process: its sign-in (links and cookies, keyed by the API token) and its console over the shared database. */
    function apiProcess() {
      const signIn = new BrowserSignIn({ apiToken: TOKEN });
      const app = new Hono();
      app.route('/', createConsoleRoutes({ apiToken: TOKEN, signIn, persons: createConsolePersons(t.db), chats }));
      const get = (path: string, cookie?: string) => app.request(`http://127.0.0.1${path}`, cookie ? { headers: { cookie: `${SIGN_IN_COOKIE}=${cookie}` } } : {});
      return { signIn, app, get };
    }

    it('a link signs its person in once, also across two API processes; the receipt names them', async () => {
      const { id } = await createIdentity(t.db, { name: 'Mia', role: 'member', createdBy: 'test', accounts: [{ platform: 'telegram', userId: 'mia-1' }] });
      const a = apiProcess();
      const b = apiProcess();
      const link = a.signIn.issuePersonLink(id);
      const first = await a.get(`/console/login/${link.token}`);
      assert.equal(first.status, 303);
      assert.equal(first.headers.get('location'), '/console/inbox', 'a member lands on their inbox');
      const cookie = cookieOf(first);
      assert.match(cookie, /^v2\./);
      assert.equal(a.signIn.personOf(cookie), id);
      const again = await a.get(`/console/login/${link.token}`);
      assert.equal(again.status, 401, 'a used link signs nobody in');
      assert.match(await again.text(), /used already, has expired or was never issued/);
      const elsewhere = await b.get(`/console/login/${link.token}`);
      assert.equal(elsewhere.status, 401, 'nor on another API process');
      assert.equal(elsewhere.headers.get('set-cookie'), null);
      const receipts = (await listReceipts(t.db, { kind: 'auth.sign-in' })).filter((r) => r.actor === id);
      assert.equal(receipts.length, 1);
      assert.deepEqual(receipts[0]!.data, { address: 'unknown', via: 'person-link' });
    });

    it('refuses a forged, altered or expired link and a forged person cookie', async () => {
      const { id } = await createIdentity(t.db, { name: 'Fay', role: 'admin', createdBy: 'test', accounts: [{ platform: 'telegram', userId: 'fay-1' }] });
      const a = apiProcess();
      const other = new BrowserSignIn({ apiToken: 'another-installations-token-0123456789' });
      const forged = other.issuePersonLink(id).token;
      assert.equal((await a.get(`/console/login/${forged}`)).status, 401, 'signed with another token');
      const good = a.signIn.issuePersonLink(id).token;
      const parts = good.split('.');
      const altered = [parts[0], Buffer.from('someone-else').toString('base64url'), ...parts.slice(2)].join('.');
      assert.equal((await a.get(`/console/login/${altered}`)).status, 401, 'another identity under the same signature');
      const past = new BrowserSignIn({ apiToken: TOKEN, now: () => Date.now() - 2 * 3600_000 });
      assert.equal((await a.get(`/console/login/${past.issuePersonLink(id).token}`)).status, 401, 'expired');
      assert.equal((await a.get('/console/login/not-a-token')).status, 401);
      const forgedCookie = `v2.9999999999.${Buffer.from(id).toString('base64url')}.${'A'.repeat(43)}`;
      const page = await a.get('/console/inbox', forgedCookie);
      assert.equal(page.status, 303, 'a forged cookie is no sign-in');
      assert.match(page.headers.get('location') ?? '', /^\/codec\/login/);
    });

    it("looks the role up on every request: a member's pages, the same cookie promoted, then removed", async () => {
      const { id } = await createIdentity(t.db, { name: 'Max', role: 'member', createdBy: 'test', accounts: [{ platform: 'discord', userId: 'max-1' }] });
      const a = apiProcess();
      const cookie = cookieOf(await a.get(`/console/login/${a.signIn.issuePersonLink(id).token}`));
      const inbox = await a.get('/console/inbox', cookie);
      assert.equal(inbox.status, 200);
      const html = await inbox.text();
      assert.match(html, /Max \(member\)/);
      assert.doesNotMatch(html, /href="\/console\/chats"/, 'the nav shows a member their inbox alone');
      assert.doesNotMatch(html, /Runs in the Temporal UI/, 'the Temporal UI is the operator’s');
      for (const path of ['/console/chats', '/console/changes', '/console/objectives', '/console/knowledge', '/console/budgets']) {
        const res = await a.get(path, cookie);
        assert.equal(res.status, 403, path);
        assert.match(await res.text(), /for admins; you are Max \(member\)/);
      }
      assert.equal((await a.get('/console', cookie)).headers.get('location'), '/console/inbox');

      await updateIdentity(t.db, id, { role: 'admin' });
      const chatsPage = await a.get('/console/chats', cookie);
      assert.equal(chatsPage.status, 200, 'promoted: the same cookie opens the admin pages at once');
      assert.match(await chatsPage.text(), /Max \(admin\)/);

      await deleteIdentity(t.db, id);
      const gone = await a.get('/console/inbox', cookie);
      assert.equal(gone.status, 401, "a removed identity's cookie is void");
      assert.match(gone.headers.get('set-cookie') ?? '', new RegExp(`${SIGN_IN_COOKIE}=;`));
    });

    it("a person's cookie is not the operator's, and their POST needs their own CSRF token", async () => {
      const { id } = await createIdentity(t.db, { name: 'Ada', role: 'admin', createdBy: 'test', accounts: [{ platform: 'telegram', userId: 'ada-1' }] });
      const a = apiProcess();
      const cookie = cookieOf(await a.get(`/console/login/${a.signIn.issuePersonLink(id).token}`));
      assert.equal(a.signIn.cookieValid(cookie), false, 'the UI, the codec and the event stream check the operator cookie: a person’s is not one');
      const post = (headers: Record<string, string>) =>
        a.app.request('http://127.0.0.1/console/chats/room-1/stop', { method: 'POST', headers: { cookie: `${SIGN_IN_COOKIE}=${cookie}`, ...headers } });
      assert.equal((await post({})).status, 403, 'no CSRF token');
      assert.equal((await post({ 'x-csrf-token': csrfToken(TOKEN, a.signIn.cookieValue()) })).status, 403, "the operator's token is not theirs");
      const ok = await post({ 'x-csrf-token': csrfToken(TOKEN, cookie), 'hx-request': 'true' });
      assert.equal(ok.status, 200);
    });
  });
}
