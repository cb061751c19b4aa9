// gauge playground: settings with llama.cpp's and OpenAI's names, POST /explain streamed, and per
// step the per-stage bar charts and the "shift every logit by c" view. No dependencies.
"use strict";

// [request field, concept, llama.cpp / llama-server name, OpenAI name (null: none), kind, default]
// The mapping follows the lesson's API table (llama-server's fields vs OpenAI's parameters).
const SETTINGS = [
  ["temperature", "Randomness", "--temp / temperature", "temperature", "num", 0.8],
  ["top_p", "Nucleus", "--top-p / top_p", "top_p", "num", 0.95],
  ["top_k", "Top-k", "--top-k / top_k", null, "int", 40],
  ["min_p", "Min-p", "--min-p / min_p", null, "num", 0.05],
  ["seed", "Seed", "--seed / seed", "seed", "int", 42],
  ["frequency_penalty", "Frequency penalty", "--frequency-penalty / frequency_penalty", "frequency_penalty", "num", 0],
  ["presence_penalty", "Presence penalty", "--presence-penalty / presence_penalty", "presence_penalty", "num", 0],
  ["repeat_penalty", "Repetition penalty", "--repeat-penalty / repeat_penalty", null, "num", 1.3],
  ["repeat_last_n", "Penalty window", "--repeat-last-n / repeat_last_n", null, "int", 64],
  ["repeat_penalty_mode", "Penalty mode (gauge)", "repeat_penalty_mode", null, "mode", "ctrl"],
  ["typical_p", "Locally typical", "--typical / typical_p", null, "num", 1],
  ["mirostat", "Mirostat", "--mirostat / mirostat", null, "int", 0],
  ["mirostat_tau", "Mirostat target", "--mirostat-ent / mirostat_tau", null, "num", 5],
  ["mirostat_eta", "Mirostat rate", "--mirostat-lr / mirostat_eta", null, "num", 0.1],
  ["dry_multiplier", "DRY multiplier", "--dry-multiplier / dry_multiplier", null, "num", 0],
  ["dry_base", "DRY base", "--dry-base / dry_base", null, "num", 1.75],
  ["dry_allowed_length", "DRY allowed length", "--dry-allowed-length / dry_allowed_length", null, "int", 2],
  ["xtc_probability", "XTC probability", "--xtc-probability / xtc_probability", null, "num", 0],
  ["xtc_threshold", "XTC threshold", "--xtc-threshold / xtc_threshold", null, "num", 0.1],
  ["top_n_sigma", "Top-n-sigma", "--top-n-sigma / top_n_sigma", null, "num", -1],
  ["logit_bias", "Logit bias", "-l ID+BIAS / logit_bias", "logit_bias", "json", ""],
];

const $ = (id) => document.getElementById(id);
const state = { steps: [], pinned: null, shown: null, presets: {} };

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
}

function buildSettings() {
  const body = document.querySelector("#settings tbody");
  for (const [key, concept, llama, openai, kind, def] of SETTINGS) {
    const tr = document.createElement("tr");
    let input;
    if (kind === "mode") {
      input = `<select id="f-${key}"><option>ctrl</option><option>normalized</option></select>`;
    } else if (kind === "json") {
      input = `<input id="f-${key}" class="wide" placeholder='[[15, -100]]'>`;
    } else {
      input = `<input id="f-${key}" type="number" step="any" value="${def}">`;
    }
    tr.innerHTML = `<td>${esc(concept)}</td><td><code>${esc(llama)}</code></td>` +
      (openai ? `<td><code>${esc(openai)}</code></td>` : `<td class="none">none</td>`) + `<td>${input}</td>`;
    body.appendChild(tr);
    if (kind === "mode") $(`f-${key}`).value = def;
  }
}

function applyPreset(name) {
  const p = state.presets[name];
  if (!p) return;
  for (const [key, , , , kind] of SETTINGS) {
    if (!(key in p) || kind === "json") continue;
    const v = p[key];
    // the server's values are f32 widened to f64 (0.2 -> 0.20000000298...): show them as set
    $(`f-${key}`).value = typeof v === "number" ? String(Number(v.toPrecision(6))) : v;
  }
  for (const b of document.querySelectorAll(".preset")) b.classList.toggle("active", b.dataset.preset === name);
}

function requestBody() {
  const body = { stream: true, n_predict: Number($("n_predict").value), explain: { top: 10 } };
  const prompt = $("prompt").value;
  if ($("chat").checked) body.messages = [{ role: "user", content: prompt }];
  else body.prompt = prompt;
  for (const [key, , , , kind] of SETTINGS) {
    const v = $(`f-${key}`).value.trim();
    if (v === "") continue;
    if (kind === "mode") body[key] = v;
    else if (kind === "json") body[key] = JSON.parse(v);
    else body[key] = Number(v);
  }
  return body;
}

function setStatus(text) { $("status").textContent = text; }

async function generate() {
  state.steps = [];
  state.pinned = null;
  state.shown = null;
  $("output").innerHTML = "";
  $("step").innerHTML = "";
  $("shift-panel").hidden = true;
  setStatus("generating…");
  let body;
  try { body = requestBody(); } catch (e) { setStatus(`error: logit_bias is not JSON (${e.message})`); return; }
  const headers = { "Content-Type": "application/json" };
  const key = $("api-key").value;
  if (key) headers.Authorization = `Bearer ${key}`;
  localStorage.setItem("gauge-api-key", key);
  const resp = await fetch("/explain", { method: "POST", headers, body: JSON.stringify(body) });
  if (!resp.ok) {
    let msg = `${resp.status}`;
    try { msg += `: ${(await resp.json()).error.message}`; } catch (_) { /* not JSON */ }
    setStatus(`error ${msg}`);
    return;
  }
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = ev.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
      if (data) onEvent(JSON.parse(data));
    }
  }
}

function onEvent(ev) {
  if (ev.head) {
    $("chain").textContent = `sampler chain: ${ev.head.chain}` +
      (ev.head.shift_invariant ? "  (shift-invariant)" : "  (NOT shift-invariant)");
  } else if (ev.step) {
    const k = state.steps.length;
    state.steps.push(ev.step);
    const span = document.createElement("span");
    span.className = "tok";
    span.id = `tok-${k}`;
    span.textContent = ev.step.text === "" ? "·" : ev.step.text;
    span.title = `step ${k + 1}: ${ev.step.selected.token}`;
    span.addEventListener("mouseenter", () => { if (state.pinned === null) showStep(k); });
    span.addEventListener("click", () => { state.pinned = k; showStep(k); });
    $("output").appendChild(span);
    setStatus(`generating… ${k + 1} tokens`);
  } else if (ev.done) {
    if (ev.tail) $("output").appendChild(document.createTextNode(ev.tail));
    setStatus(`done: ${state.steps.length} tokens (${ev.stop_type})`);
  } else if (ev.error) {
    setStatus(`error: ${ev.error.message}`);
  }
}

function fmt(p) { return p >= 0.001 || p === 0 ? p.toFixed(3) : p.toExponential(1); }

function barRow(label, before, after, cls, removed) {
  const b = before === null ? "" : `<div class="before" style="width:${(before * 100).toFixed(2)}%"></div>`;
  return `<div class="bar-row${removed ? " removed" : ""}"><span class="label" title="${esc(label)}">${esc(label)}</span>` +
    `<div class="bars">${b}<div class="after ${cls}" style="width:${(after * 100).toFixed(2)}%"></div></div>` +
    `<span>${fmt(after)}</span></div>`;
}

function showStep(k) {
  state.shown = k;
  for (const el of document.querySelectorAll("#output .tok")) el.classList.toggle("sel", el.id === `tok-${k}`);
  const step = state.steps[k];
  const out = [];
  for (const st of step.stages) {
    if (st.name.startsWith("?")) continue;
    const inv = st.shift_invariant ? `<span class="inv">shift-invariant</span>`
      : `<span class="var" title="${esc(st.shift_reason || "")}">NOT shift-invariant</span>`;
    let rows = "";
    for (const c of st.candidates) {
      const gone = c.logit_before !== null && c.logit === null;
      rows += barRow(JSON.stringify(c.token), c.p_before, c.p, "", gone);
    }
    const state_line = (st.state || []).map(([n, a], i) => `${n} ${st.state_before[i][1].toFixed(3)} → ${a.toFixed(3)}`).join(", ");
    out.push(`<div class="chart stage" data-stage="${esc(st.name)}"><h3>${esc(st.name)}</h3>` +
      `<div class="meta">${inv} · ${st.n_before} → ${st.n_after} candidates · removed ${st.n_removed}` +
      (state_line ? ` · ${esc(state_line)}` : "") + `</div>${rows}</div>`);
  }
  out.push(`<div class="chart"><h3>selected</h3><div class="selected-line">step ${k + 1}: ` +
    `<b>${esc(JSON.stringify(step.selected.token))}</b> (id ${step.selected.id}, p ${fmt(step.selected.p)})</div>` +
    `<div class="meta">grey: p entering the stage · blue: p leaving it</div></div>`);
  $("step").innerHTML = out.join("");
  const shifts = step.shifts || [];
  $("shift-panel").hidden = shifts.length === 0;
  if (shifts.length) {
    const slider = $("shift");
    slider.max = String(shifts.length - 1);
    if (Number(slider.value) > shifts.length - 1 || slider.dataset.init !== "1") {
      const zero = shifts.findIndex((s) => s.c === 0);
      slider.value = String(zero >= 0 ? zero : 0);
      slider.dataset.init = "1";
    }
    showShift();
  }
}

function distChart(title, view, base, cls) {
  const p0 = new Map(base.top.map((t) => [t.id, t.p]));
  const ids = new Set(view.top.map((t) => t.id));
  let worst = 0;
  for (const t of view.top) worst = Math.max(worst, Math.abs(t.p - (p0.get(t.id) || 0)));
  for (const t of base.top) if (!ids.has(t.id)) worst = Math.max(worst, t.p);
  let rows = "";
  for (const t of view.top) rows += barRow(JSON.stringify(t.token), p0.has(t.id) ? p0.get(t.id) : 0, t.p, cls, false);
  const same = view.selected === base.selected;
  return `<h3>${title}</h3><div class="meta">max |Δp| vs c = 0: <b class="${worst > 1e-4 ? "var" : "inv"}">${worst.toExponential(2)}</b>` +
    ` · selected ${esc(JSON.stringify(view.selected_token))} ${same ? "(same as c = 0)" : "<b class=\"var\">(changed)</b>"}</div>` +
    `<div class="meta">grey: at c = 0 · colour: at c</div>${rows}`;
}

function showShift() {
  if (state.shown === null) return;
  const shifts = state.steps[state.shown].shifts;
  const s = shifts[Number($("shift").value)];
  const base = shifts.find((x) => x.c === 0) || shifts[0];
  $("shift-value").textContent = `c = ${s.c > 0 ? "+" : ""}${s.c}`;
  $("shift-ctrl").innerHTML = distChart("ctrl (llama.cpp)", s.ctrl, base.ctrl, "ctrl");
  $("shift-normalized").innerHTML = distChart("normalized (gauge)", s.normalized, base.normalized, "normalized");
  $("shift-ctrl").dataset.c = String(s.c);
}

async function init() {
  buildSettings();
  $("api-key").value = localStorage.getItem("gauge-api-key") || "";
  $("generate").addEventListener("click", () => generate().catch((e) => setStatus(`error: ${e.message}`)));
  $("shift").addEventListener("input", showShift);
  for (const b of document.querySelectorAll(".preset")) b.addEventListener("click", () => applyPreset(b.dataset.preset));
  try {
    state.presets = await (await fetch("/playground/presets.json")).json();
  } catch (_) { state.presets = {}; }
}

init();
