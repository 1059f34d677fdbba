// The page's entry module: sign-in and the view router. The API token lives in this tab's
// sessionStorage only: never in a URL or a cookie.
import { api, ApiError, setToken, token } from "/static/api.js";

function signIn(root, reason) {
  root.innerHTML = `
    <form class="signin">
      <h1>Sign in</h1>
      <label>API token <input name="token" type="password" autocomplete="off" required></label>
      <button type="submit">Sign in</button>
      <p class="error" role="alert"></p>
    </form>`;
  const form = root.querySelector("form");
  if (reason) form.querySelector(".error").textContent = reason;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = form.elements.token.value.trim();
    try {
      await api("/tracesets", { query: { limit: 1 }, auth: value });
      setToken(value);
      render();
    } catch (error) {
      form.querySelector(".error").textContent =
        error instanceof ApiError ? error.message : String(error.message ?? error);
    }
  });
}

function render() {
  const root = document.getElementById("app");
  if (!token()) {
    signIn(root);
    return;
  }
  root.textContent = "Signed in.";
}

window.addEventListener("tracestore:signed-out", (event) =>
  signIn(document.getElementById("app"), event.detail?.message),
);
render();
