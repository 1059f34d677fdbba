// Sign-in through the deployment's OpenID Connect login: the authorization code flow with
// PKCE, the page being a public client (no secret). The service puts the login's settings in
// a <meta> of the shell; the access token the login gives is a JWT the service verifies
// (TRACESTORE_JWKS_*), kept like an API token in this tab's sessionStorage. The code comes
// back in the callback's URL once and is useless without this tab's verifier; the page
// drops it from the address bar at once.
import { fetchRetrying } from "/static/api.js";

const PENDING_KEY = "tracestore.login";

export function loginConfig() {
  const meta = document.querySelector('meta[name="tracestore-login"]');
  return meta ? JSON.parse(meta.content) : null;
}

function randomText(bytes) {
  return base64url(crypto.getRandomValues(new Uint8Array(bytes)));
}

function base64url(bytes) {
  let text = "";
  for (const byte of new Uint8Array(bytes)) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function callbackUrl(config) {
  return location.origin + config.callbackPath;
}

// Sends the browser to the login; it comes back to the callback, then to `returnTo`.
export async function startLogin(config, returnTo) {
  if (!crypto.subtle) {
    throw new Error(
      "The login needs the page over https (or on localhost): browsers compute the PKCE " +
        "challenge only in a secure context. Sign in with a token instead.",
    );
  }
  const verifier = randomText(48);
  const state = randomText(18);
  sessionStorage.setItem(PENDING_KEY, JSON.stringify({ verifier, state, returnTo }));
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  const url = new URL(config.authorizationUrl);
  const query = {
    response_type: "code",
    client_id: config.clientId,
    redirect_uri: callbackUrl(config),
    scope: config.scope,
    state,
    code_challenge: base64url(digest),
    code_challenge_method: "S256",
  };
  for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
  location.assign(url.toString());
}

// On the callback: the code exchanged for an access token; an Error saying what went wrong
// otherwise. Either way the address bar then shows the view to open.
export async function finishLogin(config) {
  const answer = new URLSearchParams(location.search);
  const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? "null");
  sessionStorage.removeItem(PENDING_KEY);
  // The code leaves the address bar at once; the URL becomes the view sign-in began on.
  history.replaceState(null, "", pending?.returnTo || "/");
  // The state first, for errors too: an answer without this tab's state is a link anyone
  // could have sent, and its error_description words the page must not show as the login's.
  if (!pending || answer.get("state") !== pending.state || !(answer.get("code") || answer.get("error"))) {
    throw new Error("This answer from the login does not belong to a sign-in started in this tab. Sign in again.");
  }
  if (answer.get("error")) {
    const why = answer.get("error_description");
    throw new Error(`The login refused the sign-in: ${answer.get("error")}${why ? ` (${why})` : ""}.`);
  }
  const body = new URLSearchParams({
    grant_type: "authorization_code",
    code: answer.get("code"),
    redirect_uri: callbackUrl(config),
    client_id: config.clientId,
    code_verifier: pending.verifier,
  });
  let response;
  try {
    // A POST, so sent once (api.js): the code is single-use, a second exchange is refused.
    response = await fetchRetrying(config.tokenUrl, { method: "POST", body, headers: { Accept: "application/json" } });
  } catch (error) {
    throw new Error(`The login's token endpoint did not answer (${error.cause?.message ?? error.message}). Sign in again.`);
  }
  const tokens = await response.json().catch(() => null);
  if (!response.ok || !tokens?.access_token) {
    const why = tokens?.error_description ?? tokens?.error ?? `${response.status} ${response.statusText}`;
    throw new Error(`The login did not give an access token: ${why}.`);
  }
  return tokens.access_token;
}
