// The sign-in window: the service runs GitHub's device flow; this window shows the user code,
// opens the verification page, counts down and says where the sign-in stands.
"use strict";
let session = null;
let closing = false;

function host(uri) {
  try { const u = new URL(uri); return u.host + u.pathname; } catch { return uri; }
}

function say(status, fix) {
  $("#status").textContent = status || "";
  $("#fix").textContent = fix || "";
}

function offer(label, restart) {
  const b = $("#retry");
  b.textContent = label;
  b.onclick = () => start(restart);
  b.classList.remove("hidden");
  b.focus();
}

function render() {
  $("#retry").classList.add("hidden");
  if (!session) return;
  const s = session;
  const showCode = s.state === "waiting" || s.state === "retrying";
  $("#code-view").classList.toggle("hidden", !showCode);
  $("#user-code").textContent = s.user_code;
  $("#open").textContent = `Open ${host(s.verification_uri)}`;
  tick();
  switch (s.state) {
    case "waiting":
      say(`2. Open ${host(s.verification_uri)}, enter the code and approve. Waiting for GitHub…`);
      break;
    case "retrying":
      say(`GitHub cannot be reached right now${s.message ? ` (${s.message})` : ""}; trying again` +
          `${s.next_try ? ` at ${clock(s.next_try)}` : ""}. The code stays valid.`, s.fix);
      break;
    case "approved":
      say(`Signed in as ${s.login || "your GitHub account"}.`, "This window closes by itself.");
      if (!closing) { closing = true; setTimeout(() => invoke("close_window"), 1500); }
      break;
    case "expired":
      say("The code ran out before it was approved.", "Get a new code to try again.");
      offer("Get a new code", true);
      break;
    case "denied":
      say("The request was cancelled in the browser.", "Try again if that was a mistake.");
      offer("Try again", true);
      break;
    case "failed":
      say(s.message || "The sign-in failed.", s.fix || "");
      offer("Try again", true);
      break;
    case "cancelled":
      say("This sign-in was cancelled.", "Start again to get a new code.");
      offer("Start again", true);
      break;
    default:
      say(`The sign-in is ${s.state}.`, "Update the tray to follow it here.");
  }
}

function tick() {
  if (!session || !(session.state === "waiting" || session.state === "retrying")) {
    $("#time-left").textContent = "";
    return;
  }
  const left = session.expires_at - Date.now();
  $("#time-left").textContent = left > 0
    ? `The code is valid for ${elapsed(left)} more.`
    : "The code has run out.";
}

async function start(restart) {
  say("Asking the service for a code…");
  $("#retry").classList.add("hidden");
  try {
    session = await invoke("start_sign_in", { restart });
    render();
    $("#copy").focus();
  } catch (e) {
    $("#code-view").classList.add("hidden");
    say(e.message || String(e), e.fix || "");
    offer("Try again", true);
  }
}

$("#copy").addEventListener("click", async () => {
  try {
    await invoke("copy_text", { text: session.user_code });
    $("#copy").textContent = "Copied";
    setTimeout(() => ($("#copy").textContent = "Copy code"), 1500);
  } catch (e) { say(errorText(e)); }
});
$("#open").addEventListener("click", async () => {
  try { await invoke("open_url", { url: session.verification_uri }); }
  catch (e) { say(errorText(e)); }
});
$("#close").addEventListener("click", () => invoke("close_window"));
document.addEventListener("keydown", (e) => { if (e.key === "Escape") invoke("close_window"); });

onModel((m) => {
  // Progress comes from the service's sign_in_progress events; a newer session replaces ours.
  if (m.sign_in && (!session || m.sign_in.id === session.id || m.sign_in.state === "waiting")) {
    session = m.sign_in;
    render();
  }
});
setInterval(tick, 1000);
start(false);
