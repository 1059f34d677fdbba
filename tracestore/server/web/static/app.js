// The page's entry module: sign-in and the view router. The API token lives in this tab's
// sessionStorage only: never in a URL or a cookie.
const TOKEN_KEY = "tracestore.token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function signIn(root) {
  root.innerHTML = `
    <form class="signin">
      <h1>Sign in</h1>
      <label>API token <input name="token" type="password" autocomplete="off" required></label>
      <button type="submit">Sign in</button>
      <p class="error" role="alert"></p>
    </form>`;
  const form = root.querySelector("form");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = form.elements.token.value.trim();
    const answer = await fetch("/api/v1/tracesets?limit=1", {
      headers: { Authorization: `Bearer ${value}` },
    });
    if (answer.ok) {
      sessionStorage.setItem(TOKEN_KEY, value);
      render();
    } else {
      const body = await answer.json().catch(() => null);
      form.querySelector(".error").textContent =
        body?.error?.message ?? `The service answered ${answer.status}`;
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

render();
