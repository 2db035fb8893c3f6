// Receipt's dashboard: the little it does in the browser.
"use strict";

// A part of a page marked data-refresh="URL" replaces itself with a fresh
// copy from URL every data-every milliseconds, until it holds an element
// marked data-final (a job that will not change again). A 401 means the
// session ended: reloading leads to the sign-in page.
for (const part of document.querySelectorAll("[data-refresh]")) {
  const every = Number(part.dataset.every || 5000);
  let last = null;
  const refresh = async () => {
    if (part.querySelector("[data-final]")) return;
    try {
      const answer = await fetch(part.dataset.refresh, {
        credentials: "same-origin",
        headers: { "X-Dashboard-Fragment": "1" },
      });
      if (answer.status === 401) {
        location.reload();
        return;
      }
      if (answer.ok) {
        // Replaced only when it changed, so that a button is not swapped
        // under a pointer for nothing.
        const fresh = await answer.text();
        if (fresh !== last) part.innerHTML = last = fresh;
      }
    } catch (_) {
      // The server is restarting or the network dropped: try again later.
    }
    setTimeout(refresh, every);
  };
  setTimeout(refresh, every);
}

// Forms marked data-confirm ask first.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
