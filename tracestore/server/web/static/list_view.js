// The list of tracesets. The page's query string is the list route's query, passed through
// as it is: a view's URL can be shared, and every filter the API takes works from the URL even
// where the form has no field for it (those show under "Other workload filters").
import { api } from "/static/api.js";
import { h, show } from "/static/dom.js";
import { errorPanel, isAbort, waitingBanner } from "/static/errors.js";
import { bytes, censusVerdict, statusClass, when } from "/static/format.js";

// The service's statuses, scopes and census verdicts, which the shell carries
// (tracestore/choices.py).
const shellList = (name) => JSON.parse(document.querySelector(`meta[name="tracestore-${name}"]`).content);
const STATUSES = shellList("statuses");
const SCOPES = shellList("scopes");
const CENSUS = shellList("census");
const SORTS = [
  ["created:desc", "Newest first"],
  ["created:asc", "Oldest first"],
  ["name:asc", "Name A–Z"],
  ["name:desc", "Name Z–A"],
  ["size:desc", "Largest first"],
  ["size:asc", "Smallest first"],
  ["rankCount:desc", "Most ranks first"],
  ["rankCount:asc", "Fewest ranks first"],
  ["status:asc", "Status A–Z"],
  ["status:desc", "Status Z–A"],
];
const LIMITS = ["20", "50", "100"];

// [parameter, label, placeholder]: the form's fields, in the order they show.
const TEXT_FILTERS = [
  ["search", "Name contains", ""],
  ["tag", "Tags (all of, comma-separated)", "baseline, llama"],
  ["uploadedBy", "Uploaded by", "me, or a user id"],
  ["workload_family", "Workload family", "llm"],
  ["workload_name", "Workload name", ""],
  ["createdAfter", "Created from", "2026-11-30 or 2026-11-30T09:00:00Z"],
  ["createdBefore", "Created before", "2026-12-01"],
  ["minRankCount", "Ranks at least", ""],
  ["maxRankCount", "Ranks at most", ""],
  ["inspected.gpu_model", "GPU model (inspected)", "H100"],
  ["inspected.backend", "Backend (inspected)", "nccl"],
  ["inspected.format", "Trace format (inspected)", "kineto_json"],
  ["inspected.nccl_version", "NCCL version (inspected)", "2.18.1"],
  ["inspected.world_size", "World size (inspected)", ""],
  ["minWorldSize", "World size at least", ""],
  ["maxWorldSize", "World size at most", ""],
  ["workspaceId", "Workspace id", "workspace_…"],
];
const FORM_PARAMS = new Set([...TEXT_FILTERS.map(([name]) => name), "status", "scope", "census", "sort", "limit", "next"]);

// The columns; those the API sorts by have their sort field.
const COLUMNS = [
  ["Name", "name"],
  ["Workload family"],
  ["Workload name"],
  ["Ranks", "rankCount"],
  ["Files"],
  ["Size", "size"],
  ["Status", "status"],
  ["Census"],
  ["Scope"],
  ["Created", "created"],
  ["Uploaded by"],
];

// How a workload value is written as a filter: the API reads a value as JSON when it is JSON
// (1024 the number), so a string that looks like JSON is sent quoted.
export function filterText(value) {
  if (typeof value !== "string") return JSON.stringify(value);
  try {
    const parsed = JSON.parse(value);
    return parsed !== null && typeof parsed === "object" ? value : JSON.stringify(value);
  } catch {
    return value;
  }
}

function workloadText(value) {
  if (value === null || value === undefined) return "—";
  return typeof value === "string" ? value : JSON.stringify(value);
}

// The page's query as api()'s query: a parameter given twice stays twice (the API refuses
// that, and says so; Object.fromEntries would quietly keep only the last).
function asQuery(params) {
  const query = {};
  for (const name of new Set(params.keys())) {
    const values = params.getAll(name);
    query[name] = values.length === 1 ? values[0] : values;
  }
  return query;
}

function listUrl(params) {
  const text = params.toString();
  return text ? `/?${text}` : "/";
}

export async function mountListView(root, { signal, navigate }) {
  const params = new URLSearchParams(location.search);
  const cursors = history.state?.cursors ?? null; // the cursors of the pages before this one
  document.title = "Tracesets · tracestore";
  const results = h("section", { class: "results", "aria-busy": "true" }, h("p", { class: "muted" }, "Loading…"));
  show(root, h("h1", {}, "Tracesets"), filterForm(params, navigate), results);

  const waiting = waitingBanner();
  let page;
  try {
    page = await api("/tracesets", { query: asQuery(params), signal, onRetry: waiting.onRetry });
  } catch (error) {
    if (isAbort(error)) return;
    show(results, errorPanel(error, { retry: () => navigate(location.href, { replace: true, state: history.state }) }));
    return;
  } finally {
    waiting.done();
  }
  results.removeAttribute("aria-busy");
  const picker = comparePicker(navigate);
  show(results, picker.bar, table(page.items, params, navigate, picker), pager(page.pagination, params, cursors, navigate));
  if (page.items.length === 0) {
    const filtered = [...params.keys()].some((key) => !["sort", "limit", "next"].includes(key));
    results.prepend(
      h(
        "p",
        { class: "empty" },
        filtered ? "No tracesets match these filters. " : "No tracesets yet. ",
        filtered ? h("a", { href: "/" }, "Clear the filters") : h("a", { href: "/upload" }, "Upload one"),
      ),
    );
  }
}

function filterForm(params, navigate) {
  // A label names its control by id: a select's options would become part of a wrapping
  // label's accessible name.
  const labelled = (label, control, wide = false) => {
    control.id = `filter-${control.name}`;
    return h("div", { class: wide ? "field wide" : "field" }, h("label", { for: control.id }, label), control);
  };
  const field = ([name, label, placeholder]) =>
    labelled(label, h("input", { name, value: params.getAll(name).join(", "), placeholder, autocomplete: "off" }));
  const choice = (name, label, values, anyLabel) =>
    labelled(
      label,
      h(
        "select",
        { name },
        h("option", { value: "" }, anyLabel),
        values.map((value) => h("option", { value, selected: params.get(name) === value }, value)),
      ),
    );
  const sort = params.get("sort") ?? "created:desc";
  const sorts = SORTS.some(([value]) => value === sort) ? SORTS : [...SORTS, [sort, sort]];
  const limit = params.get("limit") ?? "20";
  const limits = LIMITS.includes(limit) ? LIMITS : [...LIMITS, limit];
  const extra = [...params.entries()].filter(([name]) => !FORM_PARAMS.has(name));
  const problem = h("p", { class: "error", role: "alert" });
  const more = TEXT_FILTERS.slice(5);

  const form = h(
    "form",
    { class: "filters", role: "search" },
    h(
      "div",
      { class: "filter-grid" },
      TEXT_FILTERS.slice(0, 5).map(field),
      choice("status", "Status", STATUSES, "any but deleted"),
      choice("scope", "Scope", SCOPES, "any"),
      choice("census", "Rank census", CENSUS, "any"),
      labelled(
        "Sort",
        h("select", { name: "sort" }, sorts.map(([value, label]) => h("option", { value, selected: value === sort }, label))),
      ),
      labelled(
        "Per page",
        h("select", { name: "limit" }, limits.map((value) => h("option", { value, selected: value === limit }, value))),
      ),
    ),
    // The rarer filters fold away, open when the URL uses one of them.
    h(
      "details",
      { class: "more-filters", open: more.some(([name]) => params.has(name)) || extra.length > 0 },
      h("summary", {}, "More filters: created, ranks, inspected facts, workspace, any workload member"),
      h(
        "div",
        { class: "filter-grid" },
        more.map(field),
        labelled(
          "Other workload filters (one path=value a line)",
          h("textarea", {
            name: "workload",
            rows: Math.max(2, extra.length),
            placeholder: "shape.global_batch_size=1024\nparallelism.tp=8",
            spellcheck: "false",
          }, extra.map(([name, value]) => `${name}=${value}`).join("\n")),
          true,
        ),
      ),
    ),
    h(
      "p",
      { class: "actions" },
      h("button", { type: "submit" }, "Apply filters"),
      h("a", { href: "/", class: "button secondary" }, "Clear"),
    ),
    problem,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    const data = new FormData(form);
    for (const [name, value] of data.entries()) {
      if (name === "workload") continue;
      if (name === "sort" && value === "created:desc") continue; // the API's default
      if (name === "limit" && value === "20") continue;
      if (name === "tag") {
        // One tag parameter a tag: the API keeps the tracesets holding all of them.
        for (const tag of String(value).split(",")) if (tag.trim()) next.append("tag", tag.trim());
        continue;
      }
      if (String(value).trim() !== "") next.set(name, String(value).trim());
    }
    for (const line of String(data.get("workload")).split("\n")) {
      if (!line.trim()) continue;
      const at = line.indexOf("=");
      if (at < 1) {
        problem.textContent = `Write each workload filter as path=value (e.g. shape.global_batch_size=1024); "${line.trim()}" has no "=".`;
        return;
      }
      next.set(line.slice(0, at).trim(), line.slice(at + 1).trim());
    }
    navigate(listUrl(next));
  });
  return form;
}

// Two tracesets ticked in the list open their comparison (compare_view.js): the first
// ticked is the base, the second the other.
function comparePicker(navigate) {
  const picked = [];
  const button = h("button", { type: "button", class: "compare", disabled: true }, "Compare");
  const note = h("span", { class: "muted", "aria-live": "polite" });
  const say = () => {
    button.disabled = picked.length !== 2;
    note.textContent =
      picked.length === 2
        ? `Base ${picked[0].name} → other ${picked[1].name}`
        : `Tick two tracesets to compare them (the first ticked is the base)${picked.length ? `: ${picked[0].name} ticked` : ""}.`;
  };
  button.addEventListener("click", () => {
    if (picked.length !== 2) return;
    const query = new URLSearchParams({ base: picked[0].id, other: picked[1].id });
    navigate(`/compare?${query}`);
  });
  const checkbox = (item) => {
    const box = h("input", { type: "checkbox", "aria-label": `Compare ${item.name}` });
    box.addEventListener("change", () => {
      const at = picked.findIndex((p) => p.id === item.id);
      if (box.checked && at < 0) {
        if (picked.length === 2) picked.shift().box.checked = false; // the oldest tick goes
        picked.push({ id: item.id, name: item.name, box });
      } else if (!box.checked && at >= 0) picked.splice(at, 1);
      say();
    });
    return box;
  };
  say();
  return { bar: h("p", { class: "compare-bar" }, button, " ", note), checkbox };
}

function table(items, params, navigate, picker) {
  const sort = params.get("sort") ?? "created:desc";
  const [sortField, sortDirection] = sort.includes(",") ? [null] : sort.split(":");
  const header = COLUMNS.map(([label, field]) => {
    if (!field) return h("th", { scope: "col" }, label);
    const current = field === sortField ? (sortDirection ?? "asc") : null;
    const next = new URLSearchParams(params);
    next.delete("next");
    next.set("sort", `${field}:${current === "asc" ? "desc" : "asc"}`);
    return h(
      "th",
      { scope: "col", "aria-sort": current ? (current === "asc" ? "ascending" : "descending") : null },
      h("a", { href: listUrl(next), class: "sort" }, label, current ? (current === "asc" ? " ▲" : " ▼") : ""),
    );
  });
  const familyLink = (value) => {
    if (value === null || value === undefined) return "—";
    const next = new URLSearchParams(params);
    next.delete("next");
    next.set("workload_family", filterText(value));
    return h("a", { href: listUrl(next), title: "Only this family" }, workloadText(value));
  };
  const uploaderLink = (user) => {
    if (!user) return "—";
    const next = new URLSearchParams(params);
    next.delete("next");
    next.set("uploadedBy", user.id);
    return h("a", { href: listUrl(next), title: `Only those ${user.name} uploaded (${user.id})` }, user.name);
  };
  const rows = items.map((item) =>
    h(
      "tr",
      { dataset: { id: item.id } },
      h("td", {}, h("a", { href: `/tracesets/${encodeURIComponent(item.id)}` }, item.name)),
      h("td", {}, familyLink(item.workload?.workload_family)),
      h("td", {}, workloadText(item.workload?.workload_name)),
      h("td", { class: "num" }, item.rankCountDerived ?? "—"),
      h("td", { class: "num" }, item.fileCount),
      h("td", { class: "num", title: `${item.totalSize} bytes` }, bytes(item.totalSize)),
      h("td", {}, h("span", { class: `badge ${statusClass(item)}` }, item.status)),
      h("td", { class: "census" }, censusBadge(item)),
      h("td", {}, h("span", { class: `badge scope-${item.scope}` }, item.scope)),
      h("td", { title: item.createdAt }, when(item.createdAt)),
      h("td", { class: "uploader" }, uploaderLink(item.createdBy)),
      h("td", { class: "pick" }, picker.checkbox(item)),
    ),
  );
  header.push(h("th", { scope: "col" }, "Compare"));
  return h("table", { class: "tracesets" }, h("thead", {}, h("tr", {}, header)), h("tbody", {}, rows));
}

// The census column: fail (with the ranks missing) in red, pass in green, unknown grey.
function censusBadge(item) {
  const { text, className } = censusVerdict(item);
  const short = item.census === "fail" && item.missingRanks ? `fail · ${item.missingRanks} missing` : item.census;
  return h("span", { class: `badge ${className}`, title: text }, short);
}

function pager(pagination, params, cursors, navigate) {
  const here = params.get("next");
  const atFirst = !here;
  const previous = () => {
    const before = [...(cursors ?? [])];
    const cursor = before.pop();
    const next = new URLSearchParams(params);
    if (cursor) next.set("next", cursor);
    else next.delete("next");
    navigate(listUrl(next), { state: { cursors: before } });
  };
  const forward = () => {
    const next = new URLSearchParams(params);
    next.set("next", pagination.nextCursor);
    navigate(listUrl(next), { state: { cursors: [...(cursors ?? []), here ?? ""] } });
  };
  const first = new URLSearchParams(params);
  first.delete("next");
  // A shared link into a later page has no record of the pages before it: only "First page".
  const pageNumber = atFirst ? 1 : cursors ? cursors.length + 1 : null;
  return h(
    "nav",
    { class: "pager", "aria-label": "Pages" },
    h("button", { type: "button", disabled: atFirst || !cursors, onclick: previous }, "← Previous"),
    !atFirst && h("a", { href: listUrl(first) }, "First page"),
    h(
      "span",
      { class: "muted" },
      pageNumber ? `Page ${pageNumber}` : "A later page",
      ` · ${pagination.count} shown`,
      pagination.hasMore ? "" : " · the last page",
    ),
    h("button", { type: "button", disabled: !pagination.hasMore, onclick: forward }, "Next →"),
  );
}
