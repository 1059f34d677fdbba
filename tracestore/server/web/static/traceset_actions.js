// What can be done with a traceset from its detail view: download (one file, the archive,
// some ranks), validate, edit its name, description and tags (its uploader or a tenant
// admin: the answer's canEdit), promote one scope up (optionally with corrected
// workloadMetadata, sent as typed). Each answer, and each refusal, is shown in the API's words.
import { api } from "/static/api.js";
import { checkList, readinessList } from "/static/checks.js";
import { h, show } from "/static/dom.js";
import { nextStep, waitingBanner } from "/static/errors.js";

const NEXT_SCOPE = { workspace: "tenant", tenant: "public" };
// What to do after a promotion's refusal, where the page's general next step would mislead.
const PROMOTE_NEXT = {
  403: "Promotion to public needs a tenant admin of your tenant: ask one to promote it.",
  409: "A traceset that is not ready cannot be promoted. One whose census fails can be promoted as it is: tick the box above and promote again.",
};
const SCOPE_MEANS = {
  tenant: "everyone in your tenant can see it, and it no longer expires",
  public: "every user of this service can see it (a tenant admin may do this)",
};
export function actions(traceset, metadataText, reload) {
  const id = encodeURIComponent(traceset.id);
  const ready = traceset.status === "ready";
  const downloadProblem = h("p", { class: "error", role: "alert" });
  const ranksInput = h("input", { name: "ranks", placeholder: "0-7,12", size: 12, autocomplete: "off" });
  const supporting = h("input", { type: "checkbox", name: "supporting" });
  const archive = () => download(id, {}, downloadProblem);
  const rankForm = h(
    "form",
    { class: "inline", "aria-label": "Download ranks" },
    h("label", {}, "Ranks ", ranksInput),
    h("label", {}, supporting, " with supporting files"),
    h("button", { type: "submit", disabled: !ready }, "Download ranks"),
  );
  rankForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const ranks = ranksInput.value.trim();
    if (!ranks) {
      downloadProblem.textContent = "Give the ranks to download, e.g. 0-7,12.";
      return;
    }
    download(id, { ranks, supporting: supporting.checked ? "true" : undefined }, downloadProblem);
  });

  const validation = h("div", { class: "validation", "aria-live": "polite" });
  const validate = async (event) => {
    event.target.disabled = true;
    show(validation, h("p", { class: "muted" }, "Re-reading every file and re-checking its SHA-256…"));
    try {
      const answer = await api(`/tracesets/${id}/validate`, {
        method: "POST",
        idempotent: true, // it only reads
        onRetry: waitingBanner().onRetry,
      });
      show(
        validation,
        h("p", { class: answer.valid ? "ok" : "bad", dataset: { valid: answer.valid } }, answer.valid ? "Valid." : "Not valid."),
        checkList(answer.checks.map((check) => [check.name, check])),
        h("h3", {}, "Which tools can read it (does not make it invalid)"),
        readinessList((answer.readiness ?? []).map((entry) => [entry.name, entry])),
      );
    } catch (error) {
      show(validation, h("p", { class: "error", role: "alert" }, error.message), h("p", { class: "muted" }, nextStep(error)));
    } finally {
      event.target.disabled = false;
      waitingBanner().done();
    }
  };

  return h(
    "section",
    { class: "panel actions-panel", "aria-label": "Actions" },
    h(
      "div",
      { class: "actions" },
      h("button", { type: "button", onclick: archive, disabled: !ready }, "Download archive (ZIP)"),
      rankForm,
      h("button", { type: "button", class: "secondary", onclick: validate, disabled: !ready }, "Validate"),
    ),
    !ready && h("p", { class: "muted" }, `The traceset is ${traceset.status}: downloads and validation need it ready.`),
    downloadProblem,
    validation,
    editing(traceset, reload),
    promotion(traceset, metadataText, reload),
  );
}

// The tags as the edit form writes them: comma-separated, each trimmed, none empty.
export function tagList(text) {
  return text.split(",").map((tag) => tag.trim()).filter((tag) => tag !== "");
}

function editing(traceset, reload) {
  if (!traceset.canEdit || traceset.status === "deleted") return null;
  const name = h("input", { name: "name", value: traceset.name, maxlength: 255, required: true, autocomplete: "off" });
  const description = h("textarea", { name: "description", rows: 3, maxlength: 4096 }, traceset.description ?? "");
  const tags = h("input", { name: "tags", value: traceset.tags.join(", "), autocomplete: "off", placeholder: "baseline, llama" });
  const problem = h("p", { class: "edit-error error", role: "alert" });
  const form = h(
    "form",
    { class: "edit", hidden: true, "aria-label": "Edit the traceset" },
    h("p", {}, h("label", {}, "Name ", name)),
    h("p", {}, h("label", {}, "Description (empty removes it) ", description)),
    h("p", {}, h("label", {}, "Tags (comma-separated) ", tags)),
    h("button", { type: "submit", class: "save-edit" }, "Save"),
    " ",
    h("button", { type: "button", class: "secondary", onclick: () => (form.hidden = true) }, "Cancel"),
    problem,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button.save-edit");
    button.disabled = true;
    problem.textContent = "";
    const body = { name: name.value, description: description.value.trim() === "" ? null : description.value, tags: tagList(tags.value) };
    try {
      await api(`/tracesets/${encodeURIComponent(traceset.id)}`, { method: "PATCH", body, onRetry: waitingBanner().onRetry });
      reload();
    } catch (error) {
      problem.textContent = `${error.message} ${nextStep(error)}`;
      button.disabled = false;
    } finally {
      waitingBanner().done();
    }
  });
  return h(
    "div",
    { class: "editing" },
    h("button", { type: "button", class: "secondary edit", onclick: () => (form.hidden = false) }, "Edit name, description, tags…"),
    form,
  );
}

// Asks for a presigned URL and follows it: the browser downloads (Content-Disposition).
export async function download(id, query, problem) {
  problem.textContent = "";
  try {
    const answer = await api(`/tracesets/${id}/download`, { query, onRetry: waitingBanner().onRetry });
    h("a", { href: answer.url, download: "" }).click();
  } catch (error) {
    problem.textContent = `${error.message} ${nextStep(error)}`;
  } finally {
    waitingBanner().done();
  }
}

function promotion(traceset, metadataText, reload) {
  const target = NEXT_SCOPE[traceset.scope];
  const box = h("div", { class: "promotion" });
  const outcome = sessionStorage.getItem(`tracestore.promoted.${traceset.id}`);
  if (outcome) {
    sessionStorage.removeItem(`tracestore.promoted.${traceset.id}`);
    box.append(h("p", { class: "ok promote-done", role: "status" }, outcome));
  }
  if (!target) {
    box.append(h("p", { class: "muted" }, "Public: there is no scope above this one."));
    return box;
  }
  const problem = h("p", { class: "promote-error error", role: "alert" });
  const next = h("p", { class: "muted promote-next" });
  // Optional: promote with corrected workloadMetadata, sent exactly as typed.
  const replace = h("input", { type: "checkbox", name: "replace-metadata" });
  const edited = h("textarea", { name: "metadata", rows: 6, spellcheck: "false", class: "metadata-edit", hidden: true }, metadataText);
  replace.addEventListener("change", () => (edited.hidden = !replace.checked));
  // Offered once the service refused the promotion because the census fails (409).
  const force = h("input", { type: "checkbox", name: "force" });
  const forcing = h("p", { class: "force", hidden: true }, h("label", {}, force, " Promote it as it is, though its census fails"));
  const confirm = h(
    "div",
    { class: "confirm", hidden: true },
    h("p", {}, `Promote to ${target}: ${SCOPE_MEANS[target]}.`),
    h("p", {}, h("label", {}, replace, " with this workloadMetadata instead of the stored one")),
    edited,
    forcing,
    h("button", { type: "button", class: "confirm-promote", onclick: (event) => promote(event.target) }, `Promote to ${target}`),
    " ",
    h("button", { type: "button", class: "secondary", onclick: () => (confirm.hidden = true) }, "Cancel"),
  );
  const promote = async (button) => {
    button.disabled = true;
    problem.textContent = "";
    next.textContent = "";
    const forced = force.checked ? ',"force":true' : "";
    let bodyText = `{"target":${JSON.stringify(target)}${forced}}`;
    if (replace.checked) {
      try {
        JSON.parse(edited.value); // one JSON value, or the body it goes in would not be JSON
      } catch (error) {
        problem.textContent = `The workloadMetadata is not JSON: ${error.message}.`;
        button.disabled = false;
        return;
      }
      bodyText = `{"target":${JSON.stringify(target)}${forced},"workloadMetadata":${edited.value.trim()}}`;
    }
    try {
      const answer = await api(`/tracesets/${encodeURIComponent(traceset.id)}/promote`, {
        method: "POST",
        bodyText,
        idempotent: true, // a promotion sent again answers "already": nothing changes twice
        onRetry: waitingBanner().onRetry,
      });
      const said = answer.promotionApplied
        ? `Promoted: ${traceset.scope} → ${answer.scope}.`
        : `Already ${answer.scope}: nothing changed.`;
      sessionStorage.setItem(`tracestore.promoted.${traceset.id}`, said);
      reload();
    } catch (error) {
      // The API's own words, exactly: they say which member or rule refused it.
      problem.textContent = error.message;
      next.textContent = PROMOTE_NEXT[error.status] ?? nextStep(error);
      if (error.status === 409 && traceset.status === "ready") forcing.hidden = false;
      button.disabled = false;
    } finally {
      waitingBanner().done();
    }
  };
  box.append(
    h(
      "button",
      { type: "button", class: "promote", disabled: traceset.status !== "ready", onclick: () => (confirm.hidden = false) },
      `Promote to ${target}…`,
    ),
    confirm,
    problem,
    next,
  );
  return box;
}

