// One traceset: what it is, its metadata exactly as stored, its files, the rank census as a
// grid, the process groups and readiness checks inspection found, where its GPU time went
// (analysis_view.js), and what can be done with it (download, validate, promote). Everything comes from GET /tracesets/{id}; validate and
// promote are their own routes, and their answers are shown in the API's words.
import { analysisSection } from "/static/analysis_view.js";
import { api } from "/static/api.js";
import { censusGrid } from "/static/census_grid.js";
import { checkList, readinessList } from "/static/checks.js";
import { h, show } from "/static/dom.js";
import { errorPanel, isAbort, waitingBanner } from "/static/errors.js";
import { bytes, censusVerdict, expiry, plural, rangeList, rankList, statusClass, when } from "/static/format.js";
import { member, metadataTree, parseExact } from "/static/metadata_tree.js";
import { actions, download } from "/static/traceset_actions.js";

const INSPECTION_POLL_MS = 2000;
const INSPECTION_POLLS = 30;

export async function mountDetailView(root, id, { signal, navigate }, polls = 0) {
  document.title = "Traceset · tracestore";
  if (polls === 0) show(root, h("p", { class: "muted", "aria-busy": "true" }, "Loading…"));
  const waiting = waitingBanner();
  let text;
  try {
    text = await api(`/tracesets/${encodeURIComponent(id)}`, { as: "text", signal, onRetry: waiting.onRetry });
  } catch (error) {
    if (isAbort(error)) return;
    document.title = "Not available · tracestore";
    show(root, errorPanel(error, { retry: () => mountDetailView(root, id, { signal, navigate }) }));
    return;
  } finally {
    waiting.done();
  }
  const traceset = JSON.parse(text);
  const metadata = member(parseExact(text), "workloadMetadata");
  document.title = `${traceset.name} · tracestore`;
  const reload = () => mountDetailView(root, id, { signal, navigate }, polls + 1);
  show(
    root,
    header(traceset),
    actions(traceset, metadata ? text.slice(metadata.start, metadata.end) : "", reload),
    inspectionSections(traceset, section("Workload metadata", "metadata", metadataTree(metadata, text))),
    analysisSection(traceset.id, { signal }),
    section("Files", "files", filesTable(traceset)),
  );
  const inspection = traceset.inspection;
  // A given-up inspection ("failed") will not change by waiting: no more polls.
  const unfinished = inspection?.status !== "complete" && inspection?.status !== "failed";
  if (traceset.status === "ready" && unfinished && polls < INSPECTION_POLLS) {
    setTimeout(() => signal.aborted || reload(), INSPECTION_POLL_MS);
  }
}

function section(title, name, ...content) {
  return h("section", { class: `panel ${name}`, "aria-labelledby": `h-${name}` }, h("h2", { id: `h-${name}` }, title), content);
}

function userText(user) {
  return user ? `${user.name} (${user.id})` : "—";
}

function header(traceset) {
  const facts = [
    ["Id", h("code", {}, traceset.id)],
    ["Ranks", traceset.rankCountDerived ?? "none declared"],
    ["Files", traceset.fileCount],
    ["Size", h("span", { title: `${traceset.totalSize} bytes` }, bytes(traceset.totalSize))],
    ["Workspace", h("code", {}, traceset.workspaceId)],
    ["Created", when(traceset.createdAt)],
    ["Uploaded by", userText(traceset.createdBy)],
    ["Updated", when(traceset.updatedAt)],
    traceset.editedBy && ["Edited", `${when(traceset.editedAt)} by ${userText(traceset.editedBy)}`],
    ["Expires", expiry(traceset)],
    ["Hash", traceset.hash ? h("code", { class: "hash" }, traceset.hash) : "—"],
  ];
  return h(
    "header",
    { class: "detail-head" },
    h("p", {}, h("a", { href: "/" }, "← All tracesets")),
    h(
      "h1",
      {},
      h("span", { class: "name" }, traceset.name),
      " ",
      h("span", { class: `badge ${statusClass(traceset)}` }, traceset.status),
      " ",
      // Beside "ready", the census's verdict: an incomplete set does not read as complete.
      traceset.status === "ready" && censusHeadBadge(traceset),
      " ",
      h("span", { class: `badge scope-${traceset.scope}`, dataset: { scope: traceset.scope } }, traceset.scope),
    ),
    traceset.description && h("p", { class: "description" }, traceset.description),
    traceset.tags.length > 0 && h("p", { class: "tags" }, traceset.tags.map((tag) => h("span", { class: "tag" }, tag))),
    h("dl", { class: "head-facts" }, facts.filter(Boolean).map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value)))),
  );
}

function censusHeadBadge(traceset) {
  const { text, className } = censusVerdict(traceset);
  return h("span", { class: `badge ${className}`, dataset: { census: traceset.census } }, text);
}

// --- inspection: census grid, checks, process groups, summary ---

// The census and its checks first (what a person looks for), then the metadata, the groups
// and the facts.
function inspectionSections(traceset, metadataSection) {
  const inspection = traceset.inspection;
  if (inspection?.status !== "complete") {
    let why = `Inspection runs once the traceset is ready (it is ${traceset.status}).`;
    if (inspection?.status === "failed") {
      why = `Inspection failed (${inspection.reason ?? "no reason recorded"}); the files below show what could be read.`;
    } else if (traceset.status === "ready") {
      why = "Inspection has not finished yet; this view refreshes by itself when it has.";
    }
    return [section("Rank census", "census", h("p", { class: "muted" }, why)), metadataSection];
  }
  const census = inspection.census;
  const summary = inspection.summary ?? {};
  return [
    section(
      "Rank census",
      "census",
      h(
        "p",
        {},
        censusLine(census),
      ),
      // An inspection past TRACESTORE_MAX_INSPECTION_SIZE is stored shortened: say so.
      inspection.truncated ? h("p", { class: "muted" }, inspection.truncated.message) : null,
      censusGrid(census),
      censusProblems(census),
    ),
    section(
      "Checks",
      "checks-panel",
      h("h3", {}, "The census"),
      checkList(Object.entries(census.checks ?? {})),
      h("h3", {}, "Which tools can read it"),
      readinessList(Object.entries(inspection.readiness ?? {}).map(([key, entry]) => [`${key}_ready`, entry])),
    ),
    metadataSection,
    section("Process groups", "groups", groupsTable(census.processGroups ?? [])),
    section("What inspection found", "summary", summaryFacts(summary, inspection.inspectedAt)),
  ];
}

function censusLine(census) {
  const expected = census.expectedRankCount;
  const from = { declared: "the declared rank count", worldSize: "the world size the files record", ranks: "the highest rank found" }[census.expectedFrom] ?? census.expectedFrom;
  if (!expected) return "No ranks expected and none found.";
  return `${plural(expected, "rank")} expected (${from}); ${census.ranksFound.length} found` +
    (census.missingCount ? `, ${census.missingCount} missing` : "") +
    (census.duplicatedRanks.length ? `, ${census.duplicatedRanks.length} duplicated` : "") +
    (census.ranksUnexpected.length ? `, ${census.ranksUnexpected.length} outside the expected range` : "") +
    ".";
}

function censusProblems(census) {
  const items = [];
  if (census.ranksMissing.length) items.push(["Missing ranks", rangeList(census.ranksMissing)]);
  for (const { rank, files } of census.duplicatedRanks) items.push([`Rank ${rank} is in ${files.length} files`, files.join(", ")]);
  if (census.ranksUnexpected.length) items.push(["Ranks outside the expected range", rankList(census.ranksUnexpected)]);
  if (census.unrankedFiles.length) {
    items.push(["Files with no rank", h("ul", { class: "unranked" }, census.unrankedFiles.map((name) => h("li", {}, name)))]);
  }
  for (const { file, reason } of census.failedFiles) items.push([`Not fully readable: ${file}`, reason]);
  if (items.length === 0) return null;
  return h("dl", { class: "census-problems" }, items.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

// Past this many rows the process-groups table stops, as the census grid stops at its
// GRID_LIMIT cells (a set may claim tens of thousands of groups): a note says how many are
// not shown. A row's tooltip names at most TITLE_FILES of the files recording its group.
export const GROUPS_LIMIT = 1000;
const TITLE_FILES = 20;

function groupsTable(groups) {
  if (groups.length === 0) return h("p", { class: "muted" }, "No process groups recorded in the files.");
  const shown = groups.slice(0, GROUPS_LIMIT);
  const table = h(
    "table",
    { class: "groups" },
    h("thead", {}, h("tr", {}, ["Group", "Size", "Ranks", "Recorded by"].map((label) => h("th", { scope: "col" }, label)))),
    h(
      "tbody",
      {},
      shown.map((group) =>
        h(
          "tr",
          {},
          h("td", {}, group.name ?? "(unnamed)"),
          h("td", { class: "num" }, group.size),
          h("td", {}, group.ranks ? rankList(group.ranks) : "not recorded"),
          h("td", { title: filesTitle(group.files) }, group.files.length === 1 ? group.files[0] : plural(group.files.length, "file")),
        ),
      ),
    ),
  );
  if (groups.length === shown.length) return table;
  const hidden = groups.length - shown.length;
  return [
    h(
      "p",
      { class: "muted groups-limit" },
      `The table shows the ${shown.length} largest of ${groups.length} process groups; ${plural(hidden, "group")} not shown (the traceset's JSON lists them all).`,
    ),
    table,
  ];
}

function filesTitle(files) {
  const named = files.slice(0, TITLE_FILES).join("\n");
  return files.length > TITLE_FILES ? `${named}\nand ${files.length - TITLE_FILES} more` : named;
}

function summaryFacts(summary, inspectedAt) {
  const list = (values) => (values?.length ? values.join(", ") : "—");
  const collectives = Object.entries(summary.collectives ?? {}).map(([name, count]) => `${name} ${count}`);
  const span = summary.timeSpan ? `${(summary.timeSpan.durationUs / 1e6).toFixed(3)} s` : "—";
  const steps = summary.profilerSteps ? `${summary.profilerSteps.min}..${summary.profilerSteps.max}` : "—";
  const facts = [
    ["Formats", list(summary.formats)],
    ["Ranks captured", summary.ranksCaptured ?? "—"],
    ["World size", summary.worldSize ?? "—"],
    ["GPU models", list(summary.gpuModels)],
    ["Backends", list(summary.backends)],
    ["NCCL versions", list(summary.ncclVersions)],
    ["Profiler steps", steps],
    ["Time span", span],
    ["Collectives", list(collectives)],
    ["Inspected", when(inspectedAt)],
  ];
  return h("dl", { class: "facts" }, facts.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

// --- files ---

function filesTable(traceset) {
  const id = encodeURIComponent(traceset.id);
  const inspected = new Map((traceset.inspection?.files ?? []).map((file) => [file.name, file]));
  const problem = h("p", { class: "error", role: "alert" });
  const rows = traceset.files.map((file) => {
    const found = inspected.get(file.name);
    const rank = file.rankRange
      ? file.rankRange.start === file.rankRange.end
        ? String(file.rankRange.start)
        : `${file.rankRange.start}..${file.rankRange.end}`
      : "—";
    const result = found
      ? [found.format, found.status === "complete" ? null : found.status, found.reason].filter(Boolean).join(" · ")
      : file.metadataStatus;
    return h(
      "tr",
      { dataset: { file: file.name } },
      h("td", {}, file.name),
      h("td", {}, file.role),
      h("td", { class: "num", title: `${file.size} bytes` }, bytes(file.size)),
      h("td", {}, file.hash ? h("code", { class: "hash", title: file.hash }, file.hash.replace(/^sha256:/, "").slice(0, 12) + "…") : "—"),
      h("td", { title: file.rankProvenance ?? "" }, rank),
      h("td", { class: "inspection-result" }, result),
      h(
        "td",
        {},
        h("button", {
          type: "button",
          class: "secondary small",
          disabled: traceset.status !== "ready",
          "aria-label": `Download ${file.name}`,
          onclick: () => download(id, { file: file.name }, problem),
        }, "Download"),
      ),
    );
  });
  return [
    problem,
    h(
      "table",
      { class: "files" },
      h("thead", {}, h("tr", {}, ["Name", "Role", "Size", "SHA-256", "Rank", "Inspection", ""].map((label) => h("th", { scope: "col" }, label)))),
      h("tbody", {}, rows),
    ),
  ];
}
