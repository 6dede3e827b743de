// kvmesh status page: small canvas charts (no library, no network).
'use strict';
(function () {
  // The same colours as the .c0 ... .c12 classes of ui.css.
  const palette = ['#5fd38d', '#8a9bb0', '#ffc857', '#ff6b6b', '#c38bff', '#ff9f43', '#4fb3ff', '#f78fb3',
    '#48dbfb', '#c8d6e5', '#9b8f6b', '#6be0c8', '#e2a36b', '#e056fd'];
  const grid = '#243041', label = '#8a9bb0', font = '10px system-ui, sans-serif';
  const padL = 38, padR = 8, padT = 8, padB = 18;

  // Canvas widths come from data-width, else from a ResizeObserver: reading
  // clientWidth right after the page wrote its rows forced a layout per
  // canvas drawn (per backend row), most of the page's CPU with many backends.
  // A canvas's first draw reads its width once.
  const widths = new WeakMap();
  const resized = typeof ResizeObserver === 'function' ?
    new ResizeObserver((es) => { for (const e of es) widths.set(e.target, e.contentRect.width); }) : null;
  function width(canvas) {
    if (canvas.dataset.width) return Number(canvas.dataset.width);
    let w = widths.get(canvas);
    if (w === undefined || !resized) {
      w = canvas.clientWidth;
      widths.set(canvas, w);
      if (resized) resized.observe(canvas);
    }
    return w;
  }

  // prepare sizes the canvas's backing store to its CSS width (and its
  // data-height) at the device's pixel ratio and clears it.
  function prepare(canvas) {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(width(canvas) || 0, 40);
    const h = Number(canvas.dataset.height) || canvas.clientHeight || 40;
    const bw = Math.round(w * dpr), bh = Math.round(h * dpr);
    if (canvas.width !== bw || canvas.height !== bh) {
      canvas.width = bw;
      canvas.height = bh;
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    return { ctx, w, h };
  }

  function message(c, text) {
    c.ctx.fillStyle = label;
    c.ctx.font = '12px system-ui, sans-serif';
    c.ctx.textAlign = 'center';
    c.ctx.textBaseline = 'middle';
    c.ctx.fillText(text, c.w / 2, c.h / 2);
  }

  // frame draws the y grid (ticks at 0, max/2, max) and the x labels of a
  // time axis ending at t1; it returns the plot's mapping functions.
  function frame(c, t0, t1, yMax, yFormat) {
    const ctx = c.ctx, pw = c.w - padL - padR, ph = c.h - padT - padB;
    ctx.font = font;
    ctx.lineWidth = 1;
    for (let i = 0; i <= 2; i++) {
      const v = yMax * i / 2, y = padT + ph - ph * i / 2;
      ctx.strokeStyle = grid;
      ctx.beginPath();
      ctx.moveTo(padL, Math.round(y) + 0.5);
      ctx.lineTo(padL + pw, Math.round(y) + 0.5);
      ctx.stroke();
      ctx.fillStyle = label;
      ctx.textAlign = 'right';
      ctx.textBaseline = 'middle';
      ctx.fillText(yFormat(v), padL - 5, y);
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    const span = (t1 - t0) / 1000;
    for (let s = 0; s <= span; s += 30) {
      const x = padL + pw - pw * s / span;
      ctx.fillText(s === 0 ? 'now' : '-' + (s >= 60 ? (s / 60) + 'm' : s + 's'), x, padT + ph + 4);
    }
    return {
      x: (t) => padL + pw * (t - t0) / (t1 - t0),
      y: (v) => padT + ph - ph * Math.min(Math.max(v / yMax, 0), 1),
      pw, ph,
    };
  }

  // lines draws time series: opts.series = [{color, width, points: [[t, v|null], ...]}]
  // over [opts.t0, opts.t1], y from 0 to opts.yMax.
  function lines(canvas, opts) {
    const c = prepare(canvas);
    const f = frame(c, opts.t0, opts.t1, opts.yMax, opts.yFormat);
    let any = false;
    for (const s of opts.series) {
      const ctx = c.ctx;
      ctx.strokeStyle = s.color;
      ctx.lineWidth = s.width || 1.5;
      ctx.globalAlpha = s.alpha || 1;
      ctx.beginPath();
      let pen = false;
      for (const [t, v] of s.points) {
        if (v === null || v === undefined || t < opts.t0) {
          pen = false;
          continue;
        }
        any = true;
        if (pen) ctx.lineTo(f.x(t), f.y(v));
        else ctx.moveTo(f.x(t), f.y(v));
        pen = true;
      }
      ctx.stroke();
      ctx.globalAlpha = 1;
    }
    if (!any) message(c, opts.empty || 'waiting for traffic');
  }

  // stacked draws stacked areas: opts.times = [t...], opts.layers =
  // [{color, values: [v...]}] (bottom first); y from 0 to the largest sum.
  function stacked(canvas, opts) {
    const c = prepare(canvas);
    const n = opts.times.length;
    const sums = new Array(n).fill(0);
    for (const l of opts.layers) l.values.forEach((v, i) => { sums[i] += v || 0; });
    const top = Math.max(1, ...sums);
    const yMax = niceCeil(top);
    const f = frame(c, opts.t0, opts.t1, yMax, opts.yFormat);
    if (n < 2 || sums.every((v) => v === 0)) {
      message(c, opts.empty || 'waiting for traffic');
      return;
    }
    const base = new Array(n).fill(0);
    const ctx = c.ctx;
    for (const l of opts.layers) {
      ctx.beginPath();
      for (let i = 0; i < n; i++) {
        const x = f.x(opts.times[i]), y = f.y(base[i] + (l.values[i] || 0));
        if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      }
      for (let i = n - 1; i >= 0; i--) ctx.lineTo(f.x(opts.times[i]), f.y(base[i]));
      ctx.closePath();
      ctx.fillStyle = l.color;
      ctx.globalAlpha = 0.75;
      ctx.fill();
      ctx.globalAlpha = 1;
      for (let i = 0; i < n; i++) base[i] += l.values[i] || 0;
    }
  }

  // bars draws two sets of fractions per label: opts.recent filled,
  // opts.total outlined.
  function bars(canvas, opts) {
    const c = prepare(canvas), ctx = c.ctx;
    const k = opts.labels.length;
    const vals = opts.recent.concat(opts.total).filter((v) => v > 0);
    if (k === 0 || vals.length === 0) {
      frame(c, 0, 1, 1, pct0);
      c.ctx.clearRect(0, c.h - padB, c.w, padB);
      message(c, 'no routed request yet');
      return;
    }
    const yMax = Math.min(1, niceCeil(Math.max(...vals) * 1.05, true));
    const pw = c.w - padL - padR, ph = c.h - padT - padB;
    const f = frame(c, 0, 1, yMax, pct0);
    ctx.clearRect(0, padT + ph + 1, c.w, padB); // no time labels on this axis
    const slot = pw / k, bw = Math.max(2, slot * 0.62);
    ctx.font = font;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    for (let i = 0; i < k; i++) {
      const x = padL + slot * i + (slot - bw) / 2;
      const r = opts.recent[i] || 0, t = opts.total[i] || 0;
      ctx.fillStyle = palette[6];
      ctx.fillRect(x, f.y(r), bw, padT + ph - f.y(r));
      ctx.strokeStyle = label;
      ctx.lineWidth = 1.2;
      ctx.strokeRect(x + 0.5, f.y(t) + 0.5, bw - 1, Math.max(padT + ph - f.y(t) - 1, 0));
      ctx.fillStyle = label;
      ctx.fillText(opts.labels[i], padL + slot * i + slot / 2, padT + ph + 4);
    }
  }

  // spark draws one small line over [t0, t1], y from 0 to 1.
  function spark(canvas, points, t0, t1, color) {
    const c = prepare(canvas), ctx = c.ctx;
    ctx.strokeStyle = grid;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(0, c.h - 0.5);
    ctx.lineTo(c.w, c.h - 0.5);
    ctx.stroke();
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let pen = false;
    for (const [t, v] of points) {
      if (v === null || t < t0) {
        pen = false;
        continue;
      }
      const x = c.w * (t - t0) / (t1 - t0), y = 2 + (c.h - 4) * (1 - Math.min(Math.max(v, 0), 1));
      if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      pen = true;
    }
    ctx.stroke();
  }

  function pct0(v) { return Math.round(v * 100) + '%'; }

  // niceCeil rounds v up to 1, 2 or 5 times a power of ten (fractions:
  // to a multiple of 0.1).
  function niceCeil(v, fraction) {
    if (fraction) return Math.max(0.1, Math.ceil(v * 10) / 10);
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  window.KVCharts = { palette, lines, stacked, bars, spark, pct0 };
})();
