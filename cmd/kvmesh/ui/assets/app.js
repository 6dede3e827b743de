// kvmesh status page: polls ui/state, keeps two minutes of samples and
// draws them. Everything from the node is written with textContent.
'use strict';
(function () {
  const POLL_MS = 200, HISTORY_MS = 120000, HIT_WINDOW_MS = 10000, RATE_WINDOW_MS = 2000, MATCH_WINDOW_MS = 30000;
  // Reason colours follow router.Reason's order (palette indexes).
  const REASONS = ['prefix', 'miss', 'cost', 'load-override', 'replicate', 'retry', 'round-robin', 'random',
    'least-loaded', 'hash', 'imbalance', 'forward', 'doubt'];
  const C = window.KVCharts;
  const $ = (id) => document.getElementById(id);

  let samples = []; // {t, uptime, dec: {reason: n}, decTotal, cached: {name: n}, prompt: {...}, fc, fp, cum: [], hit, hits: {}, rates: {}}
  let lastOK = 0, lastState = null, timer = 0;

  // ---- formatting ----
  const pct = (v) => (v === null || v === undefined || !isFinite(v)) ? '–' : (v * 100).toFixed(1) + '%';
  const int = (v) => Math.round(v).toLocaleString('en-US');
  const fix = (v, d) => (v === null || v === undefined) ? '–' : Number(v).toFixed(d);
  function ageText(ms) {
    if (ms === null || ms === undefined) return '–';
    if (ms < 1000) return ms + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    if (ms < 3600000) return Math.floor(ms / 60000) + ' min';
    return (ms / 3600000).toFixed(1) + ' h';
  }
  function compact(v) {
    if (v >= 1e9) return (v / 1e9).toFixed(1) + 'G';
    if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (v >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    return int(v);
  }
  function setText(id, text) {
    const el = $(id);
    if (el && el.textContent !== text) el.textContent = text;
  }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const reasonColor = (r) => { const i = REASONS.indexOf(r); return i < 0 ? 13 : i; };
  const backendColor = (i) => [6, 4, 2, 7, 8, 5, 11, 3, 9, 10][i % 10];

  // ---- samples ----
  // base returns the newest sample at least ms older than the last one
  // (the oldest one if none is).
  function base(ms) {
    const t = samples[samples.length - 1].t - ms;
    for (let i = samples.length - 2; i >= 0; i--) if (samples[i].t <= t) return samples[i];
    return samples[0];
  }
  function ingest(s) {
    const prev = samples[samples.length - 1];
    if (prev && (s.uptime_ms < prev.uptime || s.node !== lastState.node)) samples = []; // a restart: counters reset
    const x = { t: s.now_ms, uptime: s.uptime_ms, dec: {}, decTotal: 0, cached: {}, prompt: {}, fc: 0, fp: 0,
      cum: s.matched.cumulative || [], hits: {}, rates: {} };
    for (const d of s.decisions) { x.dec[d.reason] = d.count; x.decTotal += d.count; }
    for (const b of s.backends) {
      x.cached[b.name] = b.cached_tokens; x.prompt[b.name] = b.prompt_tokens;
      x.fc += b.cached_tokens; x.fp += b.prompt_tokens;
    }
    if (s.mesh) x.lag = [s.mesh.apply_lag_count, s.mesh.apply_lag_sum];
    if (prev && x.t <= prev.t) return;
    samples.push(x);
    while (samples.length > 2 && samples[0].t < x.t - HISTORY_MS - HIT_WINDOW_MS) samples.shift();
    const hb = base(HIT_WINDOW_MS), rb = base(RATE_WINDOW_MS);
    x.hit = x.fp - hb.fp > 0 ? (x.fc - hb.fc) / (x.fp - hb.fp) : null;
    for (const name in x.prompt) {
      const dp = x.prompt[name] - (hb.prompt[name] || 0);
      x.hits[name] = dp > 0 ? (x.cached[name] - (hb.cached[name] || 0)) / dp : null;
    }
    const dt = (x.t - rb.t) / 1000;
    for (const r in x.dec) x.rates[r] = dt > 0 ? (x.dec[r] - (rb.dec[r] || 0)) / dt : 0;
  }

  // ---- rendering ----
  function render(s) {
    const x = samples[samples.length - 1];
    setText('node', s.node); setText('policy', s.policy); setText('version', s.version);
    setText('uptime', ageText(s.uptime_ms));
    setText('explain-tenant-label', 'tenant (' + s.tenant_header + ')');
    renderKPIs(s, x);
    const t1 = x.t, t0 = t1 - HISTORY_MS;
    renderHitChart(s, t0, t1);
    renderDecisions(s, x, t0, t1);
    renderMatched(s);
    renderBackends(s, x, t0, t1);
    renderMesh(s);
    renderIndex(s);
    if (!$('explain-body').value) defaultBody(s);
  }

  function renderKPIs(s, x) {
    const hb = base(HIT_WINDOW_MS);
    setText('kpi-hit-window', pct(x.hit));
    setText('kpi-hit', x.fp > 0 ? pct(x.fc / x.fp) : '–');
    setText('kpi-tokens', compact(x.fc) + ' of ' + compact(x.fp) + ' prompt tokens cached');
    const rb = base(RATE_WINDOW_MS), dt = (x.t - rb.t) / 1000;
    setText('kpi-rate', dt > 0 ? fix((x.decTotal - rb.decTotal) / dt, 1) : '–');
    setText('kpi-decisions', int(x.decTotal));
    const dd = x.decTotal - hb.decTotal;
    setText('kpi-prefix', dd > 0 ? pct(((x.dec.prefix || 0) - (hb.dec.prefix || 0)) / dd) : '–');
    setText('kpi-claims', compact(s.index.claims));
    setText('kpi-claims-sub', pct(s.index.capacity ? s.index.claims / s.index.capacity : 0) + ' of ' + compact(s.index.capacity) + ' capacity');
    if (!s.mesh) {
      setText('kpi-mesh', 'alone'); setText('kpi-mesh-sub', 'no mesh configured');
    } else {
      const alive = s.mesh.members.filter((m) => m.status === 'alive').length;
      const conv = s.mesh.peers.filter((p) => p.converged).length;
      setText('kpi-mesh', alive + ' / ' + s.mesh.members.length + ' alive');
      setText('kpi-mesh-sub', conv + ' of ' + s.mesh.peers.length + ' peers converged');
    }
  }

  function legend(id, items) {
    const box = $(id);
    box.replaceChildren(...items.map(([color, name, value]) => {
      const k = el('span', 'key');
      k.append(el('i', 'sw c' + color), document.createTextNode(name + ' '), el('b', '', value));
      return k;
    }));
  }

  function renderHitChart(s, t0, t1) {
    const series = s.backends.map((b, i) => ({ color: C.palette[backendColor(i)], width: 1, alpha: 0.55,
      points: samples.map((x) => [x.t, x.hits[b.name] === undefined ? null : x.hits[b.name]]) }));
    series.push({ color: C.palette[0], width: 2.5, points: samples.map((x) => [x.t, x.hit]) });
    C.lines($('chart-hit'), { t0, t1, yMax: 1, yFormat: C.pct0, series });
    const x = samples[samples.length - 1];
    legend('legend-hit', [[0, 'fleet', pct(x.hit)]].concat(s.backends.map((b, i) => [backendColor(i), b.name, pct(x.hits[b.name])])));
  }

  function renderDecisions(s, x, t0, t1) {
    const seen = REASONS.filter((r) => samples.some((p) => p.dec[r])).concat(Object.keys(x.dec).filter((r) => !REASONS.includes(r)));
    const vis = samples.filter((p) => p.t >= t0);
    C.stacked($('chart-decisions'), { t0, t1, times: vis.map((p) => p.t), yFormat: (v) => fix(v, v > 0 && v < 10 ? 1 : 0),
      layers: seen.map((r) => ({ color: C.palette[reasonColor(r)], values: vis.map((p) => p.rates[r] || 0) })) });
    legend('legend-decisions', seen.map((r) => [reasonColor(r), r, int(x.dec[r] || 0) + ' · ' + fix(x.rates[r] || 0, 1) + '/s']));
  }

  function perBucket(cum) { return cum.map((c, i) => c - (i ? cum[i - 1] : 0)); }
  function renderMatched(s) {
    const le = s.matched.le || [], x = samples[samples.length - 1], b = base(MATCH_WINDOW_MS);
    const total = perBucket(x.cum), recent = perBucket(x.cum.map((c, i) => c - (b.cum[i] || 0)));
    const sum = (a) => a.reduce((p, v) => p + v, 0), nt = sum(total), nr = sum(recent);
    C.bars($('chart-matched'), { labels: le.map((v) => v === 0 ? 'miss' : '≤' + Math.round(v * 100)),
      recent: recent.map((v) => nr ? v / nr : 0), total: total.map((v) => nt ? v / nt : 0) });
    setText('matched-mean', s.matched.count ? 'mean ' + pct(s.matched.sum / s.matched.count) + ' of ' + int(s.matched.count) + ' routed' : '');
  }

  // sync keeps one row per key in tbody, in keys' order: make(tr) builds
  // a new row's cells, fill(tr, i) updates them.
  function sync(tbody, keys, cells, fill) {
    const have = new Map([...tbody.rows].map((r) => [r.dataset.key, r]));
    keys.forEach((k, i) => {
      let tr = have.get(k);
      if (!tr) {
        tr = el('tr');
        tr.dataset.key = k;
        for (const c of cells) tr.append(el('td', c));
      }
      have.delete(k);
      if (tbody.rows[i] !== tr) tbody.insertBefore(tr, tbody.rows[i] || null);
      fill(tr, i);
    });
    for (const r of have.values()) r.remove();
  }
  function cell(tr, i, text, cls) {
    const td = tr.cells[i];
    if (td.textContent !== text) td.textContent = text;
    if (cls !== undefined) td.className = cls;
  }
  function status(td, text, level) {
    if (td.dataset.s === level + text) return;
    td.dataset.s = level + text;
    td.replaceChildren(el('span', 'dot ' + level), document.createTextNode(text));
  }
  function meter(td, v) {
    if (v === null || v === undefined) { td.textContent = '–'; return; }
    let m = td.querySelector('.meter');
    if (!m) {
      m = el('span', 'meter');
      m.append(el('span', 'fill'));
      td.replaceChildren(m, el('span', 'meter-label'));
    }
    const f = m.firstChild;
    f.style.width = Math.round(Math.min(Math.max(v, 0), 1) * 100) + '%'; // CSSOM, which the CSP allows
    f.className = 'fill' + (v > 0.95 ? ' bad' : v > 0.85 ? ' warn' : '');
    td.lastChild.textContent = pct(v);
  }

  function renderBackends(s, x, t0, t1) {
    const cls = ['', '', 'num', 'num', 'num', 'num', '', 'num', 'num', 'num', ''];
    sync($('backends').tBodies[0], s.backends.map((b) => b.name), cls, (tr, i) => {
      const b = s.backends[i];
      cell(tr, 0, b.name);
      const ej = b.ejected_for_ms ? 'ejected ' + ageText(b.ejected_for_ms) : '';
      status(tr.cells[1], b.healthy ? 'healthy' : (ej || 'unhealthy'), b.healthy ? 'good' : 'bad');
      cell(tr, 2, int(b.in_flight));
      cell(tr, 3, fix(b.peer_in_flight, 1));
      cell(tr, 4, b.waiting === null ? '–' : int(b.waiting));
      cell(tr, 5, b.running === null ? '–' : int(b.running));
      meter(tr.cells[6], b.kv_usage);
      cell(tr, 7, ageText(b.signal_age_ms), 'num' + (b.signal_age_ms === null || b.signal_age_ms > 5000 ? ' warn' : ''));
      cell(tr, 8, pct(x.hits[b.name]));
      cell(tr, 9, b.prompt_tokens > 0 ? pct(b.cached_tokens / b.prompt_tokens) : '–');
      let cv = tr.cells[10].firstChild;
      if (!cv) { cv = el('canvas', 'spark'); cv.dataset.height = '28'; tr.cells[10].append(cv); }
      C.spark(cv, samples.map((p) => [p.t, p.hits[b.name] === undefined ? null : p.hits[b.name]]), t0, t1, C.palette[backendColor(i)]);
    });
  }

  function fact(k, v) {
    const d = el('div', 'fact');
    d.append(el('div', 'k', k), el('div', 'v', v));
    return d;
  }

  function renderMesh(s) {
    const m = s.mesh;
    $('mesh-none').hidden = !!m;
    $('mesh-body').hidden = !m;
    if (!m) { setText('mesh-hint', ''); return; }
    setText('mesh-hint', m.topology + ' · incarnation ' + m.incarnation.toString(16));
    sync($('members').tBodies[0], m.members.map((x) => x.name), ['', '', 'dim', 'dim'], (tr, i) => {
      const mb = m.members[i];
      cell(tr, 0, mb.name);
      status(tr.cells[1], mb.status, mb.status === 'alive' ? 'good' : mb.status === 'failed' ? 'bad' : 'warn');
      cell(tr, 2, mb.addr);
      cell(tr, 3, mb.self ? 'this node' : mb.peer ? 'peer' : '');
    });
    sync($('peers').tBodies[0], m.peers.map((p) => p.name), ['', 'num', '', 'num', 'num', 'num', 'num', 'num'], (tr, i) => {
      const p = m.peers[i];
      cell(tr, 0, p.name);
      cell(tr, 1, int(p.backlog), 'num' + (p.backlog > 1000 ? ' warn' : ''));
      status(tr.cells[2], p.in_full_sync ? 'full sync' : p.converged ? 'yes' : 'not yet', p.converged ? 'good' : 'warn');
      cell(tr, 3, ageText(p.last_match_age_ms));
      cell(tr, 4, ageText(p.last_heard_age_ms));
      cell(tr, 5, ageText(p.load_age_ms), 'num' + (p.load_age_ms === null || p.load_weight < 1 ? ' warn' : ''));
      cell(tr, 6, fix(p.load_weight, 2));
      cell(tr, 7, fix(p.routed_per_second, 1));
    });
    const b = base(HIT_WINDOW_MS);
    const lag = lagOf(b, m);
    $('mesh-facts').replaceChildren(
      fact('apply lag, last 10 s', lag === null ? '–' : ageText(Math.round(lag * 1000))),
      fact('load channel', m.sharing ? 'sharing · share ' + pct(m.share) : 'not sharing'),
      fact('routed here / s', fix(m.routed_per_second, 1)),
      fact('claims sent / received', compact(m.claims_sent) + ' / ' + compact(m.claims_received)),
      fact('claims applied', compact(m.claims_applied)),
      fact('full syncs received', int(m.full_syncs)));
  }
  function lagOf(b, m) {
    if (!b.lag) return null;
    const n = m.apply_lag_count - b.lag[0];
    return n > 0 ? (m.apply_lag_sum - b.lag[1]) / n : null;
  }

  function renderIndex(s) {
    const ix = s.index, u = ix.capacity ? ix.claims / ix.capacity : 0;
    const fill = $('index-fill');
    fill.style.width = Math.round(Math.min(u, 1) * 1000) / 10 + '%';
    fill.className = 'fill' + (u > 0.95 ? ' warn' : '');
    const floor = ix.floor_ms > 0 ? new Date(ix.floor_ms).toISOString().slice(11, 19) + ' UTC' : 'none';
    $('index-facts').replaceChildren(
      fact('claims', int(ix.claims) + ' / ' + int(ix.capacity)),
      fact('backends registered', int(ix.backends)),
      fact('inserted', int(ix.inserted)),
      fact('evicted (capacity)', int(ix.evicted)),
      fact('swept (expired)', int(ix.swept)),
      fact('rejected', int(ix.rejected)),
      fact('expiry floor', floor),
      fact('floor raises', int(ix.floor_raises)));
  }

  // ---- explainer ----
  function defaultBody(s) {
    const model = (s.backends.find((b) => b.models && b.models.length) || { models: ['MODEL'] }).models[0];
    $('explain-body').value = JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello' }] }, null, 2);
  }

  function explain() {
    const btn = $('explain-go'), out = $('explain-result'), table = $('explain-candidates');
    const headers = { 'Content-Type': 'application/json' };
    const tenant = $('explain-tenant').value.trim();
    if (tenant && lastState && lastState.tenant_header) headers[lastState.tenant_header] = tenant;
    btn.disabled = true;
    out.replaceChildren(el('span', 'dim', 'asking…'));
    fetch('debug/route?endpoint=' + encodeURIComponent($('explain-endpoint').value),
      { method: 'POST', headers, body: $('explain-body').value, cache: 'no-store' })
      .then((r) => r.text().then((text) => [r, text]))
      .then(([r, text]) => {
        let x = null;
        try { x = JSON.parse(text); } catch (e) { /* not JSON: shown as text */ }
        if (!x || !x.chosen) {
          const msg = x && x.error && x.error.message ? x.error.message : text.slice(0, 300);
          out.replaceChildren(el('span', 'bad', 'HTTP ' + r.status + ': ' + msg));
          table.hidden = !(x && x.candidates && x.candidates.length);
          if (x && x.candidates) candidates(x);
          return;
        }
        const line = el('div');
        line.append(document.createTextNode('chosen '), el('b', 'good', x.chosen),
          document.createTextNode(' · reason '), el('b', '', x.reason),
          document.createTextNode(' · ' + x.units + ' units in ' + x.blocks + ' blocks of ' + x.units_per_block +
            ' · deepest match ' + x.deepest_blocks + ' blocks · ' + (x.learn ? 'would learn' : 'would not learn') +
            (x.unavailable.length ? ' · unavailable: ' + x.unavailable.join(', ') : '')));
        out.replaceChildren(line, el('div', 'route', 'x-kvmesh-route: ' + x.route_header));
        out.dataset.chosen = x.chosen;
        out.dataset.deepest = String(x.deepest_blocks);
        candidates(x);
        table.hidden = false;
      })
      .catch((e) => out.replaceChildren(el('span', 'bad', 'request failed: ' + e.message)))
      .finally(() => { btn.disabled = false; });
  }

  function candidates(x) {
    const cls = ['', 'num', 'num', 'num', 'num', 'num', 'num', 'num', 'num'];
    sync($('explain-candidates').tBodies[0], x.candidates.map((c) => c.backend), cls, (tr, i) => {
      const c = x.candidates[i], l = c.load;
      tr.className = c.chosen ? 'chosen' : '';
      cell(tr, 0, (c.chosen ? '▶ ' : '') + c.backend);
      cell(tr, 1, int(c.matched_blocks));
      cell(tr, 2, int(c.matched_units));
      cell(tr, 3, fix(c.score, 2));
      cell(tr, 4, int(l.in_flight));
      cell(tr, 5, int(l.pending_prefill_units));
      cell(tr, 6, int(l.peer_pending_prefill_units));
      cell(tr, 7, l.waiting === null ? '–' : int(l.waiting));
      cell(tr, 8, pct(l.kv_usage));
    });
  }

  // ---- polling ----
  function setLive(kind, text) {
    const live = $('live');
    live.className = 'live' + (kind === 'ok' ? '' : ' ' + kind);
    live.textContent = text;
  }
  function schedule() { clearTimeout(timer); timer = setTimeout(poll, POLL_MS); }
  function poll() {
    if (document.hidden) { schedule(); return; }
    fetch('ui/state', { cache: 'no-store' })
      .then((r) => { if (!r.ok) throw new Error('HTTP ' + r.status); return r.json(); })
      .then((s) => {
        ingest(s);
        lastState = s;
        lastOK = Date.now();
        if (samples.length) render(s);
        setLive('ok', 'live');
      })
      .catch((e) => setLive(Date.now() - lastOK > 3000 ? 'down' : 'stale', 'unreachable: ' + e.message))
      .finally(schedule);
  }

  document.addEventListener('visibilitychange', () => { if (!document.hidden) poll(); });
  $('explain-go').addEventListener('click', explain);
  poll();
})();
