// Shared by the chat and status pages: the API key (asked for on 401, kept in
// localStorage) and fetch with it; errors carry the API's own message.

const KEY_STORAGE = 'cairn.apiKey';

export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) || '';
}

let asking = null; // the open dialog's promise: concurrent 401s share one dialog
let declined = false; // cancelled once: later 401s fail without asking again

// A user's action (sending a message) may ask again after a cancel.
export function mayAskAgain() {
  declined = false;
}

// Shows the page's key dialog; resolves to the key typed, or '' if cancelled.
export function askForKey(message) {
  if (declined) return Promise.resolve('');
  if (!asking) asking = showKeyDialog(message).finally(() => (asking = null));
  return asking;
}

// The key dialog, made once on the page that first needs it (both pages
// share this markup; the ids are what the tests and the styles look for).
function keyDialog() {
  let dialog = document.getElementById('key-dialog');
  if (dialog) return dialog;
  dialog = document.createElement('dialog');
  dialog.id = 'key-dialog';
  dialog.setAttribute('aria-labelledby', 'key-title');
  dialog.innerHTML = `<form>
    <h2 id="key-title">API key</h2>
    <p id="key-note"></p>
    <label for="api-key">API key</label>
    <input id="api-key" type="password" autocomplete="off">
    <div class="actions">
      <button type="submit" id="key-save">Save</button>
      <button type="button" data-cancel>Cancel</button>
    </div>
  </form>`;
  document.body.append(dialog);
  return dialog;
}

function showKeyDialog(message) {
  const dialog = keyDialog();
  const input = dialog.querySelector('#api-key');
  const note = dialog.querySelector('#key-note');
  if (note) note.textContent = message || 'This server needs an API key.';
  input.value = apiKey();
  return new Promise((resolve) => {
    const form = dialog.querySelector('form');
    const finish = (key) => {
      form.removeEventListener('submit', onSubmit);
      dialog.removeEventListener('cancel', onCancel);
      cancelButton.removeEventListener('click', onCancel);
      if (dialog.open) dialog.close();
      resolve(key);
    };
    const onSubmit = (e) => {
      e.preventDefault();
      const key = input.value.trim();
      if (key) localStorage.setItem(KEY_STORAGE, key);
      else declined = true;
      finish(key);
    };
    const onCancel = (e) => {
      e.preventDefault();
      declined = true;
      finish('');
    };
    const cancelButton = dialog.querySelector('[data-cancel]');
    form.addEventListener('submit', onSubmit);
    dialog.addEventListener('cancel', onCancel);
    cancelButton.addEventListener('click', onCancel);
    dialog.showModal();
    input.focus();
  });
}

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

// The error message of a failed response: the API's {"error": {"message"}}
// when it sent one, else the status line.
export async function errorMessage(response) {
  const text = await response.text().catch(() => '');
  try {
    const body = JSON.parse(text);
    const msg = body?.error?.message ?? body?.error_msg ?? body?.error;
    if (typeof msg === 'string' && msg) return msg;
  } catch {}
  return `HTTP ${response.status} ${response.statusText}`.trim();
}

// fetch with the stored key; on 401 asks for a key once and retries.
// Resolves to an OK response; throws ApiError otherwise.
export async function apiFetch(path, init = {}) {
  for (let attempt = 0; ; attempt++) {
    const headers = new Headers(init.headers || {});
    const key = apiKey();
    if (key) headers.set('Authorization', `Bearer ${key}`);
    const response = await fetch(path, { ...init, headers });
    if (response.ok) return response;
    const message = await errorMessage(response);
    if (response.status === 401 && attempt === 0) {
      const typed = await askForKey(`The server answered: ${message}. Enter its API key.`);
      if (typed) continue;
    }
    throw new ApiError(message, response.status);
  }
}
