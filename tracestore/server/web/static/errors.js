// Errors as a person needs them: what happened (in the API's own words) and what to do next.
import { ApiError, NetworkError, UnansweredError } from "/static/api.js";
import { h } from "/static/dom.js";

// What to do after each status, when the API's message says what happened.
const NEXT_STEP = {
  400: "Change what the page asked for (a filter's value, a rank list) and try again.",
  403: "Your token does not give you this. Ask a tenant admin of your team to add you to the " +
    "workspace (or to do it for you), or sign out and sign in with a token that has access.",
  404: "It may have been deleted, or it is in a workspace you are not a member of. Check the " +
    "link, or find it in the list of tracesets.",
  409: "The traceset is not ready yet: wait for its upload to complete, then try again.",
  410: "The traceset has expired; it is removed at the next sweep.",
  412: "Promotion goes one scope up at a time (workspace → tenant → public) and needs workloadMetadata.",
  422: "Correct the member the message names: edit the workloadMetadata below and promote with " +
    "it (the rank count must stay the one uploaded), or upload a corrected traceset.",
};

const TITLES = {
  400: "The service refused the request",
  403: "Not allowed",
  404: "Not found",
  409: "Not ready",
  410: "Expired",
  422: "Refused",
};

// The user stopped waiting (a view was left before its answer came), or the service stopped
// accepting the token and the page is back at sign-in: either way the view shows nothing.
export function isAbort(error) {
  return error?.name === "AbortError" || error?.signedOut === true;
}

export function title(error) {
  if (error instanceof UnansweredError) return "No answer: the service may have done it";
  if (error instanceof NetworkError) return "The service is not answering";
  if (error instanceof ApiError) return TITLES[error.status] ?? `The service answered ${error.status}`;
  return "Something went wrong in the page";
}

export function nextStep(error) {
  if (error instanceof UnansweredError) {
    return "Look at what the service holds now (reload the view) before you try again.";
  }
  if (error instanceof NetworkError) {
    return "The page retried for about 15 seconds. Check your connection or ask whoever runs " +
      "the service whether it is up, then try again.";
  }
  if (error instanceof ApiError) {
    return NEXT_STEP[error.status] ??
      (error.status >= 500 && error.requestId
        ? `Try again; if it keeps failing, give the service's operator the request id ${error.requestId}.`
        : "Try again.");
  }
  return "Reload the page and try again.";
}

// The panel a view shows instead of itself when its data could not be had.
export function errorPanel(error, { retry } = {}) {
  return h(
    "section",
    { class: "problem", role: "alert", dataset: { status: error?.status ?? "network" } },
    h("h1", {}, title(error)),
    h("p", { class: "problem-message" }, error?.message ?? String(error)),
    h("p", { class: "problem-next" }, nextStep(error)),
    h(
      "p",
      { class: "actions" },
      retry && h("button", { type: "button", onclick: retry }, "Try again"),
      h("a", { href: "/", class: "button" }, "All tracesets"),
    ),
  );
}

// The banner that says the page is waiting for the service (api.js's onRetry).
export function waitingBanner() {
  let banner = document.getElementById("waiting");
  if (!banner) {
    banner = h("div", { id: "waiting", class: "waiting", role: "status", hidden: true });
    document.body.prepend(banner);
  }
  return {
    onRetry(attempt, delayMs) {
      banner.hidden = false;
      banner.textContent = `The service is not answering; trying again in ${Math.ceil(delayMs / 1000)} s ` +
        `(attempt ${attempt + 1})…`;
    },
    done() {
      banner.hidden = true;
      banner.textContent = "";
    },
  };
}
