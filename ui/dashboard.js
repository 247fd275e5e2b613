// The dashboard: everything the service reports, rendered from the tray's model (event
// `model`), and the changes a user makes (each a command that calls the service).
"use strict";
let model = null;
const pending = new Set(); // targets with a change in flight
let confirmRemove = null; // target awaiting confirmation
let focusAnchor = location.hash ? location.hash.slice(1) : null;

const TARGET_STATE = {
  pending: ["starting", "s-muted"], active: ["active", "s-ok"], draining: ["draining", "s-warn"],
  disabled: ["disabled", "s-muted"], authentication_failed: ["sign-in needed", "s-bad"],
  repair_required: ["needs repair", "s-bad"], unknown: ["unknown state", "s-muted"],
};
const RUNNER_STATE = {
  allocated: "reserved", jit_received: "registered", starting: "starting", idle: "waiting for its job",
  busy: "running a job", finished: "finished", failed: "failed", orphaned: "lost", cleaned: "cleaned",
  unknown: "unknown state",
};

async function act(button, work, errorSlot) {
  if (button) button.disabled = true;
  if (errorSlot) errorSlot.textContent = "";
  try { return await work(); }
  catch (e) { if (errorSlot) errorSlot.textContent = errorText(e); else alertBanner(errorText(e)); }
  finally { if (button) button.disabled = false; }
}

function alertBanner(text) {
  const b = el("div", { class: "banner bad", role: "alert" }, text);
  $("#banners").prepend(b);
  setTimeout(() => b.remove(), 15000);
}

function copyButton(text, label) {
  const b = el("button", { type: "button", "aria-label": `Copy ${label}` }, "Copy");
  b.addEventListener("click", () => act(b, async () => {
    await invoke("copy_text", { text });
    b.textContent = "Copied";
    setTimeout(() => (b.textContent = "Copy"), 1500);
  }));
  return b;
}

function renderBanners(m) {
  const box = $("#banners");
  box.querySelectorAll(".model-banner").forEach((n) => n.remove());
  const add = (text, fix, bad) => box.append(el("div", { class: `banner model-banner${bad ? " bad" : ""}`, role: "note" },
    el("strong", {}, text), fix ? el("span", { class: "fix" }, fix) : null));
  if (m.no_tray) add("No tray icon on this desktop.", m.no_tray, false);
  if (m.connection.message) add(m.connection.message, m.connection.fix, true);
  if (m.connection.state !== "connected" && m.status) add("Shown below: the last state the service reported.", "Nothing can be changed until it answers again.", false);
  if (m.stream_note) add("Note:", m.stream_note, false);
}

function renderHost(m) {
  const body = $("#host-body");
  const s = m.status;
  if (!s) { body.replaceChildren(el("p", { class: "muted" }, m.view.header)); return; }
  const label = s.host.routing_label;
  const runsOn = `runs-on: [self-hosted, ${label}]`;
  const cap = el("input", { type: "number", min: 1, max: 64, value: s.host.capacity, id: "host-capacity", "aria-label": "runners at once on this machine" });
  const capErr = el("p", { class: "error", role: "alert" });
  const save = el("button", { type: "button" }, "Save");
  save.addEventListener("click", () => act(save, () => invoke("set_host_capacity", { capacity: Number(cap.value) }), capErr));
  const pause = el("button", { type: "button", id: "pause-toggle" }, s.paused ? "Resume launching" : "Pause launching");
  pause.addEventListener("click", () => act(pause, () => invoke("set_paused", { paused: !s.paused })));
  body.replaceChildren(
    el("div", { class: "row" }, el("span", {}, "Routing label:"), el("code", { id: "routing-label" }, label), copyButton(label, "the routing label")),
    el("div", { class: "row" }, el("span", {}, "In a workflow:"), el("code", { class: "snippet" }, runsOn), copyButton(runsOn, "the runs-on line")),
    el("div", { class: "row" }, el("label", { for: "host-capacity" }, "Runners at once on this machine:"), cap, save,
      s.host.capacity_note ? el("span", { class: "muted" }, s.host.capacity_note) : null),
    capErr,
    el("div", { class: "row" }, el("span", { class: `badge ${s.paused ? "s-warn" : "s-ok"}` }, s.paused ? "Paused: no new runner starts" : "Launching runners for queued jobs"), pause),
    // replaceChildren would write a null as text: only what is there.
    ...[s.admission, s.workstation, s.caches_problem].filter(Boolean).map((h) => el("p", { class: "s-warn", role: "status" }, h.message, " ", el("span", { class: "muted" }, h.fix))),
    ...(s.pool ? [poolSection(s.pool)] : []),
  );
}

// The pool of hosts this host serves in: its state, each host's room and who runs what.
function poolSection(p) {
  const down = p.state === "unreachable" || p.state === "refused";
  const downText = p.state === "refused" ? "pool database refuses this host" : "pool database unreachable";
  const jobText = (r) => (r.job_id ? `${r.job_name || "job"} (#${r.job_id})` : "no job yet");
  const rows = (p.hosts || []).map((h) => el("tr", {},
    el("td", {}, `${h.host_id}${h.host_id === p.host_id ? " (this host)" : ""}`, h.alive ? null : el("span", { class: "muted" }, " · silent")),
    el("td", {}, `${h.free} of ${h.capacity} free${h.claims ? `, starting ${h.claims}` : ""}`),
    el("td", {}, (h.running || []).length
      ? el("ul", { class: "plain" }, ...h.running.map((r) => el("li", {}, `${r.target}: ${jobText(r)}`)))
      : el("span", { class: "muted" }, "nothing"))));
  return el("div", { id: "pool" },
    el("div", { class: "row" }, el("span", {}, "Pool:"), el("code", {}, p.label),
      el("span", { class: `badge ${down ? "s-warn" : "s-ok"}` }, down ? downText : p.state),
      el("span", { class: "muted" }, `${p.address} · this host is ${p.host_id}`)),
    down && p.message ? el("p", { class: "s-warn", role: "status" }, "Runners for the pool wait on every host until its database answers (running jobs go on). ", el("span", { class: "muted" }, p.message)) : null,
    rows.length ? el("table", { id: "pool-hosts" }, el("thead", {}, el("tr", {}, el("th", {}, "Host"), el("th", {}, "Room"), el("th", {}, "Runs"))), el("tbody", {}, rows)) : null);
}

function renderConcerns(m) {
  // Connection problems are in the banner above; these are the service's own.
  const list = m.connection.state === "connected" ? m.view.concerns : [];
  $("#attention").classList.toggle("hidden", list.length === 0 || !m.status);
  $("#concerns").replaceChildren(...list.map((c) => {
    const item = el("li", {}, el("strong", {}, c.message), el("br"), el("span", { class: "muted" }, c.fix));
    if (c.code === "runner_failed") {
      const seen = el("button", { type: "button", id: "mark-seen" }, "Mark failures as seen");
      seen.addEventListener("click", () => invoke("acknowledge"));
      item.append(el("div", {}, seen));
    }
    return item;
  }));
}

// Memory in MiB (GiB from 1 GiB), CPU in cores; "—" before the first sample.
function bytesText(b) {
  const mib = b / 1048576;
  return mib < 1024 ? `${Math.round(mib)} MiB` : `${(mib / 1024).toFixed(1)} GiB`;
}
function usageText(u) {
  if (!u) return "—";
  return `${bytesText(u.rss_bytes)} (peak ${bytesText(u.peak_rss_bytes)}) · ${(u.average_millicores / 1000).toFixed(1)} cores`;
}

function renderRunners(m) {
  const box = $("#runners-body");
  if (!m.status) { box.replaceChildren(); return; }
  if (m.view.runners.length === 0) {
    box.replaceChildren(el("p", { class: "muted" }, "No runner right now: one starts when a job asks for this machine's label."));
    return;
  }
  const usageOf = (id) => (m.status.runners.find((x) => x.attempt_id === id) || {}).usage;
  const rows = m.view.runners.map((r) => el("tr", {},
    el("td", {}, r.target),
    el("td", {}, RUNNER_STATE[r.state] || r.state),
    el("td", {}, r.job_url ? el("a", { href: "#", onclick: (e) => { e.preventDefault(); invoke("open_url", { url: r.job_url }); } }, r.job_name || "the job") : (r.job_name || "—")),
    el("td", {}, r.elapsed),
    el("td", {}, usageText(usageOf(r.attempt_id)))));
  box.replaceChildren(el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Target"), el("th", {}, "State"), el("th", {}, "Job"), el("th", {}, "For"), el("th", {}, "Uses"))), el("tbody", {}, rows)));
}

// A target row is one profile of a target: its key and its name in words.
const rowKey = (t) => `${t.target}#${t.profile}`;
const rowName = (t) => (t.profile && t.profile !== "default" ? `${t.target} (${t.profile})` : t.target);
const profileArg = (t) => (t.profile && t.profile !== "default" ? t.profile : null);

// What a target keeps between jobs beyond the defaults, in words.
function keepsText(t) {
  const parts = [];
  if (t.cache && t.cache.enabled === false) parts.push("caches off");
  else if (t.cache && t.cache.namespace) parts.push(`caches shared as ${t.cache.namespace}`);
  if (t.workspace === "persistent") parts.push(`keeps work folders (${t.saved_workspaces || 0} saved)`);
  return parts.join(" · ");
}

// A target's sandbox away from the default (walls off, or Docker), in the service's words.
function sandboxText(t) {
  if (!t.sandbox || (t.sandbox.walls !== false && !t.sandbox.docker)) return "";
  const what = t.sandbox.walls === false ? "Sandbox off" : "Docker on";
  return t.sandbox.warning ? `${what}: ${t.sandbox.warning}` : what;
}

function targetRow(t) {
  let [words, cls] = t.enabled ? (t.problem ? ["needs attention", "s-bad"] : TARGET_STATE[t.state] || [t.state, ""]) : ["disabled", "s-muted"];
  if (t.enabled && !t.problem && t.state === "active" && t.max_capacity === null) [words, cls] = ["monitor only", "s-ok"];
  const err = el("p", { class: "error", role: "alert" });
  const busy = pending.has(rowKey(t));
  const enabled = el("input", { type: "checkbox", checked: t.enabled, disabled: busy, "aria-label": `serve ${rowName(t)}` });
  enabled.addEventListener("change", () => change(t, { enabled: enabled.checked }, err));
  const monitor = el("input", { type: "checkbox", checked: t.max_capacity === null, disabled: busy, "aria-label": `${rowName(t)} monitor only` });
  const max = el("input", { type: "number", min: 1, max: 64, value: t.max_capacity ?? "", disabled: busy || t.max_capacity === null, "aria-label": `${rowName(t)} at most this many runners` });
  monitor.addEventListener("change", () => change(t, monitor.checked ? { monitorOnly: true } : { maxRunners: Number(max.value) || 1 }, err));
  const keep = el("input", { type: "checkbox", checked: t.workspace === "persistent", disabled: busy, "aria-label": `${rowName(t)} keeps work folders between jobs` });
  keep.addEventListener("change", () => change(t, { keepWorkspaces: keep.checked }, err));
  max.addEventListener("change", () => { if (Number(max.value) > 0) change(t, { maxRunners: Number(max.value) }, err); });
  let actions;
  if (confirmRemove === rowKey(t)) {
    const yes = el("button", { type: "button", class: "danger" }, `Remove ${rowName(t)}`);
    yes.addEventListener("click", () => act(yes, async () => { await invoke("remove_target", { target: t.target, profile: profileArg(t) }); confirmRemove = null; }, err));
    const no = el("button", { type: "button" }, "Keep");
    no.addEventListener("click", () => { confirmRemove = null; render(); });
    actions = el("div", { class: "row" }, el("span", {}, "Runners it started finish their job first."), yes, no);
    setTimeout(() => no.focus(), 0);
  } else {
    const rm = el("button", { type: "button", class: "danger", "aria-label": `Remove ${rowName(t)}` }, "Remove…");
    rm.addEventListener("click", () => { confirmRemove = rowKey(t); render(); });
    actions = rm;
  }
  const demand = t.demand.queued ? `${t.demand.queued}${t.demand.is_floor ? "+" : ""} queued` : "none queued";
  return el("tr", { id: t.profile && t.profile !== "default" ? `target-${t.target}-${t.profile}` : `target-${t.target}` },
    el("td", {}, el("strong", {}, t.target), el("br"), el("span", { class: "muted" }, t.kind === "org" ? "organization" : "repository", profileArg(t) ? ` · profile ${t.profile}` : ""), keepsText(t) ? el("div", { class: "muted" }, keepsText(t)) : null, sandboxText(t) ? el("div", { class: "s-warn", role: "note" }, sandboxText(t)) : null),
    el("td", {}, el("span", { class: `badge ${cls}` }, words), t.problem ? el("p", {}, t.problem.message, el("br"), el("span", { class: "muted" }, t.problem.fix)) : null),
    el("td", {}, el("label", {}, enabled, " enabled"), el("br"), el("label", { title: "Each runner starts with the work folder the last job of this target left (credentials removed): faster checkouts and builds. Off deletes the kept folders." }, keep, " keep work folders")),
    el("td", {}, el("div", { class: "row" }, max, el("label", {}, monitor, " monitor only"))),
    el("td", {}, `${t.active_runners} running · ${demand}`, t.typical_peak_rss_bytes ? el("div", { class: "muted" }, `typically peaks at ${bytesText(t.typical_peak_rss_bytes)}`) : null),
    el("td", {}, actions, err));
}

async function change(t, what, err) {
  pending.add(rowKey(t));
  try {
    await invoke("update_target", { target: t.target, profile: profileArg(t), enabled: what.enabled ?? null, maxRunners: what.maxRunners ?? null, monitorOnly: what.monitorOnly ?? null, keepWorkspaces: what.keepWorkspaces ?? null });
    err.textContent = "";
  } catch (e) { err.textContent = errorText(e); }
  finally { pending.delete(rowKey(t)); render(); }
}

// Queued jobs and why each has no runner (the service's `why`): asked at most every 2 s, while
// the service answers.
let why = null;
let whyError = "";
let whyAt = 0;
let whyBusy = false;
const WHY_SHOWN = 12;

async function refreshWhy(force) {
  if (whyBusy || (!force && Date.now() - whyAt < 2000)) return;
  if (!model || model.connection.state !== "connected") return;
  whyBusy = true;
  try { why = await invoke("why"); whyError = ""; }
  catch (e) { whyError = errorText(e); }
  finally { whyBusy = false; whyAt = Date.now(); renderWhy(); }
}

function renderWhy() {
  const box = $("#queued-body");
  if (whyError) { box.replaceChildren(el("p", { class: "error" }, whyError)); return; }
  if (!why) { box.replaceChildren(el("p", { class: "muted" }, "Looking at the queue…")); return; }
  const jobs = why.targets.flatMap((t) => t.jobs.map((j) => ({ t, j })));
  const waiting = jobs.filter(({ j }) => !j.reason.covered);
  const covered = jobs.length - waiting.length;
  const parts = [];
  for (const t of why.targets.filter((t) => t.summary)) {
    parts.push(el("p", { class: "banner" }, el("strong", {}, `${t.target}: `), t.summary.message, t.summary.fix ? el("span", { class: "fix" }, t.summary.fix) : null));
  }
  if (jobs.length === 0) parts.push(el("p", { class: "muted" }, "No job is queued for this machine's targets."));
  else if (waiting.length === 0) parts.push(el("p", { class: "muted" }, `${covered} queued job(s), each with a runner of this machine starting or waiting for it.`));
  else {
    if (covered) parts.push(el("p", { class: "muted" }, `${covered} more queued job(s) have a runner of this machine.`));
    const items = waiting.slice(0, WHY_SHOWN).map(({ t, j }) => el("li", { class: "panel" },
      el("div", {}, el("strong", {}, j.repository || t.target),
        " · ",
        j.url ? el("a", { href: "#", onclick: (e) => { e.preventDefault(); invoke("open_url", { url: j.url }); } }, j.name || `job ${j.job_id}`) : (j.name || `job ${j.job_id}`),
        el("span", { class: "muted" }, `${j.queued_at ? ` · queued ${clock(j.queued_at)}` : ""} · runs-on ${j.runs_on.length ? `[${j.runs_on.join(", ")}]` : "(no labels)"}${j.profile && j.profile !== "default" ? ` · profile ${j.profile}` : ""}`)),
      el("p", {}, j.reason.message),
      j.reason.fix ? el("p", { class: "muted" }, j.reason.fix) : null));
    parts.push(el("ul", { class: "plain stack", "aria-label": "queued jobs without a runner" }, items));
    if (waiting.length > WHY_SHOWN) parts.push(el("p", { class: "muted" }, `and ${waiting.length - WHY_SHOWN} more: \`runner-manager why\` lists them all.`));
  }
  box.replaceChildren(...parts);
}

function renderTargets(m) {
  const box = $("#targets-body");
  const s = m.status;
  if (!s) { box.replaceChildren(); return; }
  if (s.targets.length === 0) {
    box.replaceChildren(el("p", { class: "muted" }, "No repository or organization yet: add one below (you must be an admin there)."));
    return;
  }
  box.replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ...["Target", "State", "Serve", "Runners at most", "Now", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, s.targets.map(targetRow))));
}

function renderFailures(m) {
  const box = $("#failures-body");
  if (m.failures.length === 0) { box.replaceChildren(el("p", { class: "muted" }, "No failures.")); return; }
  box.replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ...["When", "Target", "What happened", "What to do"].map((h) => el("th", {}, h)))),
    el("tbody", {}, m.failures.map((f) => el("tr", { id: `failure-${f.anchor}`, class: f.seen ? "" : "new", tabindex: "-1" },
      el("td", {}, when(f.at), f.seen ? null : el("span", { class: "badge s-bad" }, "new")),
      el("td", {}, f.target),
      el("td", {}, f.words, f.detail ? el("br") : null, f.detail ? el("span", { class: "muted" }, f.detail) : null),
      el("td", {}, f.fix_sentence))))));
}

function renderGitHub(m) {
  const box = $("#github-body");
  const s = m.status;
  if (!s) { box.replaceChildren(); return; }
  const parts = [];
  if (s.auth.state === "signed_in") {
    const out = el("button", { type: "button", id: "sign-out" }, "Sign out");
    out.addEventListener("click", () => act(out, () => invoke("sign_out")));
    parts.push(el("div", { class: "row" }, el("span", { class: "badge s-ok" }, "Signed in"), el("span", {}, `as ${s.auth.login}`), out));
  } else {
    const why = s.auth.state === "sign_in_required" ? `Sign-in needed: ${s.auth.reason}` : "Signed out: no runner starts until you sign in.";
    const inb = el("button", { type: "button", class: "primary", id: "sign-in" }, "Sign in…");
    inb.addEventListener("click", () => invoke("show_window", { which: "sign-in" }));
    parts.push(el("div", { class: "row" }, el("span", { class: "badge s-warn" }, "Not signed in"), el("span", {}, why), inb));
  }
  const h = s.github_health;
  const health = h.state === "ok" ? ["GitHub answers", "s-ok"] : h.state === "rate_limited" ? ["Rate limit reached", "s-warn"] : h.state === "unreachable" ? ["GitHub unreachable", "s-bad"] : [h.state, ""];
  parts.push(el("div", { class: "row" }, el("span", { class: `badge ${health[1]}` }, health[0]),
    h.since && h.state !== "ok" ? el("span", {}, `since ${clock(h.since)}${h.detail ? ` (${h.detail})` : ""}${h.next_try ? `; next try ${clock(h.next_try)}` : ""}`) : null,
    el("span", { class: "muted" }, s.last_github_contact ? `Last answer ${elapsed(m.now - s.last_github_contact)} ago` : "No answer from GitHub yet")));
  if (s.budget) {
    const b = s.budget;
    parts.push(el("p", {}, `Rate limit: ${b.remaining} of ${b.limit} requests left this hour${b.reset ? ` (resets ${clock(b.reset)})` : ""}; `,
      `${b.charged_last_hour} charged and ${b.not_modified_last_hour} free (unchanged) in the last hour; polling every ${b.poll_interval_secs} s.`));
    if (b.planned_per_hour.length) {
      parts.push(el("p", { class: "muted" }, "Planned per hour: " + b.planned_per_hour.map((p) => `${p.target} ${p.planned_per_hour}`).join(", ")));
    }
  }
  if (s.github) parts.push(el("p", { class: "muted" }, `GitHub: ${s.github.web_base}`));
  box.replaceChildren(...parts);
}

const UPDATE_MODE = { auto: "installs new releases by itself (running jobs finish first)", notify: "tells about new releases and installs them when you choose", off: "does not look for new releases" };
const INSTALL_KIND = { deb: "Debian package", portable: "portable archive", unmanaged: "not from a package (the service only tells about new releases)" };
const UPDATE_BADGE = { available: "s-warn", downloading: "s-warn", applying: "s-warn", failed: "s-bad", updated: "s-ok", up_to_date: "s-ok" };
let updateError = "";

// The service's updater: versions, state in words, the button to apply, the fix on failure.
function renderUpdate(m) {
  const box = $("#update-body");
  const u = m.view.update;
  const parts = [el("p", { id: "about" }, m.about)];
  if (!u) {
    parts.push(el("p", { class: "muted" }, m.status ? "The service says nothing about updates (an older service?)." : "Waiting for the service…"));
    box.replaceChildren(...parts);
    return;
  }
  parts.push(el("div", { class: "row" },
    el("span", {}, "Service version:"), el("code", { id: "update-current" }, u.current_version),
    u.new_version ? el("span", {}, "Newer release:") : null,
    u.new_version ? el("code", { id: "update-new" }, u.new_version) : null));
  parts.push(el("div", { class: "row" }, el("span", { class: `badge ${UPDATE_BADGE[u.state] || "s-muted"}`, id: "update-state" }, u.state.replace(/_/g, " ")),
    el("span", { id: "update-words" }, u.words),
    u.percent !== null ? el("progress", { max: 100, value: u.percent, "aria-label": "download progress" }) : null));
  if (u.fix) parts.push(el("p", { class: "fix", id: "update-fix" }, u.fix));
  if (u.action === "apply" && m.connection.state === "connected") {
    const b = el("button", { type: "button", class: "primary", id: "apply-update" }, u.state === "failed" ? `Try ${u.new_version} again` : `Update to ${u.new_version}`);
    const err = el("p", { class: "error", role: "alert" }, updateError);
    b.addEventListener("click", async () => {
      b.disabled = true;
      try { await invoke("apply_update"); updateError = ""; } catch (e) { updateError = errorText(e); }
      finally { render(); }
    });
    parts.push(el("div", { class: "row" }, b, el("span", { class: "muted" }, "No new runners start; running jobs finish first, then the service restarts.")), err);
  }
  const how = [];
  if (u.mode) how.push(`This service ${UPDATE_MODE[u.mode] || `updates in mode ${u.mode}`}`);
  if (u.install_kind) how.push(`installed as: ${INSTALL_KIND[u.install_kind] || u.install_kind}`);
  if (how.length) parts.push(el("p", { class: "muted" }, how.join("; ") + "."));
  box.replaceChildren(...parts);
}

function render() {
  const m = model;
  if (!m) return;
  $("#summary").textContent = m.view.summary;
  document.body.classList.toggle("stale", m.connection.state !== "connected");
  renderBanners(m);
  renderHost(m);
  renderConcerns(m);
  renderRunners(m);
  renderWhy();
  renderTargets(m);
  renderFailures(m);
  renderGitHub(m);
  renderUpdate(m);
  // The option as the tray has it (the window was started with it), unless being changed.
  if (document.activeElement !== $("#opt-finished")) $("#opt-finished").checked = !!m.notify_finished_jobs;
  if (focusAnchor) {
    const target = document.getElementById(focusAnchor === "add" ? "add-target" : focusAnchor);
    if (target) { target.scrollIntoView({ block: "center" }); if (target.tabIndex >= -1) target.focus(); focusAnchor = null; }
  }
}

// Re-render from a model without clobbering a field being typed in.
function update(m) {
  model = m;
  refreshWhy(false);
  const active = document.activeElement;
  if (active && active.tagName === "INPUT" && active.type !== "checkbox" && active.closest("#host-body, #targets-body")) return;
  render();
}

$("#add").addEventListener("submit", async (e) => {
  e.preventDefault();
  const button = e.submitter || $("#add button");
  const target = $("#add-target").value.trim();
  const maxRunners = $("#add-max").value ? Number($("#add-max").value) : null;
  const added = await act(button, () => invoke("add_target", { target, maxRunners, monitorOnly: $("#add-monitor").checked }), $("#add-error"));
  if (added) { $("#add-target").value = ""; $("#add-max").value = ""; $("#add-error").textContent = ""; }
});
$("#opt-autostart").addEventListener("change", (e) => act(null, async () => { e.target.checked = await invoke("set_autostart", { on: e.target.checked }); }));
$("#opt-finished").addEventListener("change", (e) => invoke("set_notify_finished_jobs", { on: e.target.checked }));
document.addEventListener("keydown", (e) => { if (e.key === "Escape" && confirmRemove) { confirmRemove = null; render(); } });
tauri.event.listen("anchor", (e) => { focusAnchor = e.payload; render(); });

onModel(update);
setInterval(() => refreshWhy(false), 3000);
invoke("model").then(update);
invoke("autostart_enabled").then((on) => ($("#opt-autostart").checked = on));
invoke("acknowledge");
