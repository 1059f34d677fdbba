// The page's entry module: sign-in, the navigation and the router. Each view has a real URL
// (history API): "/" the list (its filters in the query string), "/tracesets/<id>" one
// traceset, "/upload" the upload, "/compare?base=<id>&other=<id>" two compared; the service serves this shell at each of them, so a URL can
// be shared, bookmarked and reloaded. The API token lives in this tab's sessionStorage only:
// never in a URL or a cookie.
import { api, ApiError, setToken, token } from "/static/api.js";
import { h, show } from "/static/dom.js";
import { errorPanel, isAbort, waitingBanner } from "/static/errors.js";
import { mountDetailView } from "/static/detail_view.js";
import { mountListView } from "/static/list_view.js";
import { finishLogin, loginConfig, startLogin } from "/static/login.js";

let shown = null; // the AbortController of the view on screen: leaving it stops its requests

export function route(pathname) {
  if (pathname === "/") return { view: "list" };
  const detail = /^\/tracesets\/([^/]+)$/.exec(pathname);
  if (detail) {
    try {
      return { view: "detail", id: decodeURIComponent(detail[1]) };
    } catch {
      return { view: "unknown" }; // broken percent-encoding (%E0%A4%A): no id to ask for
    }
  }
  if (pathname === "/upload") return { view: "upload" };
  if (pathname === "/compare") return { view: "compare" };
  if (pathname === loginConfig()?.callbackPath) return { view: "callback" };
  return { view: "unknown" };
}

export function navigate(url, { replace = false, state = null } = {}) {
  history[replace ? "replaceState" : "pushState"](state, "", url);
  render({ moved: true });
}

function signIn(root, reason) {
  renderNav(null);
  document.title = "Sign in · tracestore";
  root.innerHTML = `
    <form class="signin">
      <h1>Sign in</h1>
      <label>API token <input name="token" type="password" autocomplete="off" required></label>
      <p class="muted">An API token (<code>tst_…</code>, from <code>tracestore token create</code>
      or your administrator), or an access token (JWT) from your organisation's login when the
      service accepts them. It is kept in this tab only, until you sign out or close the tab.</p>
      <button type="submit">Sign in</button>
      <p class="error" role="alert"></p>
    </form>`;
  const form = root.querySelector("form");
  if (reason) form.querySelector(".error").textContent = reason;
  const login = loginConfig();
  if (login) {
    const returnTo = location.pathname === login.callbackPath ? "/" : location.pathname + location.search;
    const button = h("button", { type: "button", class: "login" }, "Sign in with your organisation's login");
    button.addEventListener("click", () =>
      startLogin(login, returnTo).catch((error) => (form.querySelector(".error").textContent = error.message)),
    );
    form.querySelector("h1").after(button, h("p", { class: "muted" }, "or with a token:"));
  }
  form.elements.token.focus();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = form.elements.token.value.trim();
    const odd = /[^\x21-\x7e]/.exec(value);
    if (odd) {
      // fetch() refuses such a header before sending anything, which would read as the
      // service not answering after every retry.
      form.querySelector(".error").textContent =
        `A token is one word of printable ASCII; this one has ${JSON.stringify(odd[0])} at ` +
        `position ${odd.index + 1}. Paste the whole token again, on one line.`;
      return;
    }
    const submit = form.querySelector('button[type="submit"]');
    const waiting = waitingBanner();
    submit.disabled = true; // one sign-in at a time while the service is retried
    form.querySelector(".error").textContent = "";
    try {
      await api("/tracesets", { query: { limit: 1 }, auth: value, onRetry: waiting.onRetry });
      setToken(value);
      render();
    } catch (error) {
      form.querySelector(".error").textContent =
        error instanceof ApiError ? error.message : String(error.message ?? error);
    } finally {
      waiting.done();
      submit.disabled = false;
    }
  });
}

function signOut() {
  setToken(null);
  shown?.abort();
  signIn(document.getElementById("app"), "Signed out. Sign in again to continue.");
}

function renderNav(where) {
  const nav = document.getElementById("nav");
  if (!where) {
    show(nav);
    return;
  }
  const link = (href, label, active) =>
    h("a", { href, "aria-current": active ? "page" : null }, label);
  show(
    nav,
    link("/", "Tracesets", where.view === "list"),
    link("/upload", "Upload", where.view === "upload"),
    h("button", { type: "button", class: "secondary signout", onclick: signOut }, "Sign out"),
  );
}

// Back from the deployment's login: exchange its code, then open the view sign-in began on.
async function completeLogin(root) {
  renderNav(null);
  show(root, h("p", { class: "muted" }, "Signing in…"));
  try {
    const value = await finishLogin(loginConfig());
    await api("/tracesets", { query: { limit: 1 }, auth: value });
    setToken(value);
    render();
  } catch (error) {
    signIn(root, error.message);
  }
}

// After a view changes in place, focus goes to its heading, as a page load would put a
// screen reader at the top: the link or button that was focused is gone with the old view.
function focusHeading(root) {
  const heading = root.querySelector("h1");
  if (!heading || root.contains(document.activeElement)) return;
  heading.tabIndex = -1;
  heading.focus({ preventScroll: true });
}

export function render({ moved = false } = {}) {
  const root = document.getElementById("app");
  shown?.abort();
  if (route(location.pathname).view === "callback") {
    completeLogin(root);
    return;
  }
  if (!token()) {
    signIn(root);
    return;
  }
  shown = new AbortController();
  const where = route(location.pathname);
  renderNav(where);
  const context = { signal: shown.signal, navigate };
  let mounted;
  if (where.view === "list") mounted = mountListView(root, context);
  else if (where.view === "detail") mounted = mountDetailView(root, where.id, context);
  else if (where.view === "upload") mounted = mountUpload(root);
  else if (where.view === "compare") mounted = mountCompare(root, context);
  else {
    document.title = "Not found · tracestore";
    show(
      root,
      errorPanel(new ApiError(404, "NOT_FOUND", `The page has no view at ${location.pathname}.`)),
    );
  }
  const view = shown;
  Promise.resolve(mounted)
    .catch((error) => {
      if (!isAbort(error)) show(root, errorPanel(error));
    })
    .then(() => moved && !view.signal.aborted && focusHeading(root));
  window.scrollTo(0, 0);
}

// web-B's upload view, loaded when first opened; a finished upload opens its traceset.
function mountUpload(root) {
  document.title = "Upload · tracestore";
  return import("/static/upload_view.js").then((module) =>
    module.mountUploadView(root, {
      onUploaded: (traceset) => navigate(`/tracesets/${encodeURIComponent(traceset.id)}`),
    }),
  );
}

// The comparison of two tracesets, loaded when first opened.
function mountCompare(root, context) {
  return import("/static/compare_view.js").then((module) => module.mountCompareView(root, context));
}

// Same-origin links to a page URL change the view without reloading the page.
document.addEventListener("click", (event) => {
  const link = event.target.closest?.("a[href]");
  if (!link || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  if (link.target || link.hasAttribute("download") || link.origin !== location.origin) return;
  if (route(link.pathname).view === "unknown") return;
  event.preventDefault();
  navigate(link.pathname + link.search + link.hash);
});
window.addEventListener("popstate", () => render({ moved: true }));
window.addEventListener("tracestore:signed-out", (event) => {
  shown?.abort(); // the view's other requests and refreshes would only answer 401 again
  signIn(
    document.getElementById("app"),
    `The service no longer accepts your token (${event.detail?.message ?? "401"}). Sign in again.`,
  );
});
render();
