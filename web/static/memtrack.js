// memtrack's page: reads data.json and draws one timeline per device that
// records a history, and keeps the table current. No library, nothing
// loaded from elsewhere.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const W = 960, H0 = 320, ML = 80, MR = 24, MT0 = 28, MB = 40;
  const SITE_COLORS = ["#9ecae1", "#a1d99b", "#fdd0a2", "#dadaeb", "#fcbba1", "#c7e9c0", "#e0e0e0"];
  const MARK_COLORS = ["#8c6bb1", "#41ab5d", "#ef6548", "#4292c6", "#fe9929", "#807dba", "#969696"];
  const BAND = 16; // the height of a row of marks' labels
  const FOLD_CATEGORIES = 17; // more rows than this: the category table is folded
  const openCategories = new Set(); // the devices whose folded category table was opened
  const CATEGORY_COLORS = ["#6baed6", "#fd8d3c", "#74c476", "#9e9ac8", "#fdae6b", "#a1d99b", "#bcbddc", "#fdd0a2", "#e7cb94", "#c6dbef", "#d9d9d9"];
  const refresh = Number(document.body.dataset.refresh || 0);
  // The plot stacks the allocation sites, or the categories with
  // ?stack=categories (and wherever no sites are recorded).
  const stackBy = new URLSearchParams(location.search).get("stack") === "categories" ? "categories" : "sites";
  function stackOf(h) {
    if (h.categories && (stackBy === "categories" || !h.sites)) {
      return { by: "categories", series: h.categories, colors: CATEGORY_COLORS };
    }
    return { by: "sites", series: h.sites || [], colors: SITE_COLORS };
  }

  // fmtBytes writes n as package web's table does (internal/bytesize):
  // three significant figures, the unit chosen after rounding, so that
  // 1048575 is "1.00 MiB", never "1024 KiB".
  function fmtBytes(n) {
    const a = Math.abs(n);
    if (a < 1024) return n + " B";
    const units = "KMGTPE";
    let v = a, u = -1;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    const prec = x => +x.toFixed(1) >= 100 ? 0 : +x.toFixed(2) >= 10 ? 1 : 2;
    let p = prec(v);
    if (+v.toFixed(p) >= 1024 && u < units.length - 1) { v /= 1024; u++; p = prec(v); }
    return (n < 0 ? "-" : "") + v.toFixed(p) + " " + units[u] + "iB";
  }
  function fmtTime(ms) {
    return ms >= 1000 ? (ms / 1000).toFixed(3) + " s" : ms.toFixed(1) + " ms";
  }
  // fmtTick writes an axis value: as few digits as the step needs.
  function fmtTick(v, step, unit) {
    const digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    return v.toFixed(digits) + " " + unit;
  }
  function fmtTickBytes(b) {
    if (b === 0) return "0";
    return fmtBytes(b).replace(/\.0+ /, " ").replace(/(\.\d*?)0+ /, "$1 ");
  }
  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function html(name, attrs, text) {
    const e = document.createElement(name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  // niceStep returns a tick step near span/count: 1, 2 or 5 times a power
  // of ten (times), or a power of two (bytes).
  function niceStep(span, count, binary) {
    const raw = span / count;
    if (binary) {
      let s = 1;
      while (s * 2 <= raw) s *= 2;
      return s < raw ? s * 2 : s;
    }
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function plot(dev) {
    const h = dev.history;
    const sec = html("section", { "class": "device-plot", "data-device": dev.name });
    sec.appendChild(html("h2", {}, dev.name));
    if (!h) {
      sec.appendChild(html("p", { "class": "note" }, "No history recorded: call Device.History().Enable to see the timeline."));
      if (dev.categories) sec.appendChild(categoryTable(dev.name, dev.categories));
      processNote(sec, dev);
      return sec;
    }
    const n = h.t.length;
    const marks = h.marks || [];
    const tEnd = Math.max(n ? h.t[n - 1] : 0, ...(h.refusals || []).map(r => r.t), ...marks.map(m => m.span ? m.end : m.t), 1);
    // Above the plot, a row of labels per lane of spans, and one for the
    // marks that are no span.
    const spanRows = marks.reduce((a, m) => m.span ? Math.max(a, (m.lane || 0) + 1) : a, 0);
    const instantRow = marks.some(m => !m.span) ? spanRows : -1;
    const rows = spanRows + (instantRow >= 0 ? 1 : 0);
    const MT = MT0 + rows * BAND, H = H0 + rows * BAND;
    let yMax = Math.max(h.max, 1);
    const limitShown = dev.limit > 0 && dev.limit <= 4 * yMax;
    if (limitShown) yMax = Math.max(yMax, dev.limit);
    yMax *= 1.12;
    const x = t => ML + (W - ML - MR) * t / tEnd;
    const y = b => H - MB - (H - MT - MB) * b / yMax;
    const svg = el("svg", {
      "class": "plot", "data-device": dev.name, viewBox: `0 0 ${W} ${H}`, width: W, height: H,
      role: "img", "aria-label": `memory of ${dev.name} over time`,
      "data-y0": y(0), "data-ymax-px": MT, "data-ymax": yMax,
    });

    // Grid and axes.
    const grid = el("g", { "class": "grid" }), axis = el("g", { "class": "axis" });
    const yStep = niceStep(yMax, 5, true);
    for (let b = 0; b <= yMax; b += yStep) {
      grid.appendChild(el("line", { x1: ML, x2: W - MR, y1: y(b), y2: y(b) }));
      axis.appendChild(el("text", { x: ML - 6, y: y(b) + 4, "text-anchor": "end" }, fmtTickBytes(b)));
    }
    const tStep = niceStep(tEnd, 8, false);
    const inSeconds = tStep >= 1000;
    for (let t = 0; t <= tEnd + 1e-9; t += tStep) {
      grid.appendChild(el("line", { x1: x(t), x2: x(t), y1: MT, y2: H - MB }));
      axis.appendChild(el("text", { x: x(t), y: H - MB + 16, "text-anchor": "middle" },
        inSeconds ? fmtTick(t / 1000, tStep / 1000, "s") : fmtTick(t, tStep, "ms")));
    }
    axis.appendChild(el("text", { x: W - MR, y: H - 4, "text-anchor": "end" }, "time since recording began"));
    axis.appendChild(el("line", { x1: ML, x2: W - MR, y1: y(0), y2: y(0) }));
    axis.appendChild(el("line", { x1: ML, x2: ML, y1: MT, y2: H - MB }));
    svg.appendChild(grid);
    svg.appendChild(axis);

    // gapAfter[i]: a gap lies between point i and point i+1.
    const gaps = h.gaps || [];
    const gapAfter = new Array(n).fill(false);
    for (const g of gaps) {
      for (let i = 0; i + 1 < n; i++) if (h.t[i] <= g.from && h.t[i + 1] >= g.to) gapAfter[i] = true;
      const r = el("rect", { "class": "gap", x: x(g.from), y: MT, width: Math.max(x(g.to) - x(g.from), 2), height: H - MT - MB, fill: "#f2f2f2" });
      r.appendChild(el("title", {}, `${g.missing} events lost: no line drawn`));
      svg.appendChild(r);
    }
    // The step line of values v (a segment per run without a gap), closed
    // down to base (another step line) when base is given: an area.
    function steps(v, base) {
      let d = "", start = 0;
      const flush = end => {
        if (end < start) return;
        let s = `M${x(h.t[start])},${y(v[start])}`;
        for (let i = start + 1; i <= end; i++) s += `H${x(h.t[i])}V${y(v[i])}`;
        if (end === n - 1) s += `H${x(tEnd)}`;
        if (base) {
          s += `V${y(base[end])}`;
          for (let i = end; i > start; i--) s += `H${x(h.t[i])}V${y(base[i - 1])}`;
          s += `H${x(h.t[start])}Z`;
        }
        d += s;
      };
      for (let i = 0; i < n; i++) if (gapAfter[i] || i === n - 1) { flush(i); start = i + 1; }
      return d;
    }

    // The largest sites, or the categories, stacked.
    const legend = html("div", { "class": "legend" });
    const stack = stackOf(h);
    if (stack.series.length && n) {
      let base = new Array(n).fill(0);
      stack.series.forEach((s, k) => {
        const top = base.map((b, i) => b + s.bytes[i]);
        const color = stack.colors[Math.min(k, stack.colors.length - 1)];
        const p = el("path", stack.by === "sites"
          ? { "class": "site", "data-site": s.name, d: steps(top, base), fill: color, stroke: "none" }
          : { "class": "category", "data-category": s.name, d: steps(top, base), fill: color, stroke: "none" });
        p.appendChild(el("title", {}, s.name));
        svg.appendChild(p);
        const item = html("span", {});
        item.appendChild(html("span", { "class": "swatch", title: s.name }));
        item.lastChild.style.background = color;
        item.appendChild(document.createTextNode(s.name));
        legend.appendChild(item);
        base = top;
      });
    }
    drawMarks(svg, marks, x, MT, H, instantRow);
    if (n) svg.appendChild(el("path", { "class": "series", d: steps(h.bytes), fill: "none", stroke: "#1f5fa8", "stroke-width": 2 }));

    // Refused allocations.
    for (const r of h.refusals || []) {
      const l = el("line", { "class": "refusal", "data-kind": r.kind, x1: x(r.t), x2: x(r.t), y1: MT, y2: H - MB, stroke: "#d62728", "stroke-dasharray": "2,3" });
      l.appendChild(el("title", {}, `${r.kind}: ${fmtBytes(r.size)} refused at ${fmtTime(r.t)}`));
      svg.appendChild(l);
      const right = x(r.t) > W / 2;
      svg.appendChild(el("text", { "class": "refusal-label", x: x(r.t) + (right ? -4 : 4), y: H - MB - 6, "text-anchor": right ? "end" : "start" }, `${r.kind}: ${fmtBytes(r.size)} refused`));
    }
    // The limit.
    if (dev.limit > 0) {
      if (limitShown) {
        svg.appendChild(el("line", { "class": "limit", "data-bytes": dev.limit, x1: ML, x2: W - MR, y1: y(dev.limit), y2: y(dev.limit), stroke: "#b00", "stroke-dasharray": "6,4", "stroke-width": 1.5 }));
        svg.appendChild(el("text", { "class": "limit-label", x: W - MR - 4, y: y(dev.limit) - 5, "text-anchor": "end" }, `limit ${fmtBytes(dev.limit)}`));
      } else {
        svg.appendChild(el("text", { "class": "limit-label", x: W - MR - 4, y: MT - 8, "text-anchor": "end" }, `limit ${fmtBytes(dev.limit)} (above the plot)`));
      }
    }
    // The peak.
    if (n) {
      const px = x(h.maxT), py = y(h.max);
      svg.appendChild(el("circle", { "class": "peak-marker", cx: px, cy: py, r: 4.5, fill: "#1f5fa8", stroke: "#fff", "stroke-width": 1.5 }));
      const label = h.maxAtPeak
        ? `peak ${fmtBytes(dev.peakTracked)} (${dev.peakTracked} B) at ${fmtTime(h.maxT)}`
        : `highest in the history ${fmtBytes(h.max)} (${h.max} B) at ${fmtTime(h.maxT)}; peak ${fmtBytes(dev.peakTracked)} outside it`;
      const right = px > W / 2;
      svg.appendChild(el("text", {
        "class": "peak-label", "data-bytes": h.maxAtPeak ? dev.peakTracked : h.max, "data-at-peak": h.maxAtPeak,
        x: right ? px - 8 : px + 8, y: Math.max(py - 8, MT - 10), "text-anchor": right ? "end" : "start",
      }, label));
    }
    sec.appendChild(svg);
    if (legend.childNodes.length) sec.appendChild(legend);
    const notes = [`${h.events} events in a ring of ${h.maxEntries}`];
    if (h.overwritten) notes.push(`${h.overwritten} older events overwritten`);
    if (h.lost) notes.push(`${h.lost} lost`);
    if (n < h.events - (h.refusals || []).length - (h.markEvents || 0)) notes.push(`${n} points plotted`);
    if (h.marksLeftOut) notes.push(`${h.marksLeftOut} older marks not drawn`);
    sec.appendChild(html("p", { "class": "note" }, notes.join(" · ")));
    if (h.categories && h.sites) {
      const other = stack.by === "sites" ? "categories" : "sites";
      const p = html("p", { "class": "note" });
      p.appendChild(html("a", { href: "?stack=" + other }, "stack by " + other));
      sec.appendChild(p);
    }
    if (dev.categories) sec.appendChild(categoryTable(dev.name, dev.categories));
    processNote(sec, dev);
    if (dev.graphReserved) {
      sec.appendChild(html("p", { "class": "note graphs" },
        `CUDA graphs (the driver's figures, not tracked): ${fmtBytes(dev.graphReserved)} reserved, ${fmtBytes(dev.graphUsed || 0)} used`));
    }
    if (dev.reservations) {
      sec.appendChild(html("p", { "class": "note address-space" },
        `address space: ${fmtBytes(dev.addressSpace)} in ${dev.reservations} reservation${dev.reservations === 1 ? "" : "s"} (no memory; the memory mapped into them is tracked)`));
    }
    return sec;
  }

  // processNote adds the driver's per-process figures (NVML) to a device's
  // section: this process's, and each other process's; or why there are
  // none, on a device that should have them.
  function processNote(sec, dev) {
    if (!dev.perProcess) {
      if (dev.perProcessError) sec.appendChild(html("p", { "class": "note processes" }, "per process (NVML): unavailable: " + dev.perProcessError));
      return;
    }
    const t = html("table", { "class": "processes" });
    const head = html("tr", {});
    for (const c of ["process (NVML)", "used", "untracked"]) head.appendChild(html("th", {}, c));
    t.appendChild(html("thead", {})).appendChild(head);
    const body = t.appendChild(html("tbody", {}));
    const row = (name, used, untracked) => {
      const tr = html("tr", {});
      tr.appendChild(cell(name));
      tr.appendChild(cell(fmtBytes(used), used + " B"));
      tr.appendChild(untracked === null ? cell("-") : cell(fmtBytes(untracked), untracked + " B"));
      body.appendChild(tr);
    };
    row("this process", dev.processUsed, dev.processUntracked);
    for (const p of dev.otherProcesses || []) row(`${p.pid} ${p.name || "(name unknown)"}`, p.used, null);
    if (dev.otherProcesses) row("other processes", dev.otherProcessesUsed, null);
    sec.appendChild(t);
  }

  // drawMarks draws the spans as bands over the plot's height, labelled in
  // their lane's row above it, and the other marks as lines labelled in
  // their own row; the plot's area starts at top.
  function drawMarks(svg, marks, x, top, height, instantRow) {
    const colors = {};
    const colorOf = name => colors[name] || (colors[name] = MARK_COLORS[Object.keys(colors).length % MARK_COLORS.length]);
    const rowY = r => 2 + r * BAND;
    const label = (text, x0, width, y, cls) => {
      const room = Math.floor((width - 6) / 6.2); // characters of the 11 px font that fit
      if (room < 1) return null;
      return el("text", { "class": cls, x: x0 + 3, y: y + BAND - 5 }, text.length > room ? text.slice(0, Math.max(room - 1, 1)) + "…" : text);
    };
    for (const m of marks) {
      const color = colorOf(m.name);
      const x0 = x(m.t);
      if (m.span) {
        const w = Math.max(x(m.end) - x0, 1);
        const what = `${m.name}: ${fmtTime(m.t)} to ${fmtTime(m.end)}` + (m.open ? " (not ended)" : "") + (m.beginLost ? " (began before the history)" : "");
        const band = el("rect", { "class": "span-band", "data-mark": m.name, x: x0, y: top, width: w, height: height - top - MB, fill: color, "fill-opacity": 0.1 });
        band.appendChild(el("title", {}, what));
        svg.appendChild(band);
        const y = rowY(m.lane || 0);
        const bar = el("rect", { "class": "span", "data-mark": m.name, "data-from": m.t, "data-to": m.end, x: x0, y: y, width: w, height: BAND - 2, fill: color, "fill-opacity": 0.35, stroke: color });
        bar.appendChild(el("title", {}, what));
        svg.appendChild(bar);
        const t = label(m.name, x0, w, y, "span-label");
        if (t) svg.appendChild(t);
      } else {
        const y = rowY(instantRow);
        const l = el("line", { "class": "mark", "data-mark": m.name, "data-t": m.t, x1: x0, x2: x0, y1: y, y2: height - MB, stroke: color, "stroke-dasharray": "1,2" });
        l.appendChild(el("title", {}, `${m.name} at ${fmtTime(m.t)}`));
        svg.appendChild(l);
        const t = el("text", { "class": "mark-label", x: x0 + 3, y: y + BAND - 5 }, m.name);
        svg.appendChild(t);
      }
    }
  }

  // categoryTable lists a device's categories and the memory outside them.
  function categoryTable(name, cats) {
    const t = html("table", { "class": "categories" });
    const head = html("tr", {});
    for (const c of ["category", "tracked", "peak tracked", "buffers", "failed allocs", "limit"]) head.appendChild(html("th", {}, c));
    t.appendChild(html("thead", {})).appendChild(head);
    const body = t.appendChild(html("tbody", {}));
    for (const c of cats) {
      const tr = html("tr", { "data-category": c.name });
      tr.appendChild(cell(c.name));
      tr.appendChild(cell(fmtBytes(c.tracked), c.tracked + " B"));
      tr.appendChild(c.name === "uncategorised" ? cell("-", "no peak is kept of the memory outside the categories") : cell(fmtBytes(c.peakTracked), c.peakTracked + " B"));
      tr.appendChild(cell(String(c.buffers)));
      tr.appendChild(cell(String(c.failedAllocs)));
      tr.appendChild(c.limit ? cell(fmtBytes(c.limit), c.limit + " B") : cell("none"));
      body.appendChild(tr);
    }
    if (cats.length <= FOLD_CATEGORIES) return t;
    // Many categories (a category per layer): the table folded, so that the
    // next device's plot stays near.
    // A refresh draws it anew, open where it was opened.
    const d = html("details", { "class": "categories" });
    d.open = openCategories.has(name);
    d.addEventListener("toggle", () => { if (d.open) openCategories.add(name); else openCategories.delete(name); });
    d.appendChild(html("summary", {}, `${cats.length - 1} categories and the memory outside them`));
    d.appendChild(t);
    return d;
  }

  function cell(text, title) {
    const td = html("td", title ? { title: title } : {}, text);
    return td;
  }
  function table(devs) {
    const body = document.querySelector("#devices tbody");
    const rows = devs.map(d => {
      const tr = html("tr", { "data-device": d.name });
      tr.appendChild(cell(d.name));
      tr.appendChild(cell(fmtBytes(d.tracked), d.tracked + " B"));
      tr.appendChild(cell(fmtBytes(d.peakTracked), d.peakTracked + " B"));
      tr.appendChild(d.limit ? cell(fmtBytes(d.limit), d.limit + " B") : cell("none"));
      if (d.infoError) {
        const td = cell("unavailable", d.infoError);
        td.colSpan = 2;
        tr.appendChild(td);
      } else {
        tr.appendChild(cell(fmtBytes(d.free), d.free + " B"));
        tr.appendChild(cell(fmtBytes(d.total), d.total + " B"));
      }
      tr.appendChild(cell(String(d.buffers)));
      tr.appendChild(cell(String(d.failedAllocs)));
      tr.appendChild(cell(d.history ? `${d.history.events} events of ${d.history.maxEntries}` : "off"));
      const prof = html("td", {});
      if (d.sites) {
        prof.appendChild(html("a", { href: "./" + d.name }, "in use"));
        prof.appendChild(document.createTextNode(" · "));
        prof.appendChild(html("a", { href: "./" + d.name + "?peak=1" }, "at peak"));
      } else {
        prof.textContent = "sites off";
      }
      tr.appendChild(prof);
      return tr;
    });
    body.replaceChildren(...rows);
  }

  async function update() {
    try {
      const resp = await fetch("data.json", { cache: "no-store" });
      if (!resp.ok) throw new Error(`data.json: ${resp.status} ${resp.statusText}`);
      const data = await resp.json();
      table(data.devices);
      document.getElementById("plots").replaceChildren(...data.devices.map(plot));
      document.getElementById("updated").textContent = "read at " + new Date(data.time).toLocaleTimeString();
      document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
    } catch (e) {
      document.getElementById("updated").textContent = "not updated: " + e.message;
    }
    if (refresh > 0) setTimeout(update, refresh * 1000);
  }
  update();
})();
