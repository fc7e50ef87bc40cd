// Questlog's own behaviour, as a static file: the Content Security Policy allows no inline script
// or event handler (config/deploy.py), and htmx evaluates no code from attributes (allowEval is
// false), so every rule about live updates lives here. Listeners sit on the document so that they
// also serve content htmx swaps in later.
"use strict";

// A newly created token is shown once: focusing its field selects it, ready to copy.
document.addEventListener("focusin", (event) => {
  if (event.target instanceof HTMLInputElement && event.target.hasAttribute("data-select-on-focus")) {
    event.target.select();
  }
});

// A copy button (data-copy: the id of the field or block to copy) puts its text on the clipboard
// and says so; where the clipboard is not allowed, the text is selected for Ctrl+C instead.
document.addEventListener("click", (event) => {
  const button = event.target instanceof Element ? event.target.closest("button[data-copy]") : null;
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  const text = source instanceof HTMLInputElement ? source.value : source.textContent;
  const done = () => {
    button.textContent = "Copied";
    announce(button.dataset.copied || "Copied");
  };
  const selectIt = () => {
    if (source instanceof HTMLInputElement) source.select();
    else window.getSelection().selectAllChildren(source);
    announce("Selected: press Ctrl+C to copy");
  };
  if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, selectIt);
  else selectIt();
});

// ---- Live updates -------------------------------------------------------------------------------
// A page region that follows the server polls it (hx-trigger="every Ns", answered 204 while
// nothing changed). Rules: a hidden tab asks nothing and asks once on its return; a swap never
// takes away what a person is typing; after a person's own action focus stays or moves to what
// changed, and the polite live region says what happened.

const POLLING = '[hx-trigger^="every "]';
const FIELDS = "textarea, select, input:not([type=hidden]):not([type=submit]):not([type=button]):not([type=reset]):not([type=image])";
const HEADINGS = "h1, h2, h3";

// What a swap must do once the new content is in, by request (the xhr is the same object in
// htmx:beforeSwap and htmx:afterSwap).
const plans = new WeakMap();
// Regions whose change the person asked to see although a form they typed in goes with it.
const updateAsked = new Set();
// The region a refused poll swap is waiting on (the notice's button shows its changes).
let heldBack = null;

function isPoll(elt) {
  return elt instanceof Element && elt.matches(POLLING);
}

// Two things can happen at once (a poll held back on the quest while the inbox count drops): each
// is said in turn and stays in the live region long enough to be read, instead of the later one
// replacing the earlier before a screen reader picked it up.
const HEARD_AFTER_MS = 1200;
const toSay = [];
let saying = null;

function announce(text) {
  if (!document.getElementById("live-announcer") || !text) return;
  if (!toSay.includes(text)) toSay.push(text);
  if (!saying) sayNext();
}

function sayNext() {
  const region = document.getElementById("live-announcer");
  const text = toSay.shift();
  if (!region || text === undefined) {
    saying = null;
    return;
  }
  // Emptied first so that the same words said twice are announced twice.
  region.textContent = "";
  saying = window.setTimeout(() => {
    region.textContent = text;
    saying = window.setTimeout(sayNext, HEARD_AFTER_MS);
  }, 50);
}

// ---- Polling only while the tab is seen --------------------------------------------------------

// Regions a person's own request is on its way to: a poll of one would answer with the state
// before that request and could swap it back in after the answer, so none is asked meanwhile.
const acting = new Set();

document.addEventListener("htmx:confirm", (event) => {
  const elt = event.detail.elt;
  if (isPoll(elt) && (document.hidden || acting.has(elt.id))) event.preventDefault();
});

document.addEventListener("htmx:beforeRequest", (event) => {
  const { elt, target } = event.detail;
  if (isPoll(elt) || !isPoll(target)) return;
  acting.add(target.id);
  htmx.trigger(target, "htmx:abort"); // a poll already on its way
});

document.addEventListener("htmx:afterRequest", (event) => {
  const { elt, target } = event.detail;
  if (!isPoll(elt) && target) acting.delete(target.id);
});

function poll(region) {
  const path = region.getAttribute("hx-get");
  if (path) htmx.ajax("GET", path, { source: region, target: region, swap: "outerHTML" });
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden) document.querySelectorAll(POLLING).forEach(poll);
});

// ---- What a person is typing -------------------------------------------------------------------

function defaultIndex(select) {
  const index = Array.from(select.options).findIndex((option) => option.defaultSelected);
  return index === -1 && !select.multiple ? 0 : index;
}

function isUnsaved(field) {
  if (field === document.activeElement) return true;
  if (field instanceof HTMLSelectElement) {
    if (field.multiple) return Array.from(field.options).some((option) => option.selected !== option.defaultSelected);
    return field.selectedIndex !== defaultIndex(field);
  }
  if (field.type === "checkbox" || field.type === "radio") return field.checked !== field.defaultChecked;
  return field.value !== field.defaultValue;
}

function caret(field) {
  try {
    return { start: field.selectionStart, end: field.selectionEnd, direction: field.selectionDirection };
  } catch {
    return { start: null, end: null, direction: null };
  }
}

// The fields inside `region` with focus or unsaved text, except those of the form just sent (the
// server's answer about them is the truth).
function fieldsToKeep(region, sentForm) {
  return Array.from(region.querySelectorAll(FIELDS))
    .filter((field) => field.id && !(sentForm && sentForm.contains(field)) && isUnsaved(field))
    .map((field) => ({
      id: field.id,
      value: field.value,
      checked: field.checked,
      chosen: field instanceof HTMLSelectElement ? Array.from(field.selectedOptions, (option) => option.value) : null,
      focused: field === document.activeElement,
      scrollTop: field.scrollTop,
      ...caret(field),
    }));
}

function putBack(kept) {
  for (const saved of kept) {
    const field = document.getElementById(saved.id);
    if (!field || !field.matches(FIELDS)) continue;
    if (field instanceof HTMLSelectElement) {
      for (const option of field.options) option.selected = saved.chosen.includes(option.value);
    } else if (field.type === "checkbox" || field.type === "radio") {
      field.checked = saved.checked;
    } else {
      field.value = saved.value;
    }
    // A field typed in inside a closed <details> (a constraint's "Edit text") stays in view.
    for (let details = field.closest("details"); details; details = details.parentElement.closest("details")) {
      details.open = true;
    }
    field.scrollTop = saved.scrollTop;
    if (saved.focused) {
      field.focus({ preventScroll: true });
      if (saved.start !== null) {
        try { field.setSelectionRange(saved.start, saved.end, saved.direction || "none"); } catch { /* not a text field */ }
      }
    }
  }
}

// ---- The notice standing in for a refused poll -------------------------------------------------

function holdBack(region) {
  const notice = document.getElementById("live-notice");
  if (!notice || heldBack === region.id) return;
  heldBack = region.id;
  notice.hidden = false;
  announce(notice.dataset.announce);
}

function release() {
  heldBack = null;
  const notice = document.getElementById("live-notice");
  if (notice) notice.hidden = true;
}

document.addEventListener("click", (event) => {
  if (!(event.target instanceof Element) || !event.target.closest("#live-notice-update")) return;
  const region = heldBack && document.getElementById(heldBack);
  if (!region) return release();
  updateAsked.add(region.id);
  poll(region);
});

// ---- Focus after a person's own action ---------------------------------------------------------

// The ids around the element that sent the request, nearest first, up to the swapped region.
function anchorsOf(elt, region) {
  const ids = [];
  for (let node = region.contains(elt) ? elt : region; node; node = node.parentElement) {
    if (node.id) ids.push({ id: node.id, gone: node.dataset.announceGone });
    if (node === region) break;
  }
  return ids;
}

// The element itself when it takes focus, else its first heading (made focusable), else null.
function focusable(element) {
  if (element.matches(FIELDS) || element.hasAttribute("tabindex")) return element;
  const heading = element.matches(HEADINGS) ? element : element.querySelector(HEADINGS);
  if (!heading) return null;
  heading.setAttribute("tabindex", "-1");
  return heading;
}

// Words for a region that has none of its own: its heading, "updated" (the wording is base.html's).
function updatedWords(heading) {
  const pattern = document.getElementById("live-announcer")?.dataset.updated || "{what}";
  return pattern.replace("{what}", heading.textContent.trim());
}

// ---- Deciding one item after another -----------------------------------------------------------
// An approval or milestone decided goes from the list: focus moves on to the item after it (or
// before it, at the end of the list), so a person can decide the next one at once, and the live
// region says what was just done (the confirmation the page now shows).

const ITEMS = "article.item";

// The ids of the items after the one `elt` sits in, then of those before it (nearest first).
function neighboursOf(elt, region) {
  const item = elt instanceof Element ? elt.closest(ITEMS) : null;
  if (!item || !region.contains(item)) return [];
  const all = Array.from(region.querySelectorAll(ITEMS));
  const at = all.indexOf(item);
  return [...all.slice(at + 1), ...all.slice(0, at).reverse()].map((other) => other.id).filter(Boolean);
}

// What a form asks to happen once it is done: the element to focus (an undone approval is back)
// and the words to say.
function afterAction(elt) {
  const form = elt instanceof Element ? elt.closest("[data-focus-after]") : null;
  return form ? { focus: form.dataset.focusAfter, words: form.dataset.announceDone } : null;
}

function confirmationWords(region) {
  const newest = region.querySelector("[data-confirmation] .confirmation-words");
  return newest ? newest.textContent.trim() : null;
}

// True when focus went where the action asked, or on to the next item.
function focusAfterDecision(plan, region) {
  const asked = plan.after && document.getElementById(plan.after.focus);
  if (asked) {
    asked.focus();
    announce(plan.after.words);
    return true;
  }
  const decided = plan.anchors.find((anchor) => anchor.gone);
  if (!decided || document.getElementById(decided.id)) return false;
  for (const id of plan.neighbours) {
    const next = document.getElementById(id);
    if (!next) continue;
    next.focus();
    announce(confirmationWords(region) || decided.gone);
    return true;
  }
  const confirmation = region.querySelector("[data-confirmation]");
  if (!confirmation) return false;
  confirmation.setAttribute("tabindex", "-1");
  confirmation.focus();
  announce(confirmationWords(region) || decided.gone);
  return true;
}

// An Undo button is offered for a short time only (the server refuses it afterwards anyway).
function expireUndos(root) {
  root.querySelectorAll("[data-undo-until]").forEach((form) => {
    const left = Date.parse(form.dataset.undoUntil) - Date.now();
    const remove = () => {
      // Focus on the button that goes stays nearby, on its confirmation.
      const holder = form.closest("[data-confirmation]");
      const hadFocus = form.contains(document.activeElement);
      form.remove();
      if (hadFocus && holder) {
        holder.setAttribute("tabindex", "-1");
        holder.focus();
      }
    };
    if (Number.isNaN(left)) return;
    if (left <= 0) remove();
    else window.setTimeout(remove, left);
  });
}

document.addEventListener("DOMContentLoaded", () => expireUndos(document));
document.addEventListener("htmx:load", (event) => expireUndos(event.detail.elt));

// ---- The inbox from the keyboard ----------------------------------------------------------------
// Only while focus is inside a list that offers them ([data-keys]) and not in a field, so the
// letters never take away typing (WCAG 2.1.4): j / k next and previous item, a approve, r the
// note (reject) or correction, where Ctrl+Enter sends it.

function itemStep(region, item, step) {
  const items = Array.from(region.querySelectorAll(ITEMS));
  if (!items.length) return;
  const at = item ? items.indexOf(item) : -1;
  const next = items[Math.min(Math.max(at + step, 0), items.length - 1)];
  next.focus();
  next.scrollIntoView({ block: "nearest" });
}

document.addEventListener("keydown", (event) => {
  const target = event.target;
  if (!(target instanceof Element)) return;
  const region = target.closest("[data-keys]");
  if (!region) return;
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && target.matches("textarea[data-key-submit]")) {
    const button = target.form && target.form.querySelector(`button[value="${target.dataset.keySubmit}"]`);
    if (button) {
      event.preventDefault();
      button.click();
    }
    return;
  }
  if (event.ctrlKey || event.metaKey || event.altKey || target.matches(FIELDS)) return;
  const item = target.closest(ITEMS);
  const act = {
    j: () => itemStep(region, item, 1),
    k: () => itemStep(region, item, -1),
    a: () => item && item.querySelector("button[data-key=a]")?.click(),
    r: () => item && item.querySelector("textarea[data-key-submit]")?.focus(),
  }[event.key];
  if (!act) return;
  event.preventDefault();
  act();
});

function settleFocus(plan, region, status) {
  if (status === 422) {
    // The answer shows a form error: focus goes to the field it is about (the alert is read out).
    const problem = region.querySelector('[aria-invalid="true"]') || region.querySelector('[role="alert"]');
    if (problem) {
      if (!problem.matches(FIELDS)) problem.setAttribute("tabindex", "-1");
      problem.focus();
    }
    return;
  }
  const stayed = plan.focusedId && document.getElementById(plan.focusedId);
  if (stayed) {
    stayed.focus({ preventScroll: true });
    const heading = region.querySelector(HEADINGS);
    announce(region.dataset.announce || (heading && updatedWords(heading)));
    return;
  }
  if (focusAfterDecision(plan, region)) return;
  // Focus moves to the nearest element around the sent form that is still there; the words are
  // those of the one that went (a decided approval) or of the one focused.
  let goneWords = null;
  for (const anchor of plan.anchors) {
    const now = document.getElementById(anchor.id);
    const target = now && focusable(now);
    if (!now) goneWords = goneWords || anchor.gone;
    if (!target) continue;
    target.focus();
    announce(goneWords || now.dataset.announce || updatedWords(target));
    return;
  }
}

// ---- The swap itself ---------------------------------------------------------------------------

// A poll answered by the sign-in page (the session ended) shows nothing in place of the region.
function redirectedAway(detail) {
  const asked = new URL(detail.requestConfig.path, window.location.href).pathname;
  return Boolean(detail.xhr.responseURL) && new URL(detail.xhr.responseURL).pathname !== asked;
}

document.addEventListener("htmx:beforeSwap", (event) => {
  const detail = event.detail;
  const region = detail.target;
  if (!detail.shouldSwap || !region || !detail.requestConfig) return;
  const elt = detail.requestConfig.elt;
  const polled = isPoll(elt);
  if (polled && redirectedAway(detail)) {
    detail.shouldSwap = false;
    return;
  }
  const kept = fieldsToKeep(region, polled ? null : elt?.closest?.("form"));
  const forced = updateAsked.delete(region.id);
  if (polled && !forced) {
    const incoming = new DOMParser().parseFromString(detail.serverResponse, "text/html");
    if (kept.some((saved) => !incoming.getElementById(saved.id))) {
      detail.shouldSwap = false;
      holdBack(region);
      return;
    }
  }
  plans.set(detail.xhr, {
    regionId: region.id,
    kept,
    polled: polled && !forced,
    before: region.dataset.announce,
    // After "Show the changes" the notice's button goes away: focus moves to the region.
    focusedId: forced ? null : document.activeElement?.id || null,
    anchors: polled ? [{ id: region.id }] : anchorsOf(elt, region),
    neighbours: polled ? [] : neighboursOf(elt, region),
    after: polled ? null : afterAction(elt),
  });
});

document.addEventListener("htmx:afterSwap", (event) => {
  const detail = event.detail;
  const plan = plans.get(detail.xhr);
  if (!plan) return;
  plans.delete(detail.xhr);
  const region = document.getElementById(plan.regionId) || event.target;
  if (heldBack === plan.regionId) release();
  putBack(plan.kept);
  if (plan.polled) {
    // Only a change worth saying (a quest's status or sentence, the inbox count) is announced.
    if (region.dataset.announce !== plan.before) announce(region.dataset.announce);
    return;
  }
  if (plan.kept.some((saved) => saved.focused)) {
    announce(region.dataset.announce);
    return;
  }
  settleFocus(plan, region, detail.xhr.status);
});

// ---- Times in the person's time zone -----------------------------------------------------------
// The server shows times in the zone a person chose, else in their browser's, which it learns from
// this cookie (quests.middleware.PersonTimeZoneMiddleware). IANA names need no encoding in a cookie.
{
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (zone && !document.cookie.split("; ").includes(`questlog_tz=${zone}`)) {
    document.cookie = `questlog_tz=${zone}; path=/; max-age=31536000; samesite=lax`;
  }
}

// ---- Text limits and the checkpoint picture, on load and in swapped content --------------------

// A field with a limit (maxlength) says how much of it is used, in the hint it is described by.
function countCharacters(field) {
  const counter = document.getElementById(field.dataset.counter);
  if (!counter) return;
  const most = Number(counter.dataset.limit);
  counter.textContent = `${field.value.length.toLocaleString("en")} of ${most.toLocaleString("en")} characters.`;
}

document.addEventListener("input", (event) => {
  if (event.target instanceof Element && event.target.matches("[data-counter]")) countCharacters(event.target);
});

// The checkpoint picture scrolls sideways. It opens showing the checkpoint it is centred on (the
// current one, unless the person chose another) at any width: with all the drawn checkpoints when
// they fit, else with that one in the middle. A short history leaves most of the picture empty.
function centreTree(wrap) {
  const svg = wrap.querySelector("svg.tree");
  const ring = svg?.querySelector(".chosen-ring");
  if (!ring) return;
  const scale = svg.getBoundingClientRect().width / (svg.viewBox.baseVal.width || 1);
  const xs = Array.from(svg.querySelectorAll("circle[data-seq]"), (dot) => dot.cx.baseVal.value * scale);
  const chosen = ring.cx.baseVal.value * scale;
  const spread = Math.max(...xs) - Math.min(...xs);
  const middle = spread + 40 <= wrap.clientWidth ? (Math.max(...xs) + Math.min(...xs)) / 2 : chosen;
  wrap.scrollLeft = Math.max(0, middle - wrap.clientWidth / 2);
}

document.addEventListener("htmx:load", (event) => {
  const root = event.detail.elt;
  if (!(root instanceof Element)) return;
  root.querySelectorAll("[data-counter]").forEach(countCharacters);
  root.querySelectorAll(".tree-wrap").forEach(centreTree);
});
