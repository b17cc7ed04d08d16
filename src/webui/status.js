// The status page: the model and its context from /v1/models, load and KV
// cache from /metrics, token rates from the difference of two scrapes.
import { apiFetch } from '/ui/api.js';

const $ = (id) => document.getElementById(id);
const PERIOD_MS = 3000;
let previous = null; // { at, generated, prompt } of the last scrape

// Sums every series of each metric name in Prometheus text (all label sets);
// cancelled requests are the HTTP requests counted with status 499.
export function parseMetrics(text) {
  const sums = new Map();
  let cancelled = 0;
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const value = Number(m[3]);
    if (!Number.isFinite(value)) continue;
    sums.set(m[1], (sums.get(m[1]) || 0) + value);
    if (m[1] === 'cairn_http_requests_total' && /status="499"/.test(m[2] || '')) cancelled += value;
  }
  return { get: (name) => sums.get(name), cancelled };
}

function show(id, value) {
  $(id).textContent = value === undefined || value === null ? '–' : String(value);
}

function rate(now, before, key) {
  const dt = (now.at - before.at) / 1000;
  return dt > 0 ? ((now[key] - before[key]) / dt).toFixed(1) : '–';
}

async function refresh() {
  try {
    const models = await (await apiFetch('/v1/models')).json();
    const metricsText = await (await apiFetch('/metrics')).text();
    const list = models.data || [];
    show('s-model', list.map((m) => m.id).join(', ') || '(none)');
    show('s-ctx', list[0]?.max_model_len);
    const m = parseMetrics(metricsText);
    show('s-running', m.get('cairn_requests_running'));
    show('s-waiting', m.get('cairn_requests_waiting'));
    const used = m.get('cairn_kv_blocks_used');
    const total = m.get('cairn_kv_blocks_total');
    show('s-kv', total ? `${((100 * used) / total).toFixed(1)}% (${used} of ${total} blocks)` : undefined);
    show('s-cancelled', m.cancelled);
    const now = {
      at: performance.now(),
      generated: m.get('cairn_generation_tokens_total') || 0,
      prompt: m.get('cairn_prompt_tokens_total') || 0,
    };
    show('s-gen-rate', previous ? rate(now, previous, 'generated') : '(next refresh)');
    show('s-prompt-rate', previous ? rate(now, previous, 'prompt') : '(next refresh)');
    previous = now;
    $('error').hidden = true;
    $('s-updated').textContent = `Updated ${new Date().toLocaleTimeString()}; refreshed every ${PERIOD_MS / 1000} seconds.`;
  } catch (e) {
    $('error').textContent = `Could not read the server's status: ${e.message}`;
    $('error').hidden = false;
  } finally {
    setTimeout(refresh, PERIOD_MS);
  }
}

refresh();
