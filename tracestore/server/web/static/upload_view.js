// The upload view: pick or drop a folder, describe the workload (a metadata file or a small
// form), see the service's verdict on the upload as you type (upload-url's dry run, in its
// own words), watch each file go, and pick the same folder again to finish an upload a reload
// cut short. mountUploadView is the seam the page's router calls (docs/web.md, "Uploading
// from the browser").
import { ApiError } from "/static/api.js";
import { h } from "/static/dom.js";
import { isAbort } from "/static/errors.js";
import { bytes, expiry, plural } from "/static/format.js";
import { progressPanel } from "/static/upload_progress.js";
import {
  censusBeforeUpload,
  checkUpload,
  continueUpload,
  differences,
  filesOfDrop,
  filesOfInput,
  folderOfInput,
  forgetUpload,
  savedUploads,
  sendAndComplete,
  startUpload,
} from "/static/upload.js";

const CSS = "/static/upload.css";
// The upload running in this page, if one is: it outlives its view (the page's router may
// show another view meanwhile), so a view mounted later shows its progress rather than
// offering to send it a second time. { panel, files } (files.state once the session exists).
let active = null;
// The view mounted last: where an upload that finishes reports.
let mounted = null;
// The form's degrees: the five whose product is the rank count, then cp and fsdp (stored).
const FORM_DEGREES = ["dp", "tp", "sp", "ep", "pp", "cp", "fsdp"];
const DESCRIPTIVE = ["workload_family", "workload_name", "precision"];
// How long typing pauses before the service is asked for its verdict.
const ASK_AFTER_MS = 300;
const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?$/;

// The JSON text of the metadata the form's fields describe, or null: a degree or the rank
// count as written when it is a JSON number (so 2.0 and 0 meet the service's rules as numbers,
// 12345678901234567891 keeps its digits), any other text as a string, which the rules refuse
// by name; the descriptive members (snake_case, as promotion and the list filters read them)
// as strings. Empty fields are left out, and so are empty objects.
export function formMetadataText(values) {
  const filled = (names) => names.filter((name) => (values[name] ?? "").trim());
  const member = (name, text) => `${JSON.stringify(name)}:${text}`;
  const number = (name) => {
    const text = values[name].trim();
    return member(name, JSON_NUMBER.test(text) ? text : JSON.stringify(text));
  };
  const object = (members) => (members.length ? `{${members.join(",")}}` : null);
  const shape = object(filled(["rankCount"]).map(number));
  const parallelism = object(filled(FORM_DEGREES).map(number));
  return object([
    ...filled(DESCRIPTIVE).map((name) => member(name, JSON.stringify(values[name].trim()))),
    ...(shape ? [member("shape", shape)] : []),
    ...(parallelism ? [member("parallelism", parallelism)] : []),
  ]);
}

function messageOf(error) {
  if (error instanceof ApiError) {
    return error.requestId ? `${error.message} (request ${error.requestId})` : error.message;
  }
  return String(error?.message ?? error);
}

function ensureStylesheet() {
  if (!document.querySelector(`link[href="${CSS}"]`)) {
    document.head.append(h("link", { rel: "stylesheet", href: CSS }));
  }
}

export function mountUploadView(container, { onUploaded } = {}) {
  ensureStylesheet();
  container.replaceChildren();
  const view = h("section", { class: "upload-view" }, h("h1", {}, "Upload a traceset"));
  container.append(view);
  const unfinished = h("div", { class: "upload-unfinished" });
  view.append(unfinished);

  // Run an upload (start or continue) in a progress panel; offers to try again on failure.
  async function run(panelFiles, work, where) {
    const panel = progressPanel(panelFiles);
    where.replaceChildren(panel.root);
    const controller = new AbortController();
    active = { panel, files: panelFiles };
    const stop = h(
      "button",
      { type: "button", onclick: () => controller.abort(new Error("Stopped; what was sent is kept")) },
      "Stop",
    );
    panel.actions.replaceChildren(stop);
    panel.status("Uploading…");
    try {
      const traceset = await work({
        onProgress: panel.progress,
        onWaiting: (text) => panel.status(text ?? "Uploading…"),
        signal: controller.signal,
      });
      panel.status(
        `Uploaded ${traceset.name}: ${traceset.fileCount} files, ${bytes(traceset.totalSize)}, ${traceset.status}; expires ${expiry(traceset)}`,
      );
      panel.actions.replaceChildren();
      // A continued upload's card goes with its saved state; its outcome stays in view.
      if (unfinished.contains(panel.root)) mainPlace.replaceChildren(panel.root);
      active = null;
      showUnfinished();
      // Only a view still on the page opens the traceset: one left meanwhile is not yanked back.
      if (panel.root.isConnected) mounted?.onUploaded?.(traceset);
      return traceset;
    } catch (error) {
      panel.status("");
      panel.error(messageOf(error));
      const again = h("button", { type: "button", onclick: () => retry() }, "Try again");
      const resumable = savedUploads().some((s) => s.uploadId === panelFiles.state?.uploadId);
      panel.actions.replaceChildren(...(resumable ? [again] : []));
      showUnfinished();
      return null;
    } finally {
      if (active?.panel === panel) active = null;
    }
    function retry() {
      const state = savedUploads().find((s) => s.uploadId === panelFiles.state?.uploadId);
      const place = panel.root.parentElement ?? where; // the view it is in now
      if (state) run(panelFiles, (hooks) => continueUpload({ state, files: panelFiles, ...hooks }), place);
    }
  }

  // ---- unfinished uploads (kept in localStorage) ----

  function showUnfinished() {
    unfinished.replaceChildren();
    for (const state of savedUploads()) {
      if (active && state.uploadId === active.files.state?.uploadId) continue;
      unfinished.append(unfinishedCard(state));
    }
  }

  function unfinishedCard(state) {
    const sent = Object.values(state.etags ?? {}).reduce((n, parts) => n + Object.keys(parts).length, 0);
    const total = state.files.reduce((n, f) => n + f.size, 0);
    const folder = h("input", { type: "file", webkitdirectory: true, "aria-label": `Folder for ${state.name}` });
    const hasSupporting = state.files.some((f) => f.role === "supporting");
    const extra = h("input", { type: "file", multiple: true, "aria-label": `Supporting files for ${state.name}` });
    const problem = h("p", { class: "error", role: "alert" });
    const place = h("div");
    const forget = () => {
      forgetUpload(state.uploadId);
      card.remove();
    };
    const card = h(
      "div",
      { class: "upload-card" },
      h("h2", {}, `Unfinished upload: ${state.name}`),
      h(
        "p",
        {},
        `${state.files.length} files, ${bytes(total)}, ${sent} parts sent, started ` +
          `${new Date(state.startedAt).toLocaleString()}. The browser cannot reopen files by ` +
          "itself: pick the same folder again to send the rest.",
      ),
      h("label", {}, "Pick the folder again ", folder),
      hasSupporting && h("label", {}, " and its supporting files ", extra),
      problem,
      place,
      h("button", { type: "button", class: "secondary", onclick: forget }, "Forget it"),
    );
    const tryContinue = () => {
      const files = [
        ...filesOfInput(folder.files ?? [], "primary"),
        ...filesOfInput(extra.files ?? [], "supporting"),
      ];
      if (!folder.files?.length) return;
      if (hasSupporting && !extra.files?.length) {
        problem.textContent = "Pick its supporting files too";
        return;
      }
      const why = differences(state, files);
      problem.textContent = why ?? "";
      if (why) return;
      files.state = state;
      run(files, (hooks) => continueUpload({ state, files, ...hooks }), place);
    };
    folder.addEventListener("change", tryContinue);
    extra.addEventListener("change", tryContinue);
    return card;
  }

  // ---- a new upload ----

  let primary = [];
  let folderName = "";
  const drop = h("div", { class: "upload-drop" });
  const folderInput = h("input", { type: "file", webkitdirectory: true, "aria-label": "Choose a folder" });
  drop.append(
    h("p", {}, "Drop a folder here, or "),
    h("label", { class: "button-like" }, "Choose a folder", folderInput),
  );
  const pickedText = h("p", { class: "upload-picked", role: "status" });
  const supportingInput = h("input", { type: "file", multiple: true });
  const nameInput = h("input", { name: "name", required: true, maxlength: 255 });

  const fromFile = h("input", { type: "radio", name: "metadataFrom", value: "file" });
  const fromForm = h("input", { type: "radio", name: "metadataFrom", value: "form", checked: true });
  const metadataFile = h("input", { type: "file", accept: ".json,application/json" });
  const fields = {};
  const field = (key, label, attributes = {}) => {
    fields[key] = h("input", { name: key, inputmode: attributes.inputmode, autocomplete: "off" });
    return h("label", {}, label, " ", fields[key]);
  };
  const formFields = h(
    "div",
    { class: "upload-fields" },
    field("rankCount", "Rank count", { inputmode: "numeric" }),
    ...FORM_DEGREES.map((d) => field(d, d, { inputmode: "numeric" })),
    field("workload_family", "Model family"),
    field("workload_name", "Workload name"),
    field("precision", "Precision"),
  );
  const fileFields = h("div", { class: "upload-fields", hidden: true }, h("label", {}, "Metadata JSON file ", metadataFile));
  const verdict = h("p", { class: "upload-verdict", role: "status" });
  const censusText = h("div", { class: "upload-census", role: "status", "aria-live": "polite" });
  const refusal = h("p", { class: "error", role: "alert" });
  const submit = h("button", { type: "submit" }, "Upload");
  const form = h(
    "form",
    { class: "upload-form" },
    drop,
    pickedText,
    h("label", {}, "Supporting files (optional) ", supportingInput),
    h("label", {}, "Traceset name ", nameInput),
    h(
      "fieldset",
      {},
      h("legend", {}, "Workload metadata"),
      h("label", {}, fromForm, " Fill in"),
      h("label", {}, fromFile, " From a JSON file"),
      formFields,
      fileFields,
      verdict,
    ),
    censusText,
    refusal,
    submit,
  );
  const mainPlace = h("div");
  view.append(mainPlace, form);

  let metadataText = null; // the file's text when a file is the source
  let metadataFileError = null;

  const supporting = () => filesOfInput(supportingInput.files ?? [], "supporting");
  const allFiles = () => [...primary, ...supporting()];
  const uploadName = () => nameInput.value.trim() || folderName || "traceset";

  function describePicked() {
    const files = allFiles();
    const total = files.reduce((n, f) => n + f.size, 0);
    pickedText.textContent = files.length
      ? `${files.length} files, ${bytes(total)}${folderName ? ` from ${folderName}` : ""}`
      : "";
    if (folderName && !nameInput.value) nameInput.value = folderName;
  }

  // The upload the form describes now: { name, files, metadataText } (the metadata's JSON text
  // as it will be sent, or null), or throws an Error saying why there is none to ask about.
  function described() {
    const files = allFiles();
    if (!fromFile.checked) {
      const values = Object.fromEntries(Object.entries(fields).map(([k, input]) => [k, input.value]));
      return { name: uploadName(), files, metadataText: formMetadataText(values) };
    }
    if (metadataFileError) throw new Error(metadataFileError);
    if (metadataText !== null) {
      try {
        JSON.parse(metadataText); // one JSON value: it goes into the request as written
      } catch (error) {
        throw new Error(`The metadata file is not JSON: ${error.message}`);
      }
    }
    return { name: uploadName(), files, metadataText: metadataText?.trim() ?? null };
  }

  // The rank census of the files before they are sent, as `tracestore upload` warns of it.
  // A failed one is said beside the button, which then reads "Upload anyway".
  function sayCensus(answer, problem) {
    censusText.className = "upload-census";
    submit.textContent = "Upload";
    censusText.dataset.census = answer?.census ?? "";
    if (problem) {
      censusText.replaceChildren(h("p", { class: "muted" }, `The rank census could not be taken before upload (${problem}); the service takes it after.`));
      return;
    }
    if (!answer) {
      censusText.replaceChildren();
      return;
    }
    const found = `${plural(answer.ranksFound.length, "rank")} found` +
      (answer.expectedRankCount !== null ? ` of ${answer.expectedRankCount} expected` : "");
    if (answer.census === "pass") {
      censusText.classList.add("pass");
      censusText.replaceChildren(h("p", {}, `Rank census passed: ${found}.`));
    } else if (answer.census === "fail") {
      censusText.classList.add("fail");
      submit.textContent = "Upload anyway";
      censusText.replaceChildren(
        h("p", {}, `Rank census failed: ${found}` + (answer.missingRanks ? `, ${answer.missingRanks} missing` : "") + "."),
        h("ul", {}, answer.problems.map((text) => h("li", {}, text))),
        h("p", {}, "Fix the files or the metadata, or upload it as it is: the list will show it as incomplete."),
      );
    } else {
      censusText.classList.add("unknown");
      censusText.replaceChildren(
        h("p", {}, `Rank census not known before upload: the first bytes of ${plural(answer.unread.length, "file")} do not tell the rank (${answer.unread.slice(0, 5).join(", ")}${answer.unread.length > 5 ? ", …" : ""}); the service reads them whole once uploaded.`),
      );
    }
  }

  // The verdict, and what the service warns of in metadata it accepts (a member promotion
  // will refuse, a near miss of one it reads), each on a line of its own.
  function sayVerdict(text, refused, warnings = []) {
    verdict.classList.toggle("error", refused);
    verdict.replaceChildren(text, ...warnings.map((w) => h("span", { class: "upload-warning" }, `Warning: ${w}`)));
  }

  // The service's verdict on the upload the form describes (upload-url's dry run), shown in
  // its words: the upload described, or null when there is none or the service refuses it.
  // A question still waiting when another is asked is dropped.
  let asking = null;
  let askTimer = 0;
  let lastCensus = null; // { key, answer }: the census of these files and metadata
  async function askService() {
    clearTimeout(askTimer);
    asking?.abort();
    if (!allFiles().length) {
      sayVerdict("Pick or drop a folder: the service then checks the upload, its metadata included.", false);
      return null;
    }
    let upload;
    try {
      upload = described();
    } catch (error) {
      sayVerdict(error.message, true);
      return null;
    }
    const controller = new AbortController();
    asking = controller;
    verdict.setAttribute("aria-busy", "true");
    try {
      const answer = await checkUpload({ ...upload, signal: controller.signal });
      const said = answer.rankCount === null ? "No rank count declared." : `Rank count: ${answer.rankCount}`;
      sayVerdict(said, false, answer.warnings ?? []);
      upload.census = null;
      if (upload.files.some((f) => f.role === "primary")) {
        try {
          // Asked again only when the files or the metadata changed (not the name): it
          // sends up to 8 MiB of the files.
          const key = JSON.stringify([upload.metadataText, upload.files.map((f) => [f.name, f.size, f.lastModified, f.role])]);
          if (lastCensus?.key !== key) {
            lastCensus = { key, answer: await censusBeforeUpload({ ...upload, signal: controller.signal }) };
          }
          upload.census = lastCensus.answer;
          sayCensus(upload.census);
        } catch (error) {
          if (controller.signal.aborted || isAbort(error)) return null;
          sayCensus(null, error instanceof ApiError ? error.message : String(error?.message ?? error));
        }
      } else {
        sayCensus(null);
      }
      return upload;
    } catch (error) {
      if (controller.signal.aborted || isAbort(error)) return null;
      sayVerdict(error instanceof ApiError ? error.message : String(error?.message ?? error), true);
      sayCensus(null);
      return null;
    } finally {
      if (asking === controller) {
        asking = null;
        verdict.removeAttribute("aria-busy");
      }
    }
  }
  const askSoon = () => {
    clearTimeout(askTimer);
    askTimer = setTimeout(askService, ASK_AFTER_MS);
  };

  const showSource = () => {
    formFields.hidden = fromFile.checked;
    fileFields.hidden = !fromFile.checked;
    askSoon();
  };
  fromFile.addEventListener("change", showSource);
  fromForm.addEventListener("change", showSource);
  formFields.addEventListener("input", askSoon);
  nameInput.addEventListener("input", askSoon);
  metadataFile.addEventListener("change", async () => {
    const file = metadataFile.files?.[0];
    metadataText = null;
    metadataFileError = null;
    if (file) {
      try {
        metadataText = await file.text();
      } catch (error) {
        metadataFileError = `${file.name} could not be read: ${error.message}`;
      }
    }
    askSoon();
  });
  folderInput.addEventListener("change", () => {
    primary = filesOfInput(folderInput.files ?? [], "primary");
    folderName = folderOfInput(folderInput.files ?? []);
    describePicked();
    askSoon();
  });
  supportingInput.addEventListener("change", () => {
    describePicked();
    askSoon();
  });
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", async (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    try {
      const dropped = await filesOfDrop(event.dataTransfer, "primary");
      primary = dropped.files;
      folderName = dropped.folder;
      refusal.textContent = "";
    } catch (error) {
      refusal.textContent = `The drop could not be read: ${error.message}`;
    }
    describePicked();
    askSoon();
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    refusal.textContent = "";
    if (active) {
      refusal.textContent = "An upload is already running; wait for it or stop it first";
      return;
    }
    if (!allFiles().length) {
      refusal.textContent = "Nothing to upload: pick or drop a folder first";
      return;
    }
    submit.disabled = true;
    try {
      // Asked once more, for exactly what is sent: the service's verdict, before anything is created.
      // The census too: it is on the view (failed, beside "Upload anyway") before a byte goes.
      const upload = await askService();
      if (!upload) {
        refusal.textContent = verdict.textContent;
        return;
      }
      await run(
        upload.files,
        async (hooks) => {
          const { session, state } = await startUpload({
            ...upload,
            signal: hooks.signal,
            onRetry: (attempt, delay) =>
              hooks.onWaiting(`Asking for upload URLs: no answer yet; trying again in ${(delay / 1000).toFixed(1)} s`),
          });
          upload.files.state = state;
          return sendAndComplete({ session, files: upload.files, state, ...hooks });
        },
        mainPlace,
      );
    } finally {
      submit.disabled = false;
    }
  });

  mounted = { onUploaded, view };
  if (active) mainPlace.append(active.panel.root);
  showUnfinished();
  askService();
}
