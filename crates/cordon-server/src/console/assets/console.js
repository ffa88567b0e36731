// cordon console: one plain script, no framework and no build step (nothing to audit but this
// file and the vendored xterm.js; it works under a CSP that allows scripts from this server
// only). Every text that comes from a sandbox or a client (ids, metadata, file names, output)
// goes into the page through textContent, never as markup.
'use strict';

const state = { csrf: '', timer: null, socket: null, term: null, samples: [], admin: false, gateway: false, keyId: '' };
const $main = () => document.getElementById('main');

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'onclick' || k === 'onsubmit' || k === 'onchange' || k === 'oninput') e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function api(method, path, body, raw) {
  const headers = {};
  if (method !== 'GET' && method !== 'HEAD') headers['X-Cordon-CSRF'] = state.csrf;
  let payload;
  if (raw !== undefined) { payload = raw; headers['Content-Type'] = 'application/octet-stream'; }
  else if (body !== undefined) { payload = JSON.stringify(body); headers['Content-Type'] = 'application/json'; }
  const r = await fetch(path, { method, headers, body: payload, credentials: 'same-origin' });
  if (r.status === 401) { showLogin('Your session has ended: sign in again.'); throw new Error('not signed in'); }
  if (!r.ok) {
    let msg = r.status + '';
    try { const j = await r.json(); msg = (j.error && j.error.message) || msg; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  if (r.status === 204 || r.headers.get('content-length') === '0') return null;
  const ct = r.headers.get('content-type') || '';
  return ct.includes('json') ? r.json() : r.blob();
}

function stopTimers() {
  if (state.timer) { clearInterval(state.timer); state.timer = null; }
  if (state.socket) { state.socket.close(); state.socket = null; }
  if (state.term) { state.term.dispose(); state.term = null; }
}

// ---- signing in ----

function showLogin(message) {
  stopTimers();
  document.getElementById('nav').hidden = true;
  document.getElementById('signout').hidden = true;
  document.getElementById('who').textContent = '';
  const key = el('input', { type: 'password', id: 'key', name: 'key', autocomplete: 'off', placeholder: 'cdn_…', required: '' });
  const err = el('p', { class: 'error', id: 'login-error' }, message || '');
  const form = el('form', { class: 'login card', id: 'login', onsubmit: async (ev) => {
    ev.preventDefault();
    const r = await fetch('/console/login', { method: 'POST', headers: { 'Content-Type': 'application/json' }, credentials: 'same-origin', body: JSON.stringify({ key: key.value }) });
    key.value = '';
    if (!r.ok) {
      let m = 'sign-in refused';
      try { m = (await r.json()).error.message; } catch (_) { /* keep */ }
      err.textContent = m;
      return;
    }
    const s = await r.json();
    signedIn(s);
  } },
  el('h2', {}, 'Sign in to cordon'),
  el('p', { class: 'muted' }, 'An API key of this server (cordon keys create). It is exchanged for a session cookie; the key is not kept in this browser.'),
  key, el('button', { type: 'submit', id: 'signin' }, 'Sign in'), err);
  $main().replaceChildren(form);
  key.focus();
}

function signedIn(s) {
  state.csrf = s.csrf || '';
  state.admin = !!s.admin;
  state.gateway = !!s.gateway;
  state.keyId = s.key_id || '';
  document.getElementById('nav').hidden = false;
  // Admin pages are shown to admin keys only (the API refuses others with 403 anyway); a
  // gateway's console has nothing but its held calls.
  for (const a of document.querySelectorAll('#nav a')) {
    const page = a.getAttribute('href');
    a.hidden = state.gateway ? page !== '#/approvals' : (a.classList.contains('admin') && !state.admin);
  }
  document.getElementById('who').textContent = s.open ? 'no keys on this server (loopback only)' : ('key ' + (s.key_id || ''));
  document.getElementById('signout').hidden = !!s.open;
  route();
}

async function signOut() {
  await fetch('/console/session', { method: 'DELETE', credentials: 'same-origin' });
  state.csrf = '';
  showLogin('Signed out.');
}

// ---- formatting ----

function bytes(b) {
  if (b === undefined || b === null) return '';
  const u = ['B', 'K', 'M', 'G', 'T'];
  let v = b, i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(v < 10 ? 1 : 0)) + u[i];
}
function age(secs) {
  if (secs < 60) return secs + 's';
  if (secs < 3600) return Math.floor(secs / 60) + 'm';
  if (secs < 86400) return Math.floor(secs / 3600) + 'h';
  return Math.floor(secs / 86400) + 'd';
}
const now = () => Math.floor(Date.now() / 1000);

// ---- the sandboxes table ----

async function showList() {
  stopTimers();
  const filter = el('input', { id: 'filter', placeholder: 'filter: id, state, profile or metadata', oninput: () => render() });
  const body = el('tbody', { id: 'sandboxes' });
  const table = el('table', {}, el('thead', {}, el('tr', {},
    ['ID', 'State', 'Profile', 'Age', 'TTL left', 'CPU', 'Memory', 'Processes', 'Disk', 'Metadata'].map((h) => el('th', {}, h)))), body);
  const note = el('p', { class: 'muted', id: 'count' });
  $main().replaceChildren(el('div', { class: 'toolbar' }, filter), table, note);
  let rows = [];
  function render() {
    const q = filter.value.trim().toLowerCase();
    const shown = rows.filter(({ sb }) => !q || [sb.id, sb.state, sb.profile, ...Object.entries(sb.metadata || {}).map(([k, v]) => k + '=' + v)]
      .some((t) => String(t).toLowerCase().includes(q)));
    body.replaceChildren(...shown.map(({ sb, m }) => el('tr', { 'data-id': sb.id },
      el('td', {}, el('a', { href: '#/sandbox/' + encodeURIComponent(sb.id) }, sb.id)),
      el('td', { class: 'state-' + sb.state }, sb.state),
      el('td', {}, sb.profile),
      el('td', { class: 'num' }, age(now() - sb.created_at)),
      el('td', { class: 'num' }, age(Math.max(0, sb.expires_at - now()))),
      el('td', { class: 'num cpu' }, m ? m.cpu_used_pct.toFixed(1) + '%' : ''),
      el('td', { class: 'num' }, m ? bytes(m.mem_used) + ' / ' + bytes(m.mem_total) : ''),
      el('td', { class: 'num' }, m ? m.processes + ' / ' + m.processes_max : ''),
      el('td', { class: 'num' }, m && m.disk_total ? bytes(m.disk_used) + ' / ' + bytes(m.disk_total) : ''),
      el('td', { class: 'meta' }, Object.entries(sb.metadata || {}).map(([k, v]) => k + '=' + v).join(', ')))));
    note.textContent = shown.length + ' of ' + rows.length + ' sandboxes';
  }
  async function refresh() {
    try {
      // Two requests whatever the number of sandboxes: the list, and every running one's use
      // at the server's last sample. Only a sandbox the server samples no cgroup of (a host
      // without cgroups) is asked for its own metrics.
      const [list, usage] = await Promise.all([api('GET', '/v1/sandboxes'), api('GET', '/v1/usage')]);
      const byId = new Map(usage.sandboxes.map((u) => [u.id, u]));
      rows = await Promise.all(list.sandboxes.map(async (sb) => {
        let m = null;
        const u = byId.get(sb.id);
        if (u) {
          m = { cpu_used_pct: u.cpu_pct, mem_used: u.mem_bytes, mem_total: u.mem_total, processes: u.processes ?? '?', processes_max: u.processes_max,
            disk_used: u.disk_used, disk_total: u.disk_total };
        } else if (sb.state === 'running') {
          try { m = await api('GET', '/v1/sandboxes/' + encodeURIComponent(sb.id) + '/metrics'); } catch (_) { /* it ended meanwhile */ }
        }
        return { sb, m };
      }));
      render();
    } catch (e) { note.textContent = 'refresh failed: ' + e.message; }
  }
  await refresh();
  state.timer = setInterval(refresh, 2000);
}

// ---- one sandbox ----

function graph(samples) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'graph');
  svg.setAttribute('viewBox', '0 0 300 100');
  svg.setAttribute('preserveAspectRatio', 'none');
  const line = (cls, pick) => {
    const p = document.createElementNS(ns, 'polyline');
    p.setAttribute('class', cls);
    const n = samples.length;
    p.setAttribute('points', samples.map((s, i) => ((n <= 1 ? 300 : (i * 300) / (n - 1)).toFixed(1) + ',' + (100 - Math.min(100, pick(s))).toFixed(1))).join(' '));
    svg.append(p);
  };
  line('cpu', (s) => s.cpu);
  line('mem', (s) => s.mem);
  return svg;
}

async function showSandbox(id) {
  stopTimers();
  state.samples = [];
  const base = '/v1/sandboxes/' + encodeURIComponent(id);
  const title = el('h1', {}, id);
  const status = el('p', { class: 'muted', id: 'status' });
  const act = (label, method, path, cls) => el('button', { type: 'button', class: cls || '', id: 'act-' + label.toLowerCase(), onclick: async () => {
    try { await api(method, base + path); status.textContent = label + ': done'; if (label === 'Kill') location.hash = '#/'; } catch (e) { status.textContent = label + ': ' + e.message; }
  } }, label);
  const use = el('div', { id: 'use' });
  const useText = el('p', { class: 'muted', id: 'use-text' });
  const log = el('div', { id: 'log' });
  const egress = el('div', { id: 'egress' });
  const procs = el('div', { id: 'processes' });
  const files = el('div', { id: 'files' });
  const termBox = el('div', { id: 'terminal' });
  const termButton = el('button', { type: 'button', id: 'open-terminal', onclick: () => openTerminal(id, termBox) }, 'Open a terminal');
  $main().replaceChildren(
    el('p', {}, el('a', { href: '#/' }, '← Sandboxes')), title, status,
    el('div', { class: 'toolbar' }, act('Pause', 'POST', '/pause'), act('Resume', 'POST', '/resume'), act('Kill', 'DELETE', '', 'danger')),
    el('div', { class: 'grid' },
      el('section', { class: 'card' }, el('h2', {}, 'Use over its life (CPU blue, memory red, % of limits)'), use, useText),
      el('section', { class: 'card' }, el('h2', {}, 'Terminal'), termButton, termBox),
      el('section', { class: 'card' }, el('h2', {}, 'Files'), files),
      el('section', { class: 'card' }, el('h2', {}, 'Processes'), procs),
      el('section', { class: 'card' }, el('h2', {}, 'Commands'), log),
      el('section', { class: 'card' }, el('h2', {}, 'Egress'), egress)));
  showFiles(id, files, '/workspace');
  async function refresh() {
    try {
      const sb = await api('GET', base);
      status.textContent = 'state ' + sb.state + ', profile ' + sb.profile + ', expires in ' + age(Math.max(0, sb.expires_at - now()));
      if (sb.state === 'running') {
        const m = await api('GET', base + '/metrics');
        state.samples.push({ cpu: m.cpu_used_pct, mem: m.mem_total ? (100 * m.mem_used) / m.mem_total : 0 });
        if (state.samples.length > 150) state.samples.shift();
        // The server's series spans the sandbox's whole life (sampled from its cgroup, not
        // only while this page is open); where the host gives it no cgroup, this page's own.
        const h = await api('GET', base + '/metrics/history');
        const life = h.samples.map((x) => ({ cpu: x.cpu_pct, mem: h.mem_total ? (100 * x.mem_bytes) / h.mem_total : 0 }));
        use.replaceChildren(graph(life.length >= 2 ? life : state.samples));
        use.dataset.source = life.length >= 2 ? 'server' : 'page';
        use.dataset.points = String(life.length);
        use.dataset.peak = String(Math.max(0, ...h.samples.map((x) => x.cpu_pct)).toFixed(1));
        const p = await api('GET', base + '/processes');
        procs.replaceChildren(el('table', {},
          el('thead', {}, el('tr', {}, ['PID', 'Parent', 'State', 'CPU', 'Memory', 'Command'].map((h) => el('th', {}, h)))),
          el('tbody', {}, p.processes.map((r) => el('tr', { 'data-pid': r.pid },
            el('td', { class: 'num' }, r.pid), el('td', { class: 'num' }, r.ppid), el('td', {}, r.state),
            el('td', { class: 'num' }, (r.cpu_ns / 1e9).toFixed(2) + 's'), el('td', { class: 'num' }, bytes(r.rss_bytes)),
            el('td', {}, el('code', {}, r.command)))))));
        useText.textContent = 'CPU ' + m.cpu_used_pct.toFixed(1) + '% · memory ' + bytes(m.mem_used) + ' of ' + bytes(m.mem_total) +
          ' · processes ' + m.processes + ' of ' + m.processes_max + ' · disk ' + bytes(m.disk_used) + ' of ' + bytes(m.disk_total);
      }
      const l = await api('GET', base + '/logs');
      log.replaceChildren(...l.commands.slice(-20).reverse().map((c) => el('div', { class: 'command' },
        el('div', {}, el('code', {}, c.cmd.join(' ')), ' ', el('span', { class: 'muted' }, c.running ? 'running' : (c.outcome ? c.outcome.status + (c.outcome.exit_code !== null ? ' ' + c.outcome.exit_code : '') + ((c.outcome.limits_hit || []).length ? ' · limits hit: ' + c.outcome.limits_hit.join(', ') : '') : ''))),
        (c.stdout || c.stderr) ? el('pre', { class: 'out' }, (c.stdout || '') + (c.stderr || '')) : null)));
      const n = await api('GET', base + '/network');
      egress.replaceChildren(
        el('p', { class: 'muted' }, 'allowed: ' + ((n.policy.allow || []).join(', ') || 'nothing')),
        el('table', {}, el('tbody', {}, n.events.slice(-50).reverse().map((e) => el('tr', {},
          el('td', {}, new Date(e.time_ms).toLocaleTimeString()), el('td', {}, e.host + ':' + e.port),
          el('td', { class: e.verdict === 'deny' ? 'error' : '' }, e.verdict), el('td', {}, e.reason),
          el('td', { class: 'muted' }, e.verdict === 'deny' ? 'allow with --allow-net ' + e.host : ''))))));
    } catch (e) { status.textContent = e.message; }
  }
  await refresh();
  state.timer = setInterval(refresh, 2000);
}

async function showFiles(id, box, path) {
  const base = '/v1/sandboxes/' + encodeURIComponent(id) + '/files';
  const here = el('p', {}, el('code', { class: 'path' }, path));
  const upload = el('input', { type: 'file', id: 'upload', onchange: async () => {
    const f = upload.files[0];
    if (!f) return;
    try {
      await api('PUT', base + '?path=' + encodeURIComponent(path.replace(/\/$/, '') + '/' + f.name), undefined, await f.arrayBuffer());
      showFiles(id, box, path);
    } catch (e) { here.append(el('span', { class: 'error' }, ' upload failed: ' + e.message)); }
  } });
  let list;
  try { list = await api('GET', base + '/list?path=' + encodeURIComponent(path)); } catch (e) { box.replaceChildren(here, el('p', { class: 'error' }, e.message)); return; }
  const up = path.replace(/\/[^/]+\/?$/, '') || '/';
  const rows = list.entries.map((e) => el('tr', { 'data-name': e.name },
    el('td', {}, e.type === 'dir'
      ? el('a', { href: '#', onclick: (ev) => { ev.preventDefault(); showFiles(id, box, e.path); } }, e.name + '/')
      : e.type === 'file'
        ? el('a', { href: '#', class: 'download', onclick: async (ev) => {
          ev.preventDefault();
          const blob = await api('GET', base + '?path=' + encodeURIComponent(e.path));
          const a = el('a', { href: URL.createObjectURL(blob), download: e.name });
          document.body.append(a); a.click(); a.remove();
        } }, e.name)
        : e.name),
    el('td', { class: 'num' }, e.type === 'file' ? bytes(e.size) : e.type)));
  box.replaceChildren(here,
    path !== '/' ? el('p', {}, el('a', { href: '#', onclick: (ev) => { ev.preventDefault(); showFiles(id, box, up); } }, '↑ up')) : null,
    el('table', {}, el('tbody', {}, rows)), el('p', {}, 'Upload here: ', upload));
}

function openTerminal(id, box) {
  if (state.socket) return;
  if (!window.Terminal) { box.textContent = 'the terminal script did not load'; return; }
  const term = new window.Terminal({ rows: 20, cols: 90, convertEol: false });
  term.open(box);
  state.term = term;
  const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/v1/sandboxes/' + encodeURIComponent(id) + '/terminal';
  const ws = new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  state.socket = ws;
  const enc = new TextEncoder();
  ws.onopen = () => ws.send(JSON.stringify({ cmd: ['/bin/sh', '-c', 'exec bash -i 2>/dev/null || exec sh -i'], rows: term.rows, cols: term.cols }));
  ws.onmessage = (m) => {
    if (typeof m.data === 'string') {
      const j = JSON.parse(m.data);
      if (j.exit) term.write('\r\n[ended: ' + j.exit.status + (j.exit.exit_code !== null ? ' ' + j.exit.exit_code : '') + ']\r\n');
      if (j.error) term.write('\r\n[' + j.error + ']\r\n');
      return;
    }
    term.write(new Uint8Array(m.data));
  };
  ws.onclose = () => { state.socket = null; };
  term.onData((d) => { if (ws.readyState === 1) ws.send(enc.encode(d)); });
  term.focus();
}

// ---- the audit trail ----

async function showAudit() {
  stopTimers();
  const search = el('input', { id: 'audit-search', placeholder: 'search: event, sandbox id, details' });
  const chain = el('p', { id: 'chain' });
  const body = el('tbody', { id: 'audit-records' });
  async function load() {
    try {
      const v = await api('GET', '/v1/audit?limit=500&q=' + encodeURIComponent(search.value.trim()));
      chain.className = v.chain.intact ? 'state-running' : 'error';
      chain.textContent = v.chain.intact
        ? 'Hash chain intact: ' + v.chain.records + ' records, checked against the log\'s key and head just now.'
        : 'Hash chain BROKEN: ' + v.chain.broken;
      body.replaceChildren(...v.records.map((r) => el('tr', { class: v.chain.line && r.seq + 1 === v.chain.line ? 'error' : '' },
        el('td', { class: 'num' }, r.seq), el('td', {}, new Date(r.time_ms).toLocaleString()), el('td', {}, r.event),
        el('td', {}, r.sandbox || ''), el('td', {}, el('code', {}, JSON.stringify(r.details || {}))))));
    } catch (e) { chain.className = 'error'; chain.textContent = e.message; }
  }
  const form = el('form', { class: 'toolbar', onsubmit: (ev) => { ev.preventDefault(); load(); } }, search, el('button', { type: 'submit', id: 'audit-go' }, 'Search'));
  $main().replaceChildren(el('h1', {}, 'Audit trail'), chain, form,
    el('table', {}, el('thead', {}, el('tr', {}, ['#', 'Time', 'Event', 'Sandbox', 'Details'].map((h) => el('th', {}, h)))), body));
  await load();
}

// ---- images and state: what the key keeps beyond its sandboxes ----

async function showResources() {
  stopTimers();
  const table = (id, heads, rows, empty) => rows.length
    ? el('table', { id }, el('thead', {}, el('tr', {}, heads.map((h) => el('th', {}, h)))), el('tbody', {}, rows))
    : el('p', { class: 'muted', id }, empty);
  const when = (secs) => new Date(secs * 1000).toLocaleString();
  const section = (title, body) => el('section', { class: 'card' }, el('h2', {}, title), body);
  const box = el('div', { class: 'grid' });
  $main().replaceChildren(el('h1', {}, 'Images and state'), box);
  // Each list on its own: one that fails (a node without an image store) leaves the others.
  async function part(title, load) {
    const s = section(title, el('p', { class: 'muted' }, 'Loading…'));
    box.append(s);
    try { s.replaceChildren(el('h2', {}, title), await load()); } catch (e) { s.replaceChildren(el('h2', {}, title), el('p', { class: 'error' }, e.message)); }
  }
  await Promise.all([
    part('Images', async () => {
      const l = await api('GET', '/v1/images');
      return table('images', ['Names', 'Digest', 'Platform', 'Layers', 'Size', 'Unpacked', 'Added', 'Source'], l.images.map((i) => el('tr', { 'data-digest': i.digest },
        el('td', {}, (i.names || []).join(', ') || '(digest only)'), el('td', {}, el('code', {}, i.digest.slice(0, 19))), el('td', {}, i.platform),
        el('td', { class: 'num' }, i.layers), el('td', { class: 'num' }, bytes(i.size_bytes)), el('td', { class: 'num' }, bytes(i.unpacked_bytes)),
        el('td', {}, when(i.added)), el('td', { class: 'muted' }, i.source))), 'No images in this node\'s store (pull one: cordon image pull REF, or POST /v1/images/pull).');
    }),
    part('Snapshots', async () => {
      const l = await api('GET', '/v1/snapshots');
      return table('snapshots', ['Name', 'Of sandbox', 'Taken', 'Size', 'Files', 'Left out'], l.snapshots.map((x) => el('tr', { 'data-name': x.name },
        el('td', {}, x.name), el('td', {}, el('a', { href: '#/sandbox/' + encodeURIComponent(x.sandbox) }, x.sandbox)), el('td', {}, when(x.created_at)),
        el('td', { class: 'num' }, bytes(x.bytes)), el('td', { class: 'num' }, x.files + ' files, ' + x.dirs + ' dirs'),
        el('td', { class: 'num' }, x.skipped_count))), 'No snapshots (POST /v1/sandboxes/{id}/snapshots).');
    }),
    part('Volumes', async () => {
      const l = await api('GET', '/v1/volumes');
      return table('volumes', ['Name', 'Used', 'Cap', 'Created', 'Mounted by'], l.volumes.map((v) => el('tr', { 'data-name': v.name },
        el('td', {}, v.name), el('td', { class: 'num' }, v.used_bytes === undefined ? 'too large to count' : bytes(v.used_bytes)),
        el('td', { class: 'num' }, bytes(v.size_bytes)), el('td', {}, when(v.created_at)), el('td', {}, (v.mounted_by || []).join(', ')))), 'No volumes (POST /v1/volumes).');
    }),
    part('Secrets (names only: values never leave the server)', async () => {
      let all = [];
      let after = null;
      do {
        const l = await api('GET', '/v1/secrets?limit=100' + (after ? '&after=' + encodeURIComponent(after) : ''));
        all = all.concat(l.secrets);
        after = l.next;
      } while (after && all.length < 1000);
      return table('secrets', ['Name', 'Version', 'Updated', 'Metadata'], all.map((x) => el('tr', { 'data-name': x.name },
        el('td', {}, x.name), el('td', { class: 'num' }, x.version), el('td', {}, new Date(x.updated_at).toLocaleString()),
        el('td', { class: 'meta' }, Object.entries(x.metadata || {}).map(([k, v]) => k + '=' + v).join(', ')))), 'No secrets (POST /v1/secrets).');
    }),
  ]);
}

// ---- gateway approvals: tool calls a gateway holds for a person ----

async function showApprovals() {
  stopTimers();
  const box = el('div', { id: 'approvals' });
  const status = el('p', { class: 'muted', id: 'approvals-status' });
  $main().replaceChildren(el('h1', {}, 'Gateway approvals'),
    el('p', { class: 'muted' }, 'Tool calls a cordon gateway holds until a person answers. The arguments are the agent\'s, shown as text (secret-looking fields masked).'),
    status, box);
  // A reason being typed survives a refresh: kept per held call as it is typed.
  const reasons = new Map();
  let shown = null;
  const when = (ms) => (ms ? new Date(ms).toLocaleTimeString() : '');
  const args = (a) => el('pre', { class: 'args' }, a === undefined || a === null ? '' : JSON.stringify(a, null, 2));
  async function answer(call, approve) {
    const reason = (reasons.get(call.id) || '').trim();
    try {
      await api('POST', '/v1/gateway/approvals/' + encodeURIComponent(call.id), { approve, args_digest: call.args_digest, reason: reason || undefined });
      status.textContent = (approve ? 'Approved ' : 'Refused ') + call.tool + ' (' + call.id + ')';
      reasons.delete(call.id);
      shown = null;
      await load();
    } catch (e) { status.textContent = 'answering ' + call.id + ': ' + e.message; }
  }
  async function load() {
    let v;
    try { v = await api('GET', '/v1/gateway/approvals'); } catch (e) { status.textContent = e.message; return; }
    // Re-drawn only when something changed: a person typing a reason keeps the focus.
    const sig = JSON.stringify(v);
    if (sig === shown) return;
    shown = sig;
    if (!v.gateways.length) {
      box.replaceChildren(el('p', { class: 'muted', id: 'no-gateways' }, 'No gateway is registered with this server: run cordon gateway --keys-dir with this server\'s data directory.'));
      return;
    }
    box.replaceChildren(...v.gateways.map((g) => el('section', { class: 'card gateway', 'data-gateway': g.name },
      el('h2', {}, 'Gateway ' + g.name + (g.running ? '' : ' (not running)')),
      el('p', { class: 'muted' }, g.config),
      g.pending.length
        ? el('table', { class: 'pending' }, el('thead', {}, el('tr', {}, ['Call', 'Tool', 'Rule that asked', 'Client', 'Arguments', 'Expires', 'Answer'].map((h) => el('th', {}, h)))),
          el('tbody', {}, g.pending.map((c) => {
            const reason = el('input', { class: 'reason', placeholder: 'reason (told to the agent if refused)', maxlength: '500', oninput: () => reasons.set(c.id, reason.value) });
            reason.value = reasons.get(c.id) || '';
            return el('tr', { 'data-call': c.id },
              el('td', {}, el('code', {}, c.id)), el('td', { class: 'tool' }, c.tool), el('td', { class: 'rule' }, c.rule), el('td', {}, c.client),
              el('td', { class: 'arguments' }, args(c.arguments)),
              el('td', {}, when(c.expires_ms)),
              el('td', {}, reason, ' ',
                el('button', { type: 'button', class: 'approve', onclick: () => answer(c, true) }, 'Approve'), ' ',
                el('button', { type: 'button', class: 'refuse danger', onclick: () => answer(c, false) }, 'Refuse')));
          })))
        : el('p', { class: 'muted none-pending' }, 'Nothing is waiting.'),
      el('h2', {}, 'History'),
      g.history.length
        ? el('table', { class: 'history' }, el('thead', {}, el('tr', {}, ['Requested', 'Tool', 'Rule', 'Outcome', 'By', 'Reason', 'Arguments'].map((h) => el('th', {}, h)))),
          el('tbody', {}, g.history.map((c) => el('tr', { 'data-call': c.id },
            el('td', {}, when(c.requested_ms)), el('td', {}, c.tool), el('td', {}, c.rule),
            el('td', { class: c.outcome === 'granted' ? 'state-running outcome' : 'error outcome' }, c.outcome || c.answer),
            el('td', {}, c.answered_by || ''), el('td', { class: 'reason' }, c.reason || ''), el('td', {}, args(c.arguments))))))
        : el('p', { class: 'muted' }, 'No call answered yet.'))));
    for (const id of [...reasons.keys()]) if (!v.gateways.some((g) => g.pending.some((c) => c.id === id))) reasons.delete(id);
  }
  await load();
  state.timer = setInterval(load, 1000);
}

// ---- the host: keys and enforcement (admin keys only) ----

async function showHost() {
  stopTimers();
  const keysBox = el('div', { id: 'keys' });
  const hostBox = el('div', { id: 'enforcement' }, el('p', { class: 'muted' }, 'Probing the host…'));
  const status = el('p', { class: 'muted', id: 'keys-status' });
  const name = el('input', { id: 'key-name', placeholder: 'name of a new key', maxlength: '64' });
  const admin = el('input', { type: 'checkbox', id: 'key-admin' });
  const secret = el('p', { id: 'key-secret' });
  const form = el('form', { class: 'toolbar', onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const k = await api('POST', '/v1/keys', { name: name.value.trim(), admin: admin.checked });
      name.value = ''; admin.checked = false;
      // The secret is in this answer only: shown once, never stored by the page.
      secret.replaceChildren('New key ' + k.key.id + ' (shown once, copy it now): ', el('code', { class: 'secret' }, k.secret));
      await loadKeys();
    } catch (e) { status.textContent = 'creating a key: ' + e.message; }
  } }, name, el('label', {}, admin, ' admin'), el('button', { type: 'submit', id: 'key-create' }, 'Create key'));
  $main().replaceChildren(el('h1', {}, 'Host'),
    el('section', { class: 'card' }, el('h2', {}, 'API keys'), status, form, secret, keysBox),
    el('section', { class: 'card' }, el('h2', {}, 'Enforcement (cordon check)'), hostBox));
  async function loadKeys() {
    let l;
    try { l = await api('GET', '/v1/keys'); } catch (e) { keysBox.replaceChildren(el('p', { class: 'error' }, e.message)); return; }
    keysBox.replaceChildren(el('table', {}, el('thead', {}, el('tr', {}, ['ID', 'Name', 'Admin', 'Sandboxes', 'Max', 'Requests/s', 'Created', 'State', ''].map((h) => el('th', {}, h)))),
      el('tbody', {}, l.keys.map((k) => el('tr', { 'data-key': k.id },
        el('td', {}, el('code', {}, k.id)), el('td', { class: 'name' }, k.name), el('td', {}, k.admin ? 'admin' : ''),
        el('td', { class: 'num' }, k.sandboxes), el('td', { class: 'num' }, k.max_sandboxes), el('td', { class: 'num' }, k.requests_per_second),
        el('td', {}, new Date(k.created_at * 1000).toLocaleString()), el('td', { class: k.revoked ? 'error state' : 'state-running state' }, k.revoked ? 'revoked' : 'active'),
        el('td', {}, (k.revoked || k.id === state.keyId) ? '' : el('button', { type: 'button', class: 'danger revoke', onclick: async () => {
          try { await api('DELETE', '/v1/keys/' + encodeURIComponent(k.id)); status.textContent = 'Revoked ' + k.id; await loadKeys(); } catch (e) { status.textContent = 'revoking ' + k.id + ': ' + e.message; }
        } }, 'Revoke')))))));
  }
  async function loadHost() {
    let h;
    try { h = await api('GET', '/v1/host/enforcement'); } catch (e) { hostBox.replaceChildren(el('p', { class: 'error' }, e.message)); return; }
    const r = h.report || {};
    const wasm = r.wasm_backend || {};
    const verdict = { full: 'cordon can sandbox on this host: every layer holds.', no_namespaces: 'Degraded: the host refuses namespaces (Landlock, seccomp, rlimits and a cgroup hold; one-shot runs only).', none: 'cordon cannot sandbox on this host.' }[h.mode] || h.mode;
    hostBox.replaceChildren(
      el('p', { id: 'host-mode', class: h.mode === 'full' ? 'state-running' : 'error' }, verdict),
      el('p', { class: 'muted' }, 'kernel ' + (r.kernel || '?') + ' · cgroup ' + (r.cgroup || '?') + ' · Landlock ABI ' + (r.landlock_abi ?? '?') + (r.running_as_root ? ' · running as root' : ' · uid ' + r.euid)),
      el('table', { id: 'features' }, el('thead', {}, el('tr', {}, ['Layer', '', 'Detail', 'If missing'].map((x) => el('th', {}, x)))),
        el('tbody', {}, [...(r.features || []), { name: 'wasm', available: !!wasm.available, detail: wasm.detail || '', cost_if_missing: 'no WebAssembly runs' }].map((f) => el('tr', { 'data-feature': f.name },
          el('td', {}, f.name), el('td', { class: f.available ? 'state-running' : 'error' }, f.available ? 'ok' : 'MISSING'),
          el('td', { class: 'wrap' }, f.detail || ''), el('td', { class: 'muted wrap' }, f.available ? '' : (f.cost_if_missing || '')))))),
      ...((r.obstacles || []).length ? [el('div', { id: 'obstacles' }, el('h2', {}, 'Why, and what you can do'), (r.obstacles || []).map((o) => el('div', { class: 'obstacle' },
        el('p', {}, el('strong', {}, o.layer + ' [' + o.id + ']: '), o.found),
        el('ul', {}, (o.fixes || []).map((f) => el('li', {}, f.how, el('br', {}), el('span', { class: 'muted' }, 'cost: ' + f.cost)))))))] : []));
  }
  await Promise.all([loadKeys(), loadHost()]);
}

// ---- routing ----

function route() {
  const h = location.hash || (state.gateway ? '#/approvals' : '#/');
  const m = h.match(/^#\/sandbox\/(.+)$/);
  if (state.gateway) showApprovals();
  else if (m) showSandbox(decodeURIComponent(m[1]));
  else if (h === '#/audit') showAudit();
  else if (h === '#/resources') showResources();
  else if (h === '#/approvals') showApprovals();
  else if (h === '#/host') showHost();
  else showList();
}

window.addEventListener('hashchange', () => { if (state.csrf !== null) route(); });
document.addEventListener('DOMContentLoaded', async () => {
  document.getElementById('signout').addEventListener('click', signOut);
  const r = await fetch('/console/session', { credentials: 'same-origin' });
  if (r.ok) signedIn(await r.json());
  else showLogin();
});
