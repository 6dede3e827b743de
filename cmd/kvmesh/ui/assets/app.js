// kvmesh status page: polls ui/state, keeps two minutes of samples and
// draws them. Everything from the node is written with textContent.
'use strict';
(function () {
  const POLL_MS = 200, HISTORY_MS = 120000, HIT_WINDOW_MS = 10000, RATE_WINDOW_MS = 2000, MATCH_WINDOW_MS = 30000;
  // A poll gets FETCH_TIMEOUT_MS (a node that accepts the connection and
  // never answers must not look live); failing polls back off up to
  // MAX_BACKOFF_MS. Whatever a poll is doing, the page reads stale once its
  // last good sample is STALE_MS old, down at DOWN_MS.
  const FETCH_TIMEOUT_MS = 2000, MAX_BACKOFF_MS = 2000, STALE_MS = 1000, DOWN_MS = 3000, EXPLAIN_TIMEOUT_MS = 10000;
  // Samples further apart than GAP_MS (the node silent, the tab hidden)
  // start a new segment: no window averages over the gap.
  const GAP_MS = 5000;
  // The hit-rate chart and legend show the LEGEND_MAX busiest backends.
  const LEGEND_MAX = 12;
  // Reason colours follow router.Reason's order (palette indexes).
  const REASONS = ['prefix', 'miss', 'cost', 'load-override', 'replicate', 'retry', 'round-robin', 'random',
    'least-loaded', 'hash', 'imbalance', 'forward', 'doubt'];
  const C = window.KVCharts;
  const $ = (id) => document.getElementById(id);

  // samples: {t, node, started, uptime, seg, dec: {reason: n}, decTotal, matched, routed,
  // cached: {name: n}, prompt: {...}, ep: {name: incarnation}, fc, fp, retC, retP, cum: [],
  // lag, hit, hits: {}, dp: {}, rates: {}}
  let samples = [];
  let lastOK = 0, lastErr = '', lastState = null, timer = 0, inFlight = false, failures = 0;
  let resumedAt = Date.now(), newSegment = false, epochs = 0, shownError = '';

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
  // A backend's colour hashes its name (FNV-1a): it keeps its colour when
  // backends are added, removed or reordered.
  const BACKEND_COLORS = [6, 4, 2, 7, 8, 5, 11, 3, 9, 10];
  function backendColor(name) {
    let h = 2166136261;
    for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 16777619);
    return BACKEND_COLORS[(h >>> 0) % BACKEND_COLORS.length];
  }
  const dict = () => Object.create(null); // keyed by names from the node: no inherited keys

  // ---- samples ----
  // base returns the newest sample at least ms older than the last one,
  // within the last one's segment (the segment's oldest if none is).
  function base(ms) {
    const x = samples[samples.length - 1], t = x.t - ms;
    let b = x;
    for (let i = samples.length - 2; i >= 0 && samples[i].seg === x.seg; i--) {
      b = samples[i];
      if (b.t <= t) break;
    }
    return b;
  }
  function ingest(s) {
    let prev = samples[samples.length - 1];
    if (prev && s.now_ms === prev.t) return; // the same document again
    // Another node, or its clock stepped back: the history is not comparable.
    if (prev && (s.node !== prev.node || s.now_ms < prev.t)) { samples = []; prev = undefined; }
    const x = { t: s.now_ms, node: s.node, started: s.started_ms, uptime: s.uptime_ms, dec: dict(), decTotal: 0,
      matched: s.matched.count || 0, routed: s.routed || 0, cached: dict(), prompt: dict(), ep: dict(), fc: 0, fp: 0,
      retC: 0, retP: 0, cum: s.matched.cumulative || [], hits: dict(), dp: dict(), rates: dict() };
    for (const d of s.decisions) { x.dec[d.reason] = d.count; x.decTotal += d.count; }
    for (const b of s.backends) {
      x.cached[b.name] = b.cached_tokens; x.prompt[b.name] = b.prompt_tokens;
      x.fc += b.cached_tokens; x.fp += b.prompt_tokens;
    }
    if (s.mesh) x.lag = [s.mesh.apply_lag_count, s.mesh.apply_lag_sum];
    // A restart (counters from zero) shows as another start time, an uptime
    // gone down or any node-wide counter gone down: the uptime alone misses
    // one that happened while the tab was hidden.
    const restarted = prev && (x.started !== prev.started || x.uptime < prev.uptime || x.matched < prev.matched ||
      x.routed < prev.routed || Object.keys(prev.dec).some((r) => (x.dec[r] || 0) < prev.dec[r]));
    if (prev && !restarted) {
      // A backend gone, or with counters gone down (removed and added again),
      // keeps counting in "since start" with its last figures: the router
      // forgets a removed backend's counters, and the fleet figure must not
      // jump then. Its new incarnation (ep) starts windows afresh.
      x.retC = prev.retC; x.retP = prev.retP;
      for (const name in prev.prompt) {
        if (name in x.prompt && x.prompt[name] >= prev.prompt[name] && x.cached[name] >= prev.cached[name]) {
          x.ep[name] = prev.ep[name];
        } else {
          x.retC += prev.cached[name]; x.retP += prev.prompt[name];
        }
      }
    }
    for (const name in x.prompt) if (!(name in x.ep)) x.ep[name] = ++epochs;
    const cont = prev && !restarted && !newSegment && x.t - prev.t <= GAP_MS;
    x.seg = !prev ? 0 : cont ? prev.seg : prev.seg + 1;
    newSegment = false;
    if (prev) prev.dp = null; // only the newest sample's is read: 200 backends x 600 samples add up
    samples.push(x);
    while (samples.length > 2 && samples[0].t < x.t - HISTORY_MS - HIT_WINDOW_MS) samples.shift();
    const hb = base(HIT_WINDOW_MS), rb = base(RATE_WINDOW_MS);
    // Windowed hit rates count only backends in both samples (same name,
    // same incarnation): fleet sums over different sets of backends made
    // rates past 100% when one was removed.
    let dc = 0, dp = 0;
    for (const name in x.prompt) {
      if (hb.ep[name] !== x.ep[name]) { x.hits[name] = null; continue; }
      const p = x.prompt[name] - hb.prompt[name], c = x.cached[name] - hb.cached[name];
      x.dp[name] = p;
      x.hits[name] = p > 0 ? c / p : null;
      dp += p; dc += c;
    }
    x.hit = dp > 0 ? dc / dp : null;
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
    renderHitChart(s, x, t0, t1);
    renderDecisions(s, x, t0, t1);
    renderMatched(s);
    renderBackends(s, x, t0, t1);
    renderMesh(s);
    renderIndex(s);
    defaultBody(s);
  }

  function renderKPIs(s, x) {
    const hb = base(HIT_WINDOW_MS);
    setText('kpi-hit-window', pct(x.hit));
    // Since start: the backends present now plus those removed while the
    // page watched (their last figures); a reload counts only the present.
    const fc = x.fc + x.retC, fp = x.fp + x.retP;
    setText('kpi-hit', fp > 0 ? pct(fc / fp) : '–');
    setText('kpi-tokens', compact(fc) + ' of ' + compact(fp) + ' prompt tokens cached' + (x.retP ? ', removed backends included' : ''));
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

  // legend shows items [colour (null: none), name, value], reusing its
  // nodes: rebuilding them every poll cost layout and lost text selections.
  function legend(id, items) {
    const box = $(id);
    items.forEach(([color, name, value], i) => {
      let k = box.children[i];
      if (!k) {
        k = el('span', 'key');
        k.append(el('i'), el('span', 'name'), el('b'));
        box.append(k);
      }
      const [sw, nm, v] = k.children, cls = color === null ? 'sw none' : 'sw c' + color;
      if (sw.className !== cls) sw.className = cls;
      if (nm.textContent !== name) { nm.textContent = name; nm.title = name; }
      if (v.textContent !== value) v.textContent = value;
    });
    while (box.children.length > items.length) box.lastElementChild.remove();
  }

  const byName = (a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
  function renderHitChart(s, x, t0, t1) {
    // The busiest backends (prompt tokens in the window, then since start):
    // a line and a key for each of hundreds would bury the fleet's.
    const busy = s.backends.slice().sort((a, b) => (x.dp[b.name] || 0) - (x.dp[a.name] || 0) ||
      b.prompt_tokens - a.prompt_tokens || byName(a, b));
    const shown = busy.slice(0, LEGEND_MAX), more = busy.length - shown.length;
    const series = shown.map((b) => ({ color: C.palette[backendColor(b.name)], width: 1, alpha: 0.55,
      points: samples.map((p) => [p.t, p.hits[b.name] === undefined ? null : p.hits[b.name]]) }));
    series.push({ color: C.palette[0], width: 2.5, points: samples.map((p) => [p.t, p.hit]) });
    C.lines($('chart-hit'), { t0, t1, yMax: 1, yFormat: C.pct0, series });
    const items = [[0, 'fleet', pct(x.hit)]].concat(shown.map((b) => [backendColor(b.name), b.name, pct(x.hits[b.name])]));
    if (more > 0) items.push([null, '+' + more + ' more', '']);
    legend('legend-hit', items);
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
  // nameCell shows a name that may be long: ellipsized by the style sheet,
  // whole in its title.
  function nameCell(tr, i, text) {
    const td = tr.cells[i];
    let s = td.firstElementChild;
    if (!s) { s = el('span', 'name'); td.replaceChildren(s); }
    if (s.textContent !== text) { s.textContent = text; s.title = text; }
  }
  function cell(tr, i, text, cls) {
    const td = tr.cells[i];
    if (td.textContent !== text) td.textContent = text;
    if (cls !== undefined && td.className !== cls) td.className = cls;
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
    const w = Math.round(Math.min(Math.max(v, 0), 1) * 100) + '%', cls = 'fill' + (v > 0.95 ? ' bad' : v > 0.85 ? ' warn' : '');
    if (f.style.width !== w) f.style.width = w; // CSSOM, which the CSP allows
    if (f.className !== cls) f.className = cls;
    if (td.lastChild.textContent !== pct(v)) td.lastChild.textContent = pct(v);
  }

  function renderBackends(s, x, t0, t1) {
    const cls = ['', '', 'num', 'num', 'num', 'num', '', 'num', 'num', 'num', ''];
    const maxAge = s.signal_max_age_ms || 5000;
    sync($('backends').tBodies[0], s.backends.map((b) => b.name), cls, (tr, i) => {
      const b = s.backends[i];
      nameCell(tr, 0, b.name);
      const ej = b.ejected_for_ms ? 'ejected ' + ageText(b.ejected_for_ms) : '';
      if (b.registry_removed && b.healthy) {
        // A peer removed it; this node lists it still and brings it back.
        status(tr.cells[1], 'removed by a peer, back in ' + ageText(b.reactivate_in_ms), 'warn');
      } else {
        status(tr.cells[1], b.healthy ? 'healthy' : (ej || 'unhealthy'), b.healthy ? 'good' : 'bad');
      }
      cell(tr, 2, int(b.in_flight));
      cell(tr, 3, fix(b.peer_in_flight, 1));
      cell(tr, 4, b.waiting === null ? '–' : int(b.waiting));
      cell(tr, 5, b.running === null ? '–' : int(b.running));
      meter(tr.cells[6], b.kv_usage);
      cell(tr, 7, ageText(b.signal_age_ms), 'num' + (b.signal_age_ms === null || b.signal_age_ms > maxAge ? ' warn' : ''));
      cell(tr, 8, pct(x.hits[b.name]));
      cell(tr, 9, b.prompt_tokens > 0 ? pct(b.cached_tokens / b.prompt_tokens) : '–');
      let cv = tr.cells[10].firstChild;
      if (!cv) {
        // Its size as in ui.css, so that drawing it never reads the layout.
        cv = el('canvas', 'spark'); cv.dataset.width = '160'; cv.dataset.height = '28'; tr.cells[10].append(cv);
      }
      C.spark(cv, samples.map((p) => [p.t, p.hits[b.name] === undefined ? null : p.hits[b.name]]), t0, t1, C.palette[backendColor(b.name)]);
    });
  }

  // facts shows [key, value] pairs, reusing its nodes (as legend does).
  function facts(id, pairs) {
    const box = $(id);
    pairs.forEach(([k, v], i) => {
      let d = box.children[i];
      if (!d) {
        d = el('div', 'fact');
        d.append(el('div', 'k'), el('div', 'v'));
        box.append(d);
      }
      if (d.firstChild.textContent !== k) d.firstChild.textContent = k;
      if (d.lastChild.textContent !== v) d.lastChild.textContent = v;
    });
    while (box.children.length > pairs.length) box.lastElementChild.remove();
  }

  function renderMesh(s) {
    const m = s.mesh;
    $('mesh-none').hidden = !!m;
    $('mesh-body').hidden = !m;
    if (!m) { setText('mesh-hint', ''); return; }
    setText('mesh-hint', m.topology + ' · incarnation ' + m.incarnation); // hex, as a string: exact
    sync($('members').tBodies[0], m.members.map((x) => x.name), ['', '', 'dim', 'dim'], (tr, i) => {
      const mb = m.members[i];
      nameCell(tr, 0, mb.name);
      status(tr.cells[1], mb.status, mb.status === 'alive' ? 'good' : mb.status === 'failed' ? 'bad' : 'warn');
      cell(tr, 2, mb.addr);
      if (mb.not_peer && mb.status === 'alive') {
        // It cannot share claims with this node: why, with a warning dot.
        status(tr.cells[3], 'not a peer: it ' + mb.not_peer, 'warn');
      } else if (mb.warning && mb.status === 'alive') {
        // A peer whose settings degrade the mesh (another capacity).
        status(tr.cells[3], (mb.peer ? 'peer; it ' : 'it ') + mb.warning, 'warn');
      } else {
        delete tr.cells[3].dataset.s; // status() may have set it
        cell(tr, 3, mb.self ? 'this node' : mb.peer ? 'peer' : '');
      }
    });
    sync($('peers').tBodies[0], m.peers.map((p) => p.name), ['', 'num', '', 'num', 'num', 'num', 'num', 'num'], (tr, i) => {
      const p = m.peers[i];
      nameCell(tr, 0, p.name);
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
    facts('mesh-facts', [
      ['apply lag, last 10 s', lag === null ? '–' : ageText(Math.round(lag * 1000))],
      ['load channel', m.sharing ? 'sharing · share ' + pct(m.share) : 'not sharing'],
      ['routed here / s', fix(m.routed_per_second, 1)],
      ['claims sent / received', compact(m.claims_sent) + ' / ' + compact(m.claims_received)],
      ['claims applied', compact(m.claims_applied)],
      ['full syncs received', int(m.full_syncs)]]);
  }
  function lagOf(b, m) {
    if (!b.lag) return null;
    const n = m.apply_lag_count - b.lag[0];
    return n > 0 ? (m.apply_lag_sum - b.lag[1]) / n : null;
  }

  function renderIndex(s) {
    const ix = s.index, u = ix.capacity ? ix.claims / ix.capacity : 0;
    const fill = $('index-fill');
    const w = Math.round(Math.min(u, 1) * 1000) / 10 + '%', cls = 'fill' + (u > 0.95 ? ' warn' : '');
    if (fill.style.width !== w) fill.style.width = w;
    if (fill.className !== cls) fill.className = cls;
    // A floor past what a Date holds (year 275760) would throw in toISOString.
    const fd = new Date(ix.floor_ms);
    const floor = !(ix.floor_ms > 0) ? 'none' : isNaN(fd) ? int(ix.floor_ms) + ' ms' : fd.toISOString().slice(11, 19) + ' UTC';
    facts('index-facts', [
      ['claims', int(ix.claims) + ' / ' + int(ix.capacity)],
      ['table memory', (ix.table_bytes / 1048576).toFixed(1) + ' MiB'],
      ['backends registered', int(ix.backends)],
      ['inserted', int(ix.inserted)],
      ['evicted (capacity)', int(ix.evicted)],
      ['swept (expired)', int(ix.swept)],
      ['rejected', int(ix.rejected)],
      ['expiry floor', floor],
      ['floor raises', int(ix.floor_raises)]]);
  }

  // ---- explainer ----
  // The body gets a default (following the first model seen) until the
  // operator edits it: a box they emptied stays empty.
  let bodyEdited = false, bodyDefault = '';
  function defaultBody(s) {
    const box = $('explain-body');
    if (bodyEdited || box.value !== bodyDefault) return;
    const model = (s.backends.find((b) => b.models && b.models.length) || { models: ['MODEL'] }).models[0];
    bodyDefault = JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello' }] }, null, 2);
    if (box.value !== bodyDefault) box.value = bodyDefault;
  }

  function explain() {
    const btn = $('explain-go'), out = $('explain-result');
    const headers = { 'Content-Type': 'application/json' };
    const tenant = $('explain-tenant').value.trim();
    if (tenant && lastState && lastState.tenant_header) headers[lastState.tenant_header] = tenant;
    btn.disabled = true;
    out.replaceChildren(el('span', 'dim', 'asking…'));
    // A timeout: the button comes back whatever the node does.
    const ctl = new AbortController(), timeout = setTimeout(() => ctl.abort(), EXPLAIN_TIMEOUT_MS);
    fetch('debug/route?endpoint=' + encodeURIComponent($('explain-endpoint').value),
      { method: 'POST', headers, body: $('explain-body').value, cache: 'no-store', signal: ctl.signal })
      .then((r) => r.text().then((text) => [r, text]))
      .then(([r, text]) => {
        try {
          answer(r, text);
        } catch (e) {
          pageError(e);
          out.replaceChildren(el('span', 'bad', 'page error: ' + e.message));
        }
      }, (e) => out.replaceChildren(el('span', 'bad', 'request failed: ' +
        (ctl.signal.aborted ? 'no answer in ' + EXPLAIN_TIMEOUT_MS / 1000 + ' s' : e.message))))
      .finally(() => { clearTimeout(timeout); btn.disabled = false; });
  }

  // answer shows the explainer's answer (a decision, or why there is none).
  function answer(r, text) {
    const out = $('explain-result'), table = $('explain-candidates');
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
  }

  function candidates(x) {
    const cls = ['', 'num', 'num', 'num', 'num', 'num', 'num', 'num', 'num'];
    sync($('explain-candidates').tBodies[0], x.candidates.map((c) => c.backend), cls, (tr, i) => {
      const c = x.candidates[i], l = c.load;
      tr.className = c.chosen ? 'chosen' : '';
      nameCell(tr, 0, (c.chosen ? '▶ ' : '') + c.backend);
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
    const live = $('live'), cls = 'live' + (kind === 'ok' ? '' : ' ' + kind);
    if (live.className !== cls) live.className = cls;
    if (live.textContent !== text) live.textContent = text;
  }
  // updateLive tells from the last good sample's age, not from how the
  // last poll ended: a poll that hangs ends late or never.
  function updateLive() {
    if (document.hidden) return;
    const now = Date.now(), quiet = now - Math.max(lastOK, resumedAt);
    if (lastOK && !lastErr && quiet <= STALE_MS) { setLive('ok', 'live'); return; }
    const since = lastOK ? 'no answer for ' + (quiet / 1000).toFixed(1) + ' s' : 'no answer yet';
    setLive(quiet > DOWN_MS ? 'down' : 'stale', lastErr ? 'unreachable: ' + lastErr + ' · ' + since : lastOK ? since : 'connecting');
  }
  // pageError reports a fault of the page itself (not the node's): once
  // per message on the console, and on the page until a render succeeds.
  function pageError(e) {
    const msg = (e && e.message) || String(e), box = $('page-error');
    if (msg !== shownError) console.error('kvmesh status page: rendering failed:', e);
    shownError = msg;
    box.hidden = false;
    setText('page-error', 'page error: ' + msg);
    box.title = (e && e.stack) || msg;
  }
  function show(s) {
    try {
      ingest(s);
      lastState = s;
      if (samples.length) render(s);
      if (shownError) { shownError = ''; $('page-error').hidden = true; }
    } catch (e) {
      pageError(e);
    }
  }
  function schedule(ms) { clearTimeout(timer); timer = setTimeout(poll, ms); }
  function poll() {
    if (inFlight) return; // the poll in flight schedules the next: never two at once
    if (document.hidden) { schedule(POLL_MS); return; }
    inFlight = true;
    const ctl = new AbortController(), timeout = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    fetch('ui/state', { cache: 'no-store', signal: ctl.signal })
      .then((r) => { if (!r.ok) throw new Error('HTTP ' + r.status); return r.json(); })
      .then((s) => { failures = 0; lastErr = ''; lastOK = Date.now(); show(s); },
        (e) => { failures++; lastErr = ctl.signal.aborted ? 'no answer in ' + FETCH_TIMEOUT_MS / 1000 + ' s' : e.message; })
      .finally(() => {
        clearTimeout(timeout);
        inFlight = false;
        updateLive();
        schedule(failures ? Math.min(POLL_MS * 2 ** failures, MAX_BACKOFF_MS) : POLL_MS);
      });
  }

  document.addEventListener('visibilitychange', () => {
    if (document.hidden) return;
    // Back from hidden: windows restart (no "last 10 s" over the hidden
    // time) and the silence is counted from now.
    resumedAt = Date.now();
    newSegment = true;
    poll();
  });
  $('explain-go').addEventListener('click', explain);
  $('explain-body').addEventListener('input', () => { bodyEdited = true; });
  setInterval(updateLive, 250);
  poll();
})();
