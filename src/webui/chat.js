// The chat page: conversations in localStorage, replies streamed from
// /v1/chat/completions (fetch + server-sent events), Stop aborts the fetch.
// Model text is untrusted: it only ever reaches the DOM through textContent.
import { ApiError, apiFetch, mayAskAgain } from '/ui/api.js';

const $ = (id) => document.getElementById(id);
const STORE = 'cairn.conversations';
const CURRENT = 'cairn.current';
const SETTINGS = 'cairn.settings';
const SETTING_FIELDS = ['system', 'temperature', 'top-p', 'max-tokens'];
const UNTITLED = 'New conversation';

let conversations = loadConversations();
let current = conversations.find((c) => c.id === localStorage.getItem(CURRENT)) || null;
let inFlight = null; // the AbortController of the reply being streamed

function loadConversations() {
  try {
    const list = JSON.parse(localStorage.getItem(STORE) || '[]');
    return Array.isArray(list) ? list.filter((c) => c && Array.isArray(c.messages)) : [];
  } catch {
    return [];
  }
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(conversations));
    localStorage.setItem(CURRENT, current ? current.id : '');
  } catch (e) {
    showError(`The conversation could not be saved in this browser: ${e.message}`);
  }
}

function newId() {
  // randomUUID exists only in secure contexts (not plain http on a LAN address).
  return crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(16).slice(2)}`;
}

function showError(message) {
  const el = $('error');
  el.textContent = message;
  el.hidden = !message;
}

// ---- rendering ------------------------------------------------------------

// Splits text at ``` fences into prose and code parts; an unclosed fence
// (a reply still streaming) runs to the end.
export function parts(text) {
  const out = [];
  let code = null;
  let prose = [];
  const flushProse = () => {
    if (prose.length && prose.join('').trim()) out.push({ kind: 'text', text: prose.join('\n') });
    prose = [];
  };
  for (const line of text.split('\n')) {
    const fence = /^\s*```\s*([\w+#.-]*)/.exec(line);
    if (fence && code === null) {
      flushProse();
      code = { kind: 'code', lang: fence[1], lines: [] };
    } else if (fence && code !== null && line.trim() === '```') {
      out.push({ kind: 'code', lang: code.lang, text: code.lines.join('\n') });
      code = null;
    } else if (code !== null) {
      code.lines.push(line);
    } else {
      prose.push(line);
    }
  }
  flushProse();
  if (code !== null) out.push({ kind: 'code', lang: code.lang, text: code.lines.join('\n') });
  return out;
}

function renderContent(el, text) {
  const nodes = parts(text).map((p) => {
    if (p.kind === 'text') {
      const para = document.createElement('p');
      para.textContent = p.text;
      return para;
    }
    const pre = document.createElement('pre');
    const code = document.createElement('code');
    if (p.lang) {
      pre.dataset.lang = p.lang;
      pre.setAttribute('aria-label', `${p.lang} code`);
    }
    code.textContent = p.text;
    pre.append(code);
    return pre;
  });
  el.replaceChildren(...nodes);
}

// A reasoning model's thinking (reasoning_content), folded away.
function reasoningView(text) {
  const details = document.createElement('details');
  details.className = 'reasoning';
  const summary = document.createElement('summary');
  summary.textContent = 'Reasoning';
  const p = document.createElement('p');
  p.textContent = text;
  details.append(summary, p);
  return details;
}

function messageView(message) {
  const article = document.createElement('article');
  article.className = `msg ${message.role}`;
  const who = document.createElement('h2');
  who.className = 'who';
  who.textContent = message.role === 'user' ? 'You' : 'Assistant';
  const body = document.createElement('div');
  body.className = 'body';
  renderContent(body, message.content);
  article.append(who);
  if (message.reasoning) article.append(reasoningView(message.reasoning));
  article.append(body);
  if (message.stopped) {
    const note = document.createElement('p');
    note.className = 'note';
    note.textContent = '(stopped)';
    article.append(note);
  }
  return { article, body };
}

function renderLog() {
  const log = $('log');
  const views = (current ? current.messages : []).map((m) => messageView(m).article);
  if (!views.length) {
    const empty = document.createElement('p');
    empty.className = 'empty';
    empty.textContent = 'Type a message below to start.';
    views.push(empty);
  }
  log.replaceChildren(...views);
  log.scrollTop = log.scrollHeight;
}

function renderList() {
  const list = $('conversations');
  list.replaceChildren(
    ...conversations.map((c) => {
      const li = document.createElement('li');
      const open = document.createElement('button');
      open.type = 'button';
      open.className = 'open';
      open.textContent = c.title || UNTITLED;
      if (current && c.id === current.id) open.setAttribute('aria-current', 'true');
      open.addEventListener('click', () => selectConversation(c.id));
      const del = document.createElement('button');
      del.type = 'button';
      del.className = 'delete';
      del.textContent = 'Delete';
      del.setAttribute('aria-label', `Delete conversation: ${c.title || UNTITLED}`);
      del.addEventListener('click', () => deleteConversation(c.id));
      li.append(open, del);
      return li;
    }),
  );
}

function setBusy(busy) {
  $('stop').disabled = !busy;
  $('send').disabled = busy;
  $('regenerate').disabled = busy;
  $('edit-last').disabled = busy;
  $('log').setAttribute('aria-busy', busy ? 'true' : 'false');
}

// ---- conversations --------------------------------------------------------

function newConversation() {
  if (inFlight) return;
  current = { id: newId(), title: UNTITLED, messages: [], updated: Date.now() };
  conversations.unshift(current);
  save();
  renderList();
  renderLog();
  $('prompt').focus();
}

function selectConversation(id) {
  if (inFlight) return;
  current = conversations.find((c) => c.id === id) || null;
  save();
  renderList();
  renderLog();
  showError('');
  closeListOnNarrow();
}

function deleteConversation(id) {
  if (inFlight && current && current.id === id) inFlight.abort();
  conversations = conversations.filter((c) => c.id !== id);
  if (current && current.id === id) current = conversations[0] || null;
  save();
  renderList();
  renderLog();
}

// ---- talking to the server ------------------------------------------------

// The data fields of server-sent events, as they arrive.
async function* sseData(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).replace(/^ /, ''))
          .join('\n');
        if (data) yield data;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function numberField(id) {
  const v = $(id).value.trim();
  const n = Number(v);
  return v === '' || !Number.isFinite(n) ? undefined : n;
}

async function reply() {
  const conv = current;
  const answer = { role: 'assistant', content: '' };
  const { article, body } = messageView(answer);
  const log = $('log');
  log.querySelector('.empty')?.remove();
  log.append(article);
  showError('');
  mayAskAgain();
  setBusy(true);
  const controller = new AbortController();
  inFlight = controller;
  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  for (const m of conv.messages) messages.push({ role: m.role, content: m.content });
  const request = {
    model: $('model').value || undefined,
    messages,
    stream: true,
    temperature: numberField('temperature'),
    top_p: numberField('top-p'),
    max_tokens: numberField('max-tokens'),
  };
  try {
    const response = await apiFetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(request),
      signal: controller.signal,
    });
    for await (const data of sseData(response.body)) {
      if (data === '[DONE]') break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new ApiError(chunk.error.message || 'the server reported an error', 0);
      const delta = chunk.choices?.[0]?.delta || {};
      if (delta.reasoning_content) {
        answer.reasoning = (answer.reasoning || '') + delta.reasoning_content;
        const view = reasoningView(answer.reasoning);
        const shown = article.querySelector('.reasoning');
        if (shown) {
          view.open = shown.open;
          shown.replaceWith(view);
        } else {
          body.before(view);
        }
      }
      if (delta.content) {
        answer.content += delta.content;
        renderContent(body, answer.content);
      }
      log.scrollTop = log.scrollHeight;
    }
  } catch (e) {
    if (e.name === 'AbortError') answer.stopped = true;
    else showError(e instanceof ApiError || e instanceof SyntaxError ? e.message : `The request failed: ${e.message}`);
  } finally {
    if (inFlight === controller) inFlight = null;
    setBusy(false);
    if (answer.content || answer.reasoning || answer.stopped) conv.messages.push(answer);
    conv.updated = Date.now();
    save();
    if (conv === current) renderLog();
  }
}

async function send(text) {
  if (inFlight || !text.trim()) return;
  if (!current) newConversation();
  current.messages.push({ role: 'user', content: text });
  if (current.title === UNTITLED) current.title = text.trim().split('\n')[0].slice(0, 48);
  // The conversation talked in last goes to the top of the list.
  conversations = [current, ...conversations.filter((c) => c !== current)];
  save();
  renderList();
  renderLog();
  await reply();
}

function regenerate() {
  if (inFlight || !current || !current.messages.length) return;
  if (current.messages.at(-1).role === 'assistant') current.messages.pop();
  if (!current.messages.length) return;
  renderLog();
  reply();
}

function editLast() {
  if (inFlight || !current) return;
  const i = current.messages.map((m) => m.role).lastIndexOf('user');
  if (i < 0) return;
  const text = current.messages[i].content;
  current.messages.splice(i);
  save();
  renderLog();
  const prompt = $('prompt');
  prompt.value = text;
  prompt.focus();
}

async function loadModels() {
  const select = $('model');
  try {
    const response = await apiFetch('/v1/models');
    const list = (await response.json()).data || [];
    const wanted = JSON.parse(localStorage.getItem(SETTINGS) || '{}').model;
    select.replaceChildren(
      ...list.map((m) => {
        const option = document.createElement('option');
        option.value = m.id;
        option.textContent = m.max_model_len ? `${m.id} (context ${m.max_model_len})` : m.id;
        return option;
      }),
    );
    if (list.some((m) => m.id === wanted)) select.value = wanted;
  } catch (e) {
    const option = document.createElement('option');
    option.value = '';
    option.textContent = '(server default)';
    select.replaceChildren(option);
    showError(`Could not list the models: ${e.message}`);
  }
}

// ---- settings and wiring --------------------------------------------------

function loadSettings() {
  let s = {};
  try {
    s = JSON.parse(localStorage.getItem(SETTINGS) || '{}');
  } catch {}
  for (const id of SETTING_FIELDS) if (typeof s[id] === 'string') $(id).value = s[id];
}

function saveSettings() {
  const s = { model: $('model').value };
  for (const id of SETTING_FIELDS) s[id] = $(id).value;
  localStorage.setItem(SETTINGS, JSON.stringify(s));
}

function closeListOnNarrow() {
  document.body.classList.remove('list-open');
  $('toggle-list').setAttribute('aria-expanded', 'false');
}

function wire() {
  const prompt = $('prompt');
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = prompt.value;
    if (!text.trim() || inFlight) return;
    prompt.value = '';
    send(text);
  });
  prompt.addEventListener('keydown', (e) => {
    // Enter sends; Shift+Enter (and IME composition) keeps typing.
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => inFlight?.abort());
  $('regenerate').addEventListener('click', regenerate);
  $('edit-last').addEventListener('click', editLast);
  $('new-chat').addEventListener('click', newConversation);
  $('toggle-list').addEventListener('click', () => {
    const open = document.body.classList.toggle('list-open');
    $('toggle-list').setAttribute('aria-expanded', String(open));
  });
  for (const id of ['model', ...SETTING_FIELDS]) $(id).addEventListener('change', saveSettings);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && inFlight) inFlight.abort();
  });
}

loadSettings();
wire();
renderList();
renderLog();
setBusy(false);
loadModels();
