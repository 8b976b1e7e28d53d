/**
 * The dashboard's page, styles and script, as strings served by `server.ts` (no build step). The
 * HTML holds no data but the schema, the target and the CSRF token, escaped; the script fetches the
 * JSON API and writes every value with `textContent` or `setAttribute`, never as HTML, so an event
 * id, a key, a handler name, a pause reason or an error text holding `<script>` is shown as text. The Content
 * Security Policy (`security.ts`) forbids inline scripts besides.
 */

import { REPLAYS_JS, REPLAYS_SECTION } from './replays.js';

/** `text` safe inside HTML text and double-quoted attributes. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`);
}

function layout(title: string, body: string, head = ''): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<link rel="stylesheet" href="/app.css">
${head}
</head>
<body>
${body}
</body>
</html>
`;
}

/** The login form of a token-protected dashboard. */
export function loginPage(problem?: string): string {
  return layout(
    'relaybus dashboard: log in',
    `<main class="login">
<h1>relaybus</h1>
<form method="post" action="/login">
<label for="token">Dashboard token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required>
<button type="submit">Log in</button>
${problem === undefined ? '' : `<p class="error" role="alert">${escapeHtml(problem)}</p>`}
</form>
</main>`,
  );
}

/** The dashboard itself; the script fills it in. */
export function mainPage(options: {
  readonly csrf: string;
  readonly schema: string;
  readonly target: string;
  readonly loggedIn: boolean;
}): string {
  const head = `<meta name="relaybus-csrf" content="${escapeHtml(options.csrf)}">\n<script src="/app.js" defer></script>`;
  return layout(
    `relaybus: ${options.schema}`,
    `<header>
<h1>relaybus</h1>
<p class="where">schema <b>${escapeHtml(options.schema)}</b> on ${escapeHtml(options.target)}</p>
<p id="updated" class="muted">loading…</p>
${options.loggedIn ? `<form method="post" action="/logout"><input type="hidden" name="csrf" value="${escapeHtml(options.csrf)}"><button type="submit" class="quiet">Log out</button></form>` : ''}
</header>
<p id="status" class="error" role="alert" hidden></p>
<main>
<section>
<h2>Handlers <span id="lanes-leased" class="muted"></span></h2>
<table id="handlers">
<thead><tr><th>handler</th><th class="num">pending</th><th class="num">due</th><th class="num">scheduled</th><th class="num">in flight</th><th class="num">dead</th><th class="num">completed</th><th class="num">oldest due</th><th>paused</th><th></th></tr></thead>
<tbody></tbody>
</table>
<p id="handler-result" class="muted" role="status"></p>
<p id="completed-note" class="muted" hidden>completed: n/a, no completion history is recorded. A completed delivery is deleted; workers record one in the history only with <code>completionHistory: true</code>.</p>
<h3>Backlog over time <span class="muted">(pending + in flight, per handler)</span></h3>
<svg id="chart" viewBox="0 0 760 220" role="img" aria-label="backlog over time"></svg>
<div id="legend"></div>
</section>
${REPLAYS_SECTION}
<section>
<h2>Dead letters <span id="dead-count" class="muted"></span></h2>
<p id="requeue-result" class="muted" role="status"></p>
<table id="dead">
<thead><tr><th>delivery</th><th>handler</th><th>event</th><th>key</th><th class="num">attempts</th><th>died</th><th>last error</th><th>payload</th><th></th></tr></thead>
<tbody></tbody>
</table>
</section>
<section>
<h2>Held lanes</h2>
<p class="muted">The lanes a worker holds: its lease owner id, what it has in flight, when its lease ends (an expired one is taken over by the next claim), and the handlers and oldest event of the deliveries it runs.</p>
<table id="lanes">
<thead><tr><th class="num">lane</th><th>held by</th><th class="num">in flight</th><th>lease</th><th>handlers</th><th>oldest event</th></tr></thead>
<tbody></tbody>
</table>
</section>
<section>
<h2>Find an event</h2>
<form id="search"><label for="event-id">Event id</label> <input id="event-id" name="id" required maxlength="200"> <button type="submit">Search</button></form>
<p id="event-note" class="muted"></p>
<div id="event-payload" hidden>
<h3>Payload</h3>
<pre data-field="payload"></pre>
<h3>Headers</h3>
<pre data-field="headers"></pre>
</div>
<table id="event" hidden>
<thead><tr><th>delivery</th><th>handler</th><th>status</th><th class="num">attempts</th><th class="num">lane</th><th>key</th><th>available / completed</th><th>last error</th></tr></thead>
<tbody></tbody>
</table>
</section>
</main>`,
    head,
  );
}

export const APP_CSS = `
:root { color-scheme: light; --fg: #1d2433; --muted: #667085; --line: #e4e7ec; --accent: #2f6fde; --bad: #b42318; --bg: #f8f9fb; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; align-items: baseline; gap: 1.2rem; padding: 0.8rem 1.5rem; background: #fff; border-bottom: 1px solid var(--line); }
header h1 { margin: 0; font-size: 1.25rem; }
header form { margin-left: auto; }
main { padding: 0 1.5rem 2rem; max-width: 1200px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 0.6rem 1rem 1rem; margin-top: 1rem; }
h2 { font-size: 1.05rem; margin: 0.4rem 0 0.6rem; }
h3 { font-size: 0.95rem; margin: 1rem 0 0.3rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 0.3rem 0.5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: 0.8rem; text-transform: uppercase; letter-spacing: 0.03em; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
td.text { max-width: 28rem; overflow-wrap: anywhere; white-space: pre-wrap; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.8rem; }
tr.total td { font-weight: 600; }
td.paused { color: #b45309; max-width: 20rem; overflow-wrap: anywhere; }
.muted { color: var(--muted); font-weight: normal; }
.warn { color: #b45309; }
.error { color: var(--bad); }
button { font: inherit; padding: 0.2rem 0.7rem; border: 1px solid var(--accent); background: var(--accent); color: #fff; border-radius: 5px; cursor: pointer; }
button.quiet { background: #fff; color: var(--accent); }
input { font: inherit; padding: 0.2rem 0.4rem; border: 1px solid var(--line); border-radius: 5px; min-width: 22rem; }
svg#chart { width: 100%; max-width: 760px; height: auto; background: #fcfcfd; border: 1px solid var(--line); border-radius: 6px; }
svg#chart text { font-size: 11px; fill: var(--muted); }
#legend { display: flex; flex-wrap: wrap; gap: 0.4rem 1rem; margin-top: 0.4rem; font-size: 0.85rem; }
#legend span::before { content: ""; display: inline-block; width: 0.8rem; height: 0.25rem; margin-right: 0.3rem; vertical-align: middle; background: currentColor; }
pre { margin: 0.2rem 0; padding: 0.4rem 0.6rem; max-height: 24rem; overflow: auto; background: #f4f5f7; border-radius: 5px; white-space: pre-wrap; overflow-wrap: anywhere; font: 0.8rem/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
td.payload { max-width: 28rem; }
td.payload summary { cursor: pointer; color: var(--accent); font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.8rem; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.login { max-width: 24rem; margin: 5rem auto; background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 1.5rem; }
.login form { display: grid; gap: 0.6rem; }
.login input { min-width: 0; }
`;

/* The script avoids template literals: it lives in one. */
export const APP_JS = `'use strict';
(function () {
  var csrf = document.querySelector('meta[name="relaybus-csrf"]').getAttribute('content');
  var COLORS = ['#2f6fde', '#d92d20', '#039855', '#dc6803', '#7a5af8', '#0e9384', '#c11574', '#475467'];
  var SVG = 'http://www.w3.org/2000/svg';

  function el(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }
  function cell(row, text, className, field) {
    var td = el('td', text, className);
    if (field) td.setAttribute('data-field', field);
    row.appendChild(td);
    return td;
  }
  function duration(ms) {
    if (ms === null || ms === undefined) return '-';
    if (ms < 1000) return Math.round(ms) + 'ms';
    var s = ms / 1000;
    if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + (Math.round(s % 60) ? ' ' + Math.round(s % 60) + 's' : '');
    if (s < 86400) return Math.floor(s / 3600) + 'h' + (Math.floor((s % 3600) / 60) ? ' ' + Math.floor((s % 3600) / 60) + 'm' : '');
    return Math.floor(s / 86400) + 'd' + (Math.floor((s % 86400) / 3600) ? ' ' + Math.floor((s % 86400) / 3600) + 'h' : '');
  }
  function ago(iso) {
    return duration(Date.now() - Date.parse(iso)) + ' ago';
  }
  function status(message) {
    var node = document.getElementById('status');
    node.textContent = message || '';
    node.hidden = !message;
  }
  function api(path, options) {
    var init = options || {};
    init.credentials = 'same-origin';
    init.headers = Object.assign({ accept: 'application/json' }, init.headers || {});
    // A request that never answers must not stop the page refreshing for good: give up after 10 s.
    var controller = new AbortController();
    var timer = setTimeout(function () { controller.abort(); }, 10000);
    init.signal = controller.signal;
    return fetch(path, init).finally(function () { clearTimeout(timer); }).then(function (response) {
      return response.json().then(function (body) {
        if (!response.ok) throw new Error(body && body.error ? body.error : 'HTTP ' + response.status);
        return body;
      });
    });
  }
  function clear(tbody) {
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
  }

  // A paused handler without deliveries has a row too (zeros), so it can be resumed from the page.
  function idle(stats) {
    return { pending: 0, due: 0, scheduled: 0, inFlight: 0, dead: 0, completed: stats.completed === null ? null : 0, oldestDueAgeMs: null };
  }
  function renderHandlers(stats, pausedList) {
    var tbody = document.querySelector('#handlers tbody');
    clear(tbody);
    var paused = {};
    pausedList.forEach(function (entry) { paused[entry.handler] = entry; });
    var names = Object.keys(stats.handlers);
    pausedList.forEach(function (entry) { if (names.indexOf(entry.handler) < 0) names.push(entry.handler); });
    names.sort();
    var rows = names.map(function (name) { return { name: name, counts: stats.handlers[name] || idle(stats), total: false }; });
    if (rows.length > 1) rows.push({ name: 'total', counts: stats, total: true });
    rows.forEach(function (item) {
      var row = el('tr', null, item.total ? 'total' : '');
      if (!item.total) row.setAttribute('data-handler', item.name);
      else row.setAttribute('data-total', 'true');
      cell(row, item.name, 'text');
      ['pending', 'due', 'scheduled', 'inFlight', 'dead'].forEach(function (field) {
        cell(row, item.counts[field], 'num', field);
      });
      // null: no completion history is recorded, so there is nothing to count (a 0 would read as "none completed").
      var completed = cell(row, item.counts.completed === null ? 'n/a' : item.counts.completed, 'num', 'completed');
      if (item.counts.completed === null) completed.title = 'no completion history is recorded';
      cell(row, duration(item.counts.oldestDueAgeMs), 'num', 'oldestDue');
      var pause = item.total ? undefined : paused[item.name];
      var state = cell(row, pause ? pausedText(pause) : '', 'paused', 'paused');
      if (pause) {
        row.setAttribute('data-paused', 'true');
        state.title = 'no worker claims its deliveries, which wait in order until it is resumed';
      }
      var action = el('td');
      if (!item.total) action.appendChild(pauseButton(item.name, Boolean(pause)));
      row.appendChild(action);
      tbody.appendChild(row);
    });
    if (rows.length === 0) {
      var empty = el('tr');
      var td = cell(empty, 'no deliveries: nothing pending, in flight or dead', 'muted');
      td.colSpan = 10;
      tbody.appendChild(empty);
    }
    document.getElementById('lanes-leased').textContent = 'lanes leased: ' + stats.lanesLeased;
    document.getElementById('completed-note').hidden = stats.completed !== null;
  }

  function svg(tag, attributes, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attributes).forEach(function (name) { node.setAttribute(name, String(attributes[name])); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function renderChart(history) {
    var chart = document.getElementById('chart');
    var legend = document.getElementById('legend');
    while (chart.firstChild) chart.removeChild(chart.firstChild);
    clear(legend);
    var left = 48, top = 10, width = 700, height = 180;
    var handlers = {};
    history.forEach(function (sample) { Object.keys(sample.backlog).forEach(function (name) { handlers[name] = true; }); });
    var names = Object.keys(handlers).sort();
    var max = 1;
    history.forEach(function (sample) { names.forEach(function (name) { max = Math.max(max, sample.backlog[name] || 0); }); });
    var t0 = history.length ? Date.parse(history[0].at) : 0;
    var t1 = history.length ? Date.parse(history[history.length - 1].at) : 1;
    var span = Math.max(1, t1 - t0);
    chart.appendChild(svg('line', { x1: left, y1: top + height, x2: left + width, y2: top + height, stroke: '#d0d5dd' }));
    chart.appendChild(svg('line', { x1: left, y1: top, x2: left, y2: top + height, stroke: '#d0d5dd' }));
    chart.appendChild(svg('text', { x: left - 6, y: top + 10, 'text-anchor': 'end' }, String(max)));
    chart.appendChild(svg('text', { x: left - 6, y: top + height, 'text-anchor': 'end' }, '0'));
    if (history.length) {
      chart.appendChild(svg('text', { x: left, y: top + height + 18 }, ago(history[0].at)));
      chart.appendChild(svg('text', { x: left + width, y: top + height + 18, 'text-anchor': 'end' }, 'now'));
    }
    names.forEach(function (name, index) {
      var color = COLORS[index % COLORS.length];
      var points = history.map(function (sample) {
        var x = left + ((Date.parse(sample.at) - t0) / span) * width;
        var y = top + height - ((sample.backlog[name] || 0) / max) * height;
        return x.toFixed(1) + ',' + y.toFixed(1);
      });
      if (points.length === 1) points.push((left + width) + ',' + points[0].split(',')[1]);
      var line = svg('polyline', { points: points.join(' '), fill: 'none', stroke: color, 'stroke-width': 2 });
      line.appendChild(svg('title', {}, name));
      chart.appendChild(line);
      var key = el('span', name);
      key.style.color = color;
      legend.appendChild(key);
    });
  }

  function renderLanes(lanes, truncated) {
    var tbody = document.querySelector('#lanes tbody');
    clear(tbody);
    lanes.forEach(function (lane) {
      var row = el('tr');
      row.setAttribute('data-lane', lane.lane);
      cell(row, lane.lane, 'num');
      cell(row, lane.owner, 'text', 'owner');
      cell(row, lane.inFlight, 'num', 'inFlight');
      var left = Date.parse(lane.leaseExpiresAt) - Date.now();
      cell(row, left > 0 ? 'ends in ' + duration(left) : 'expired ' + duration(-left) + ' ago', left > 0 ? '' : 'warn');
      cell(row, lane.handlers.join(', '), 'text');
      cell(row, lane.oldestCreatedAt ? ago(lane.oldestCreatedAt) : '-');
      tbody.appendChild(row);
    });
    if (lanes.length === 0) {
      var empty = el('tr');
      cell(empty, 'no lane is held (no worker is claiming)', 'muted').colSpan = 6;
      tbody.appendChild(empty);
    }
    if (truncated) {
      var more = el('tr');
      cell(more, 'more deliveries are in flight than this page read: handlers and oldest may be partial', 'muted').colSpan = 6;
      tbody.appendChild(more);
    }
  }

  // Every action: a JSON POST with the page's CSRF token.
  function post(path, body) {
    return api(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-relaybus-csrf': csrf },
      body: JSON.stringify(body),
    });
  }
  function requeue(body) {
    return post('/api/requeue', body).then(function (result) {
      document.getElementById('requeue-result').textContent = 'requeued ' + result.requeued + (result.requeued === 1 ? ' delivery' : ' deliveries');
      return refresh();
    }, function (error) { status('requeue failed: ' + error.message); });
  }
  function pausedText(pause) {
    return 'paused ' + ago(pause.pausedAt) + ' (' + new Date(pause.pausedAt).toLocaleString() + ')'
      + (pause.reason === null ? '' : ': ' + pause.reason);
  }
  function pauseButton(handler, paused) {
    var button = el('button', paused ? 'Resume' : 'Pause', 'quiet');
    button.type = 'button';
    button.setAttribute(paused ? 'data-resume' : 'data-pause', handler);
    button.title = paused ? 'let every worker claim its deliveries again' : 'stop every worker from claiming its deliveries (they wait, in order)';
    button.addEventListener('click', function () {
      button.disabled = true;
      post(paused ? '/api/resume' : '/api/pause', { handler: handler }).then(function () {
        document.getElementById('handler-result').textContent = (paused ? 'resumed ' : 'paused ') + handler;
        return refresh();
      }, function (error) {
        button.disabled = false;
        status((paused ? 'resume' : 'pause') + ' failed: ' + error.message);
      });
    });
    return button;
  }

  // The dead letters whose payload is open: the table is redrawn on every refresh, and keeps them open.
  var openPayloads = {};
  function payloadCell(row, item) {
    var td = cell(row, null, 'payload');
    if (item.payload === null) {
      td.textContent = '-';
      td.title = 'the event is not stored any more';
      return;
    }
    var details = el('details');
    details.open = openPayloads[item.id] === true;
    details.addEventListener('toggle', function () { openPayloads[item.id] = details.open; });
    details.appendChild(el('summary', item.payload.replace(/\\s+/g, ' ').slice(0, 60)));
    var payload = el('pre', item.payload);
    payload.setAttribute('data-field', 'payload');
    details.appendChild(payload);
    var headers = el('pre', headerLines(item.headers));
    headers.setAttribute('data-field', 'headers');
    details.appendChild(headers);
    td.appendChild(details);
  }
  function headerLines(headers) {
    var names = Object.keys(headers || {}).sort();
    return names.length === 0 ? '(no headers)' : names.map(function (name) { return name + ': ' + headers[name]; }).join('\\n');
  }

  function renderDead(page, total) {
    var tbody = document.querySelector('#dead tbody');
    clear(tbody);
    document.getElementById('dead-count').textContent = '(' + total + ')';
    page.items.forEach(function (item) {
      var row = el('tr');
      row.setAttribute('data-delivery', item.id);
      cell(row, item.id, 'text');
      cell(row, item.handler, 'text');
      cell(row, item.eventType + ' ' + item.eventId, 'text');
      cell(row, item.key === null ? '-' : item.key, 'text');
      cell(row, item.attempts + '/' + item.maxAttempts, 'num');
      cell(row, ago(item.updatedAt));
      cell(row, item.lastError === null ? '' : item.lastError, 'text', 'lastError');
      payloadCell(row, item);
      var action = el('td');
      var button = el('button', 'Requeue', 'quiet');
      button.type = 'button';
      button.setAttribute('data-requeue', item.id);
      button.addEventListener('click', function () { button.disabled = true; requeue({ deliveryIds: [item.id] }); });
      action.appendChild(button);
      row.appendChild(action);
      tbody.appendChild(row);
    });
    if (page.items.length === 0) {
      var empty = el('tr');
      cell(empty, 'no dead letters', 'muted').colSpan = 9;
      tbody.appendChild(empty);
    }
  }

  function search(id) {
    var note = document.getElementById('event-note');
    var table = document.getElementById('event');
    var tbody = table.querySelector('tbody');
    var payload = document.getElementById('event-payload');
    return api('/api/event?id=' + encodeURIComponent(id)).then(function (result) {
      clear(tbody);
      table.hidden = result.items.length === 0;
      payload.hidden = result.payload === null;
      payload.querySelector('[data-field="payload"]').textContent = result.payload === null ? '' : result.payload;
      payload.querySelector('[data-field="headers"]').textContent = result.payload === null ? '' : headerLines(result.headers);
      var completed = result.items.some(function (item) { return item.status === 'completed'; });
      note.textContent = result.items.length === 0
        ? 'no delivery of event ' + result.eventId + ' (completed deliveries are listed only where a completion history is kept)'
        : result.items.length + (result.items.length === 1 ? ' delivery' : ' deliveries') + ' of event ' + result.eventId
          + (completed ? ' (completed ones from the completion history)' : '');
      result.items.forEach(function (item) {
        var row = el('tr');
        row.setAttribute('data-delivery', item.id);
        cell(row, item.id, 'text');
        cell(row, item.handler, 'text');
        cell(row, item.status, '', 'status');
        cell(row, item.attempts + '/' + item.maxAttempts, 'num');
        cell(row, item.lane, 'num');
        cell(row, item.key === null ? '-' : item.key, 'text');
        cell(row, item.availableAt);
        cell(row, item.lastError === null ? '' : item.lastError, 'text', 'lastError');
        tbody.appendChild(row);
      });
    }, function (error) { status('search failed: ' + error.message); });
  }

${REPLAYS_JS}
  var refreshing = null;
  function refresh() {
    if (refreshing) return refreshing;
    refreshing = Promise.all([api('/api/overview'), api('/api/dead')]).then(function (results) {
      var overview = results[0];
      renderHandlers(overview.stats, overview.paused);
      renderReplays(overview.replays);
      renderChart(overview.history);
      renderLanes(overview.lanes, overview.truncated);
      renderDead(results[1], overview.stats.dead);
      document.getElementById('updated').textContent = 'updated ' + new Date(overview.stats.at).toLocaleTimeString();
      document.body.setAttribute('data-loaded', overview.stats.at);
      status('');
    }, function (error) { status(error.message); }).then(function () { refreshing = null; });
    return refreshing;
  }

  document.getElementById('search').addEventListener('submit', function (event) {
    event.preventDefault();
    search(document.getElementById('event-id').value.trim());
  });
  refresh();
  setInterval(refresh, 2000);
})();
`;
