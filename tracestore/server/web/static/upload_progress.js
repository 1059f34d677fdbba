// An upload's progress area, for upload_view.js; sizes as every view writes them.
import { h } from "/static/dom.js";
import { bytes } from "/static/format.js";

// A progress area: one bar overall and one per file, a status line, and retry/stop buttons.
export function progressPanel(files) {
  const overall = h("progress", { max: 1, value: 0, "aria-label": "Overall progress" });
  const overallText = h("span", { class: "upload-numbers" });
  const status = h("p", { class: "upload-status", role: "status" });
  const error = h("p", { class: "error", role: "alert" });
  const rows = new Map();
  const list = h("ul", { class: "upload-files" });
  for (const file of files) {
    const bar = h("progress", { max: file.size || 1, value: 0, "aria-label": file.name });
    const numbers = h("span", { class: "upload-numbers" });
    list.append(h("li", {}, h("span", { class: "upload-name" }, file.name), bar, numbers));
    rows.set(file.name, { bar, numbers, size: file.size });
  }
  const actions = h("div", { class: "upload-actions" });
  const root = h(
    "section",
    { class: "upload-progress", "aria-label": "Upload progress" },
    h("div", { class: "upload-overall" }, h("strong", {}, "Overall"), overall, overallText),
    status,
    error,
    actions,
    list,
  );
  let frame = 0;
  let latest = null;
  const paint = () => {
    frame = 0;
    const { files: perFile, done, total } = latest;
    overall.max = total || 1;
    overall.value = total ? done : 1;
    overallText.textContent = `${bytes(done)} of ${bytes(total)}`;
    for (const [name, p] of Object.entries(perFile)) {
      const row = rows.get(name);
      if (!row) continue;
      row.bar.max = p.size || 1;
      row.bar.value = p.size ? p.done : 1;
      row.numbers.textContent = p.done >= p.size ? "sent" : `${bytes(p.done)} of ${bytes(p.size)}`;
    }
  };
  return {
    root,
    actions,
    progress(update) {
      latest = update;
      if (!frame) frame = requestAnimationFrame(paint);
    },
    status(text) {
      status.textContent = text ?? "";
    },
    error(text) {
      error.textContent = text ?? "";
    },
  };
}
