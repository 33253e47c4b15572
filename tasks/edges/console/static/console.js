// gpusched console: the cluster map, the live feed, refresh on change. No framework, no CDN.
"use strict";
(() => {
  const GIB = 1073741824;
  const page = document.body.dataset.page;
  const gib = (n) => (n / GIB).toFixed(1);
  const el = (tag, attrs, text) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const debounce = (fn, ms) => { let t = null; return () => { clearTimeout(t); t = setTimeout(fn, ms); }; };

  // ------------------------------------------------------------------ live feed (every page)
  const handlers = [];
  const live = document.getElementById("live");
  const source = new EventSource("/api/feed");
  source.onopen = () => { live.textContent = "live"; live.classList.add("on"); };
  source.onerror = () => { live.textContent = "reconnecting…"; live.classList.remove("on"); };
  for (const kind of ["decision", "cluster", "other"]) {
    source.addEventListener(kind, (message) => {
      const event = JSON.parse(message.data);
      for (const handle of handlers) handle(event);
    });
  }

  // ------------------------------------------------------------------ cluster map
  function hue(label) {
    let h = 0;
    for (let i = 0; i < label.length; i++) h = (h * 31 + label.charCodeAt(i)) >>> 0;
    return h % 360;
  }

  function gpuBackground(gpu, holders) {
    const [, , total, allocatable, booked, outside, held] = gpu;
    if (!total) return "#fff";
    const stops = [];
    let at = 0;
    const add = (color, amount) => {
      if (amount <= 0) return;
      const end = Math.min(100, at + (amount / total) * 100);
      stops.push(`${color} ${at.toFixed(2)}% ${end.toFixed(2)}%`);
      at = end;
    };
    for (const [index, bytes] of held) add(holders[index].color, bytes);
    add("var(--outside)", outside);
    add("var(--reserved)", total - allocatable);
    stops.push(`var(--free) ${at.toFixed(2)}% 100%`);
    return `linear-gradient(to top, ${stops.join(", ")})`;
  }

  let mapData = null;
  let pinned = null;
  let wantedVersion = 0;  // the newest cluster version the feed announced

  function showDetail(worker, gpu) {
    const [index, kind, total, allocatable, booked, outside, held] = gpu;
    const [type, name] = mapData.kinds[kind];
    const box = document.getElementById("detail");
    box.replaceChildren();
    const title = el("h3");
    title.append(el("a", { href: `/workers/${worker.id}` }, worker.name), ` ${type}:${index}`);
    box.append(title, el("div", { class: "muted" }, `${name} · worker ${worker.state}`));
    const facts = el("dl", { class: "facts" });
    const free = allocatable - booked;
    for (const [k, v] of [["total", gib(total)], ["allocatable", gib(allocatable)], ["booked", gib(booked)],
                          ["outside", gib(outside)], ["free", gib(free) + (free < 0 ? " OVERBOOKED" : "")]]) {
      facts.append(el("dt", {}, k), el("dd", {}, `${v} GiB`));
    }
    box.append(facts, el("h3", {}, held.length ? "Held by" : "Held by nothing"));
    const list = el("ul", { id: "holders" });
    for (const [holderIndex, bytes] of held) {
      const holder = mapData.holders[holderIndex];
      const item = el("li", { "data-holder": holder.label });
      if (holder.request_id) item.append(el("a", { href: `/requests/${encodeURIComponent(holder.request_id)}` }, holder.request_id));
      else item.append(`${holder.instance} (control plane)`);
      item.append(` ${gib(bytes)} GiB${holder.pinned ? " · pinned" : ""}`);
      list.append(item);
    }
    box.append(list);
  }

  function workerElement(worker, vanished) {
    const down = worker.state !== "ready";
    const box = el("div", { class: `w${down ? " down" : ""}${vanished.has(worker.id) ? " vanished" : ""}`,
                            "data-id": worker.id, "data-name": worker.name, "data-state": worker.state });
    const label = down ? `${worker.name} (${worker.state})` : worker.name;
    box.append(el("a", { href: `/workers/${worker.id}`, title: label }, label));
    const row = el("div", { class: "gs" });
    worker.gpus.forEach((gpu, position) => {
      const [index, kind, total, allocatable, booked, , held] = gpu;
      const cell = el("div", { class: `g${booked > allocatable ? " over" : ""}`, "data-gpu": index,
                               "data-kind": kind, "data-pos": position });
      if (held.length) cell.dataset.holders = held.map(([h]) => mapData.holders[h].label).join(" ");
      if (held.length || gpu[5] || gpu[2] !== gpu[3]) cell.style.background = gpuBackground(gpu, mapData.holders);
      row.append(cell);
    });
    box.append(row);
    return box;
  }

  function renderMap(data) {
    performance.mark("map-data");  // bench/bench_console.py reads the marks: fetched, built, drawn
    mapData = data;
    for (const holder of data.holders) holder.color = `hsl(${hue(holder.label)} 60% 48%)`;
    const map = document.getElementById("map");
    const vanished = new Set(data.vanished);
    const frag = document.createDocumentFragment();
    for (const worker of data.workers) frag.append(workerElement(worker, vanished));
    map.replaceChildren(frag);
    performance.mark("map-built");
    const s = data.summary;
    document.getElementById("map-summary").textContent =
      `version ${data.version} · ${s.workers} workers (${s.ready} ready, ${s.not_ready} not ready) · ${s.gpus} GPUs · ` +
      `GiB total ${gib(s.total)}, allocatable ${gib(s.allocatable)}, booked ${gib(s.booked)}, free ${gib(s.free)}` +
      (s.overbooked_gpus ? ` · ${s.overbooked_gpus} GPU(s) OVERBOOKED` : "");
    const banner = document.getElementById("suspended");
    const r = data.rescheduling;
    banner.hidden = !r.suspended;
    if (r.suspended) banner.textContent = `Rescheduling SUSPENDED: ${r.down} down and ${r.vanished} vanished of ${r.workers} workers ` +
      `(above max_unreachable_fraction ${r.max_unreachable_fraction}): placements on lost workers are not moved.`;
    const kinds = document.getElementById("f-kind");
    const chosen = kinds.value;
    kinds.replaceChildren(el("option", { value: "" }, "every type"));
    data.kinds.forEach(([type, name], i) => kinds.append(el("option", { value: String(i) }, `${name || "?"} (${type})`)));
    kinds.value = chosen;
    const parked = document.getElementById("parked");
    parked.replaceChildren();
    for (const p of data.parked) {
      const chip = el("a", { class: "chip", href: `/requests?state=parked&reason=${encodeURIComponent(p.reason)}` }, `${p.reason} `);
      chip.append(el("b", {}, String(p.count)));
      parked.append(chip);
    }
    if (!data.parked.length) parked.textContent = "nothing parked";
    applyFilters();
    // "rendered" once the browser has laid out and painted the new map (the frame after it)
    requestAnimationFrame(() => setTimeout(() => {
      performance.mark("map-drawn");
      map.dataset.rendered = String(data.workers.length);
      map.dataset.version = String(data.version);
    }, 0));
    // the server rebuilds the map at most twice a second: ask again while the feed saw newer versions
    if (data.version < wantedVersion) setTimeout(loadMap, 300);
  }

  function applyFilters() {
    if (!mapData) return;
    const kind = document.getElementById("f-kind").value;
    const label = document.getElementById("f-label").value.trim();
    const state = document.getElementById("f-state").value;
    const name = document.getElementById("f-name").value.trim().toLowerCase();
    const [lk, lv] = label.split("=", 2);
    let shown = 0;
    const boxes = document.getElementById("map").children;
    mapData.workers.forEach((worker, i) => {
      const box = boxes[i];
      let keep = !name || worker.name.toLowerCase().includes(name);
      if (keep && lk) keep = lk in worker.labels && (lv === undefined || String(worker.labels[lk]) === lv);
      if (keep && state === "ready") keep = worker.state === "ready";
      if (keep && state === "down") keep = worker.state !== "ready";
      if (keep && state === "free") keep = worker.state === "ready" && worker.gpus.some((g) => g[3] - g[4] - g[5] > 0);
      if (keep && state === "overbooked") keep = worker.gpus.some((g) => g[4] > g[3]);
      let gpus = 0;
      for (const cell of box.lastChild.children) {
        const match = kind === "" || cell.dataset.kind === kind;
        if (cell.hidden === match) cell.hidden = !match;
        gpus += match ? 1 : 0;
      }
      if (box.hidden !== !(keep && gpus)) box.hidden = !(keep && gpus);
      shown += box.hidden ? 0 : 1;
    });
    document.getElementById("map-count").textContent = `${shown} of ${mapData.workers.length} workers shown`;
  }

  function gpuUnder(target) {
    const cell = target.closest ? target.closest(".g") : null;
    if (!cell) return null;
    const worker = mapData.workers.find((w) => String(w.id) === cell.parentNode.parentNode.dataset.id);
    return worker ? [cell, worker, worker.gpus[Number(cell.dataset.pos)]] : null;
  }

  let loading = false;
  let again = false;
  async function loadMap() {
    if (loading) { again = true; return; }
    loading = true;
    try {
      const reply = await fetch("/api/map", { headers: { Accept: "application/json" } });
      if (reply.ok) renderMap(await reply.json());
    } catch (error) {
      document.getElementById("map-summary").textContent = "cannot read the cluster map right now";
    } finally {
      loading = false;
      if (again) { again = false; loadMap(); }
    }
  }

  if (page === "map") {
    loadMap();
    for (const id of ["f-kind", "f-label", "f-state", "f-name"]) {
      document.getElementById(id).addEventListener("input", applyFilters);
    }
    const map = document.getElementById("map");
    map.addEventListener("mouseover", (e) => { const hit = gpuUnder(e.target); if (hit && !pinned) showDetail(hit[1], hit[2]); });
    map.addEventListener("click", (e) => {
      const hit = gpuUnder(e.target);
      if (!hit) return;
      if (pinned) pinned.classList.remove("sel");
      pinned = pinned === hit[0] ? null : hit[0];
      if (pinned) pinned.classList.add("sel");
      showDetail(hit[1], hit[2]);
    });
    const refresh = debounce(loadMap, 250);
    handlers.push((event) => {
      if (event.cluster_version) wantedVersion = Math.max(wantedVersion, Number(event.cluster_version));
      if (event.kind === "cluster" || event.type === "sched.reservation.booked" || event.type === "sched.result.published"
          || event.type === "sched.request.parked") refresh();
    });
  }

  // ------------------------------------------------------------------ pages that refresh on change
  async function swap(selectors) {
    const reply = await fetch(location.href, { headers: { Accept: "text/html" } });
    if (!reply.ok) return;
    const fresh = new DOMParser().parseFromString(await reply.text(), "text/html");
    for (const selector of selectors) {
      const now = document.querySelector(selector);
      const next = fresh.querySelector(selector);
      if (now && next) now.replaceWith(next);
    }
  }
  if (page === "requests") handlers.push(debounce(() => swap(["#requests", "nav.tabs", "p.chips"]), 500));
  if (page === "request") handlers.push(debounce(() => swap(["main"]), 500));
  if (page === "worker") handlers.push(debounce(() => swap(["#gpus"]), 300));
  if (page === "health") setInterval(() => swap(["main"]), 5000);

  // ------------------------------------------------------------------ live feed page
  if (page === "feed") {
    const body = document.querySelector("#feed tbody");
    const shown = (kind) => document.getElementById(`k-${kind}`).checked;
    const filter = () => { for (const row of body.children) row.hidden = !shown(row.dataset.kind); };
    for (const kind of ["decision", "cluster", "other"]) document.getElementById(`k-${kind}`).addEventListener("change", filter);
    handlers.push((event) => {
      const row = el("tr", { class: "new", "data-kind": event.kind, "data-type": event.type, "data-id": event.id });
      row.append(el("td", {}, event.time.slice(11, 23)), el("td", {}, event.kind), el("td", {}, event.type.replace("sched.", "")));
      const cell = el("td");
      if (event.request_id) cell.append(el("a", { href: `/requests/${encodeURIComponent(event.request_id)}` }, event.request_id));
      row.append(cell, el("td", {}, event.cluster_version), el("td", {}, event.detail));
      row.hidden = !shown(event.kind);
      body.prepend(row);
      setTimeout(() => row.classList.remove("new"), 1500);
      while (body.children.length > 500) body.lastChild.remove();
    });
  }
})();
