// Kiln console: live fragments over server-sent events, a node's log, copy
// buttons, and confirmations. The pages work without it (reload to update).
"use strict";

(function () {
  // Fragments: replace [data-fragment=NAME] with the server's HTML, keeping
  // which <details> are open and never pulling a form from under the user:
  // a fragment holding the focus is updated when the focus leaves it, and
  // one the server sends unchanged (as each stream's first event does) is
  // left alone, so a click or a screen reader is not interrupted for
  // nothing.
  const pending = new Map();
  // Each fragment as the server last sent it, before tick() rewrote its
  // times: taken here for the page's own HTML, before the first tick.
  const sent = new Map();
  for (const el of document.querySelectorAll("[data-fragment]")) sent.set(el, el.cloneNode(true));

  function openDetails(el) {
    return new Set([...el.querySelectorAll("details[open][id]")].map((d) => d.id));
  }

  function apply(el, html) {
    const open = openDetails(el);
    el.innerHTML = html;
    tick();
    for (const id of open) {
      const d = document.getElementById(id);
      if (d) d.open = true;
    }
  }

  function update(name, html) {
    const el = document.querySelector('[data-fragment="' + name + '"]');
    if (!el) return;
    const next = el.cloneNode(false);
    next.innerHTML = html;
    if (next.isEqualNode(sent.get(el) || null)) return;
    sent.set(el, next);
    if (el.contains(document.activeElement) && document.activeElement !== document.body) {
      pending.set(el, html);
      return;
    }
    apply(el, html);
  }

  document.addEventListener("focusout", (ev) => {
    for (const [el, html] of pending) {
      if (!el.contains(ev.relatedTarget)) {
        pending.delete(el);
        apply(el, html);
      }
    }
  });

  function lost(msg) {
    const p = document.getElementById("live-lost");
    if (!p) return;
    p.textContent = msg;
    p.hidden = !msg;
  }

  // The log: lines appended as they come, filtered by the search box.
  const log = document.querySelector("[data-log]");
  const filter = document.getElementById("log-filter");
  const follow = document.getElementById("log-follow");
  const maxLines = 5000;
  let started = false;

  function showLine(line) {
    const text = filter ? filter.value.toLowerCase() : "";
    line.hidden = text !== "" && !line.textContent.toLowerCase().includes(text);
  }

  function appendLines(lines) {
    if (!log) return;
    if (!started) {
      log.textContent = "";
      started = true;
    }
    for (const l of lines) {
      const span = document.createElement("span");
      span.className = "line " + (l.stream || "");
      const t = (l.time || "").replace("T", " ").replace(/\.\d+/, "");
      span.textContent = t + " [" + (l.stream || "") + "] " + l.line + "\n";
      showLine(span);
      log.appendChild(span);
    }
    while (log.childElementCount > maxLines) log.removeChild(log.firstElementChild);
    if (!follow || follow.checked) log.scrollTop = log.scrollHeight;
  }

  if (filter && log) {
    filter.addEventListener("input", () => {
      for (const line of log.children) showLine(line);
    });
  }

  // The stream runs while the page is visible: a tab in the background
  // costs the server nothing, and catches up when it is shown again (the
  // first event of a stream holds every fragment).
  const live = document.body.dataset.live;
  let es = null;
  let ended = false; // the server said the stream is over (gone, signed out)

  function connect() {
    if (es || ended || !live || !window.EventSource) return;
    es = new EventSource(live);
    es.addEventListener("fragments", (ev) => {
      lost("");
      const parts = JSON.parse(ev.data);
      for (const name of Object.keys(parts)) update(name, parts[name]);
    });
    es.addEventListener("lines", (ev) => {
      lost("");
      appendLines(JSON.parse(ev.data));
    });
    for (const name of ["gone", "signedout"]) {
      es.addEventListener(name, (ev) => {
        ended = true;
        disconnect();
        lost(JSON.parse(ev.data));
      });
    }
    es.onerror = () => {
      if (!es) return;
      if (es.readyState === EventSource.CONNECTING) lost("Live updates interrupted; reconnecting…");
      else lost("Live updates stopped; reload the page.");
    };
    if (log) {
      // Each stream (a reconnect too) sends the log from its start.
      es.addEventListener("open", () => {
        log.textContent = "";
        started = true;
      });
    }
  }

  function disconnect() {
    if (es) {
      es.close();
      es = null;
    }
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) disconnect();
    else connect();
  });
  if (!document.hidden) connect();

  // Times: <time data-ago> shows how long ago, <time data-elapsed> how long
  // since (a running step), <time data-clock> the local time; the server's
  // HTML holds the UTC time only.
  function span(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + (s < 600 ? " " + (s % 60) + "s" : "");
    if (s < 172800) return Math.floor(s / 3600) + "h" + " " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d";
  }
  function tick() {
    const now = Date.now();
    for (const t of document.querySelectorAll("time[data-ago]")) {
      if (!t.title) t.title = t.textContent;
      t.textContent = span(now - Date.parse(t.dateTime)) + " ago";
    }
    for (const t of document.querySelectorAll("time[data-elapsed]")) {
      t.textContent = span(now - Date.parse(t.dateTime)) + " so far";
    }
    for (const t of document.querySelectorAll("time[data-clock]:not([title])")) {
      t.title = t.textContent;
      t.textContent = clock.format(new Date(t.dateTime));
    }
  }
  // <time data-clock> (an operation's name) in the browser's time zone.
  const clock = new Intl.DateTimeFormat(undefined, {
    day: "numeric", month: "short", hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
  });
  tick();
  setInterval(tick, 1000);

  // Copy buttons: data-copy names the element whose text to copy.
  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("[data-copy]");
    if (!b) return;
    const src = document.getElementById(b.dataset.copy);
    if (!src || !navigator.clipboard) return;
    navigator.clipboard.writeText(src.textContent.trim()).then(() => {
      const was = b.textContent;
      b.textContent = "Copied";
      setTimeout(() => (b.textContent = was), 1500);
    });
  });

  // Forms that ask first (data-confirm), and the delete form that wants the
  // name typed (data-must-equal): the button stays disabled until it is.
  document.addEventListener("submit", (ev) => {
    const msg = ev.target.dataset.confirm;
    if (msg && !window.confirm(msg)) ev.preventDefault();
  });
  for (const input of document.querySelectorAll("[data-must-equal]")) {
    const button = input.form.querySelector("button[type=submit]");
    const check = () => {
      button.disabled = input.value.trim() !== input.dataset.mustEqual;
    };
    input.addEventListener("input", check);
    check();
  }
})();
