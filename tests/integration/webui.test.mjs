// The chat page in Chromium (Debian's, driven by puppeteer-core): it loads
// without a key, streams a reply, Stop cancels the request on the server,
// conversations survive a reload, model text is never HTML, and a server with
// --api-key makes the page ask for the key. Writes build/webui-chat.png.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { repoRoot, sharedDir, skipReason, startServer, waitFor } from './helpers.mjs';

// stories260K ends its stories within its 128-token context in a fraction of a
// second; this random-weight model runs on for seconds, long enough to press Stop.
const slowModel = path.join(sharedDir, 'models', 'syn-llama-gqa-f32.gguf');
const chromiumPath = process.env.CAIRN_CHROMIUM || '/usr/bin/chromium';

// Starts headless Chromium; returns { browser } or { reason } saying why not.
async function launchChromium() {
  let puppeteer;
  try {
    const require = createRequire(path.join(repoRoot, 'package.json'));
    puppeteer = (await import(require.resolve('puppeteer-core'))).default;
  } catch (e) {
    return { reason: `puppeteer-core is not installed (run scripts/install-node-deps.sh): ${e.message}` };
  }
  try {
    const browser = await puppeteer.launch({
      executablePath: chromiumPath,
      headless: true,
      // Chromium's sandbox refuses to start as root (containers, CI).
      args: process.getuid?.() === 0 ? ['--no-sandbox'] : [],
    });
    return { browser };
  } catch (e) {
    return { reason: `Chromium at ${chromiumPath} could not be launched (apt-get install chromium): ${e.message.split('\n')[0]}` };
  }
}

let skip = skipReason();
let browser = null;
if (!skip) {
  const launched = await launchChromium();
  browser = launched.browser ?? null;
  if (launched.reason) {
    // On CI a missing browser is a failure, not a silent skip.
    if (process.env.CI) throw new Error(`webui test: ${launched.reason}`);
    skip = `skipped: ${launched.reason}`;
  }
}

// A series' value on /metrics (0 when absent).
async function series(url, prefix, headers = {}) {
  const text = await (await fetch(`${url}/metrics`, { headers })).text();
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}
// The count of chat requests the server ended as cancelled (status 499).
const cancelledChats = (url, headers = {}) =>
  series(url, 'cairn_http_requests_total{route="/v1/chat/completions",status="499"}', headers);

async function openChat(context, url) {
  const page = await context.newPage();
  await page.setViewport({ width: 1000, height: 720 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    // A CSP violation is reported on the console: the page must cause none.
    if (/Content Security Policy/i.test(m.text())) errors.push(m.text());
  });
  const response = await page.goto(`${url}/`, { waitUntil: 'domcontentloaded' });
  assert.ok([200, 304].includes(response.status()), `GET / answered ${response.status()}`);
  page.errors = errors;
  return page;
}

async function setField(page, selector, value) {
  await page.$eval(selector, (el, v) => {
    el.value = v;
    el.dispatchEvent(new Event('change'));
  }, value);
}

async function waitIdle(page, timeout = 20000) {
  await page.waitForFunction(
    () => document.getElementById('stop').disabled && document.getElementById('log').getAttribute('aria-busy') === 'false',
    { timeout });
}

describe('web UI: the chat page in Chromium', { skip: skip ?? false }, () => {
  let server;
  let context;
  before(async () => {
    server = await startServer();
    context = await browser.createBrowserContext();
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('the page loads without a key, lists the model and streams a reply', async () => {
    const page = await openChat(context, server.url);
    await page.waitForFunction(() => [...document.querySelectorAll('#model option')].some((o) => o.value === 'stories260K'));
    await setField(page, '#max-tokens', '80');
    await setField(page, '#temperature', '0');
    // Every change the stream makes to the reply, with the text length then.
    await page.evaluate(() => {
      window.seen = [];
      const log = document.getElementById('log');
      new MutationObserver(() => {
        const body = log.querySelector('.msg.assistant:last-of-type .body');
        if (log.getAttribute('aria-busy') === 'true' && body) window.seen.push(body.textContent.length);
      }).observe(log, { subtree: true, childList: true, characterData: true });
    });
    await page.type('#prompt', 'Once upon a time');
    await page.keyboard.press('Enter');  // sends at once: the page is busy from here
    await waitIdle(page);
    const seen = await page.evaluate(() => window.seen);
    const final = await page.$eval('#log .msg.assistant .body', (el) => el.textContent);
    assert.ok(final.length > 20, `a reply of some length (got ${JSON.stringify(final)})`);
    const partial = new Set(seen.filter((n) => n > 0 && n < final.length));
    assert.ok(partial.size >= 2, `at least two partial renders before the end (lengths ${seen.join(',')})`);
    assert.equal(await page.$eval('#prompt', (el) => el.value), '', 'the box is emptied on send');
    assert.equal(await page.$eval('#log .msg.user .body', (el) => el.textContent), 'Once upon a time');
    mkdirSync(path.join(repoRoot, 'build'), { recursive: true });
    await page.screenshot({ path: path.join(repoRoot, 'build', 'webui-chat.png') });
    assert.deepEqual(page.errors, []);
    await page.close();
  });

  test('Stop aborts a long reply and the server counts the request cancelled', {
    skip: existsSync(slowModel) ? false : `skipped: ${slowModel} is not available`,
  }, async () => {
    const slow = await startServer([], { model: slowModel });
    try {
      await stopLongReply(slow.url);
    } finally {
      await slow.stop();
    }
  });

  async function stopLongReply(url) {
    const page = await openChat(context, url);
    await page.waitForFunction(() => document.querySelector('#model option[value="syn-llama-gqa-f32"]'));
    await setField(page, '#max-tokens', '');  // no limit: until the context is full
    await setField(page, '#temperature', '1');
    const before = await cancelledChats(url);
    const engineBefore = await series(url, 'cairn_requests_cancelled_total');
    await page.click('#new-chat');
    await page.type('#prompt', 'Tell me a long story');
    await page.click('#send');
    await page.waitForFunction(() => (document.querySelector('#log .msg.assistant .body')?.textContent.length ?? 0) > 0);
    await page.click('#stop');
    await waitIdle(page);
    assert.equal(await page.$eval('#log .msg.assistant .note', (el) => el.textContent), '(stopped)');
    await waitFor(async () => (await cancelledChats(url)) === before + 1, 10000,
      'cairn_http_requests_total{route="/v1/chat/completions",status="499"} to go up by one');
    // The engine dropped the sequence and gave its KV blocks back.
    await waitFor(async () => (await series(url, 'cairn_requests_cancelled_total')) === engineBefore + 1,
      10000, 'cairn_requests_cancelled_total to go up by one');
    await waitFor(async () => (await series(url, 'cairn_requests_running')) === 0, 10000,
      'no request left running');
    await page.close();
  }

  test('an error is shown in the API\'s words', async () => {
    const page = await openChat(context, server.url);
    await page.waitForFunction(() => document.querySelector('#model option[value="stories260K"]'));
    await setField(page, '#max-tokens', '100000');
    await page.click('#new-chat');
    await page.type('#prompt', 'Hello');
    // Shift+Enter is a new line, not a send.
    await page.keyboard.down('Shift');
    await page.keyboard.press('Enter');
    await page.keyboard.up('Shift');
    await page.type('#prompt', 'there');
    assert.equal(await page.$eval('#prompt', (el) => el.value), 'Hello\nthere');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => !document.getElementById('error').hidden);
    const error = await page.$eval('#error', (el) => el.textContent);
    assert.match(error, /max_tokens is 100000.*more than the context/);
    await setField(page, '#max-tokens', '64');
    await page.close();
  });

  test('conversations survive a reload; model text is shown as text and code', async () => {
    const page = await openChat(context, server.url);
    await page.waitForSelector('#conversations li');
    const titles = await page.$$eval('#conversations .open', (els) => els.map((e) => e.textContent));
    assert.ok(titles.includes('Once upon a time'), `the first conversation is listed (${titles})`);
    // Select it: its messages come back from localStorage.
    const buttons = await page.$$('#conversations .open');
    await buttons[titles.indexOf('Once upon a time')].click();
    assert.equal(await page.$eval('#log .msg.user .body', (el) => el.textContent), 'Once upon a time');
    // A stored reply with markup and a fence: markup stays text, the fence becomes code.
    await page.evaluate(() => {
      const list = JSON.parse(localStorage.getItem('cairn.conversations'));
      list.unshift({ id: 'x', title: 'markup', updated: 0, messages: [
        { role: 'user', content: 'show code' },
        { role: 'assistant', content: 'Here <img src=x onerror="window.pwned=1"> it is:\n```js\nif (a < b) alert(1);\n```\nbye <b>bold</b>' },
      ] });
      localStorage.setItem('cairn.conversations', JSON.stringify(list));
      localStorage.setItem('cairn.current', 'x');
    });
    await page.reload({ waitUntil: 'domcontentloaded' });
    await page.waitForSelector('#log .msg.assistant pre code');
    const shown = await page.$eval('#log .msg.assistant .body', (el) => ({
      code: el.querySelector('pre code').textContent,
      lang: el.querySelector('pre').dataset.lang,
      elements: [...el.querySelectorAll('*')].map((e) => e.tagName.toLowerCase()),
      text: el.textContent,
    }));
    assert.equal(shown.code, 'if (a < b) alert(1);');
    assert.equal(shown.lang, 'js');
    assert.deepEqual(shown.elements, ['p', 'pre', 'code', 'p']);
    assert.ok(shown.text.includes('<img src=x'), 'markup is shown as text');
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    // Delete it: gone from the list and from storage.
    await page.click('#conversations li:first-child .delete');
    const after = await page.evaluate(() => JSON.parse(localStorage.getItem('cairn.conversations')).map((c) => c.title));
    assert.ok(!after.includes('markup'));
    await page.close();
  });

  test('a server with --api-key: the page asks for the key, then works', async () => {
    const keyed = await startServer(['--api-key', 'webui-secret']);
    const fresh = await browser.createBrowserContext();
    try {
      const page = await openChat(fresh, keyed.url);  // the page itself needs no key
      await page.waitForSelector('#key-dialog[open]');
      await page.type('#api-key', 'webui-secret');
      await page.click('#key-save');
      await page.waitForFunction(() => document.querySelector('#model option[value="stories260K"]'));
      await setField(page, '#max-tokens', '16');
      await page.type('#prompt', 'Hi');
      await page.keyboard.press('Enter');
      await waitIdle(page);
      const reply = await page.$eval('#log .msg.assistant .body', (el) => el.textContent);
      assert.ok(reply.length > 0, 'a reply with the key');
      assert.equal(await page.$eval('#error', (el) => el.hidden), true);
      assert.equal(await page.evaluate(() => localStorage.getItem('cairn.apiKey')), 'webui-secret');
      // Regenerate replaces the reply; edit-last puts the question back in the box.
      await page.click('#regenerate');
      await waitIdle(page);
      assert.equal(await page.$$eval('#log .msg', (els) => els.map((e) => e.className).join()), 'msg user,msg assistant');
      await page.click('#edit-last');
      assert.equal(await page.$eval('#prompt', (el) => el.value), 'Hi');
      assert.equal(await page.$$eval('#log .msg', (els) => els.length), 0);
      // The status page uses the stored key too.
      await page.goto(`${keyed.url}/ui/status`, { waitUntil: 'domcontentloaded' });
      await page.waitForFunction(() => /^\d+$/.test(document.getElementById('s-ctx').textContent));
      assert.equal(await page.$eval('#s-model', (el) => el.textContent), 'stories260K');
      assert.deepEqual(page.errors, []);
    } finally {
      await fresh.close();
      await keyed.stop();
    }
  });

  test('unknown /ui files are 404; assets carry CSP and ETag, 304 when unchanged', async () => {
    assert.equal((await fetch(`${server.url}/ui/nope.js`)).status, 404);
    const js = await fetch(`${server.url}/ui/chat.js`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get('content-type'), /^text\/javascript/);
    assert.match(js.headers.get('content-security-policy'), /default-src 'self'/);
    const etag = js.headers.get('etag');
    assert.ok(etag);
    const again = await fetch(`${server.url}/ui/chat.js`, { headers: { 'If-None-Match': etag } });
    assert.equal(again.status, 304);
  });
});
