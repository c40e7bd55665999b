// rayqueue console: the login page. Posts the user and password to /api/login (same origin,
// so the session cookie, HttpOnly, comes back with the answer) and goes where the console
// sent the browser from (?next=, a path of this console only).
"use strict";

function banner(text) {
  const b = document.getElementById("banner");
  b.className = "error";
  b.textContent = text;
  b.hidden = !text;
}

// Only a path on this console: never an absolute or protocol-relative URL (open redirect).
function nextPath() {
  const next = new URLSearchParams(location.search).get("next") || "/";
  return /^\/(?![\/\\])/.test(next) && !next.startsWith("/login") ? next : "/";
}

const form = document.getElementById("login");
form.addEventListener("submit", async ev => {
  ev.preventDefault();
  const f = new FormData(form);
  const button = form.querySelector("button");
  button.disabled = true;
  try {
    const resp = await fetch("/api/login", {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({user: f.get("user").trim(), password: f.get("password")}),
    });
    let data = null;
    try { data = await resp.json(); } catch (e) { data = null; }
    if (!resp.ok) {
      banner(data && data.error ? `${data.error}: ${data.message}` : `HTTP ${resp.status}`);
      document.getElementById("password").value = "";
      return;
    }
    location.assign(nextPath());
  } catch (e) {
    banner("cannot reach the console server: " + e.message);
  } finally {
    button.disabled = false;
  }
});
