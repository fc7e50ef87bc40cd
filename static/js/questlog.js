// Questlog's own behaviour, as a static file: the Content Security Policy allows no inline script
// or event handler (config/deploy.py). Listeners sit on the document so that they also serve
// content htmx swaps in later.
"use strict";

// A newly created token is shown once: focusing its field selects it, ready to copy.
document.addEventListener("focusin", (event) => {
  if (event.target instanceof HTMLInputElement && event.target.hasAttribute("data-select-on-focus")) {
    event.target.select();
  }
});
