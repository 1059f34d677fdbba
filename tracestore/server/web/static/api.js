// The page's one way to call the JSON API: the token from this tab's sessionStorage as a
// Bearer header, the error envelope turned into an ApiError carrying the API's own words, and
// network failures of requests safe to send again retried with backoff (a restarting service
// answers again within seconds).
export const TOKEN_KEY = "tracestore.token";
export const API = "/api/v1";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(status, code, message, requestId) {
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
  }
}

// A network error (no answer at all) after every retry.
export class NetworkError extends Error {}

// No answer to a request that is not safe to send again, which may have reached the service:
// it was not sent again, and the service may have acted on it.
export class UnansweredError extends NetworkError {}

const RETRY_DELAYS_MS = [250, 500, 1000, 2000, 4000, 8000];

export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    });
  });
}

// fetch() that retries when no answer came (and on 502/503/504, which a load balancer gives
// while a replica restarts); onRetry(attempt, delayMs) lets a view say it is waiting. send
// replaces fetch (same arguments, a Response back): the upload sends with XMLHttpRequest,
// the one browser API that reports how far a request body has gone.
//
// Only a request the service may get twice is sent again (idempotent; by default every
// method but POST, as tracestore/client/api.py decides). A POST that is not (upload-url
// creates a traceset, the login's code is single-use) is sent once: fetch() cannot tell a
// connection refused from one cut after the request went, so its failure is an
// UnansweredError, and a 502-504 answer is returned as it is.
export async function fetchRetrying(url, init = {}, { onRetry, signal, send = fetch, idempotent } = {}) {
  const again = idempotent ?? (init.method ?? "GET").toUpperCase() !== "POST";
  for (let attempt = 0; ; attempt++) {
    let answer;
    try {
      answer = await send(url, { ...init, signal });
    } catch (error) {
      if (signal?.aborted) throw error;
      if (!again) {
        throw new UnansweredError(
          `The request was sent and no answer came (${error.message}): the service may have ` +
            "acted on it, so the page did not send it again",
          { cause: error },
        );
      }
      if (attempt >= RETRY_DELAYS_MS.length) {
        throw new NetworkError(`The service did not answer: ${error.message}`);
      }
    }
    if (answer && (!again || ![502, 503, 504].includes(answer.status))) return answer;
    if (attempt >= RETRY_DELAYS_MS.length) return answer;
    onRetry?.(attempt + 1, RETRY_DELAYS_MS[attempt]);
    await sleep(RETRY_DELAYS_MS[attempt], signal);
  }
}

export async function errorOf(answer) {
  const body = await answer.json().catch(() => null);
  const error = body?.error;
  return new ApiError(
    answer.status,
    error?.code ?? "HTTP_" + answer.status,
    error?.message ?? `The service answered ${answer.status} ${answer.statusText}`,
    error?.requestId ?? answer.headers.get("x-request-id"),
  );
}

// Calls the API at API + path; query is an object (arrays repeat the key), body is sent as
// JSON (bodyText instead: JSON text sent as written, so its numbers keep their spelling);
// idempotent as fetchRetrying takes it. Returns the parsed JSON answer (null for 204), or
// with as: "text" its text (for metadata_tree.js, which keeps numbers as written), or throws
// ApiError / NetworkError.
export async function api(
  path,
  { method = "GET", query, body, bodyText, signal, onRetry, auth, as, idempotent } = {},
) {
  let url = API + path;
  if (query) {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) {
      if (value === undefined || value === null || value === "") continue;
      for (const one of Array.isArray(value) ? value : [value]) params.append(key, String(one));
    }
    const text = params.toString();
    if (text) url += "?" + text;
  }
  const headers = { Accept: "application/json" };
  const bearer = auth ?? token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const sent = bodyText ?? (body === undefined ? undefined : JSON.stringify(body));
  if (sent !== undefined) headers["Content-Type"] = "application/json";
  // A header fetch() cannot send is the page's fault, not the network's: it throws here
  // rather than being retried as if the service were down.
  const checked = new Headers(headers);
  const answer = await fetchRetrying(
    url,
    { method, headers: checked, body: sent },
    { onRetry, signal, idempotent },
  );
  if (!answer.ok) {
    const error = await errorOf(answer);
    if (answer.status === 401 && auth === undefined) {
      // The page goes back to sign-in (app.js); the view that asked has nothing left to show.
      error.signedOut = true;
      setToken(null);
      window.dispatchEvent(new CustomEvent("tracestore:signed-out", { detail: error }));
    }
    throw error;
  }
  if (answer.status === 204) return null;
  return as === "text" ? answer.text() : answer.json();
}
