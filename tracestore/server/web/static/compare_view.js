// The comparison of two tracesets ("/compare?base=<id>&other=<id>", optionally baseRanks,
// otherRanks and steps as the API takes them): the kernels whose time changed, each change
// a bar (slower first, red; faster, green), the kernels added and removed, and per rank pair
// the differences of step time, compute, idle and overlap. From GET /tracesets/{id}/compare.
import { api, ApiError } from "/static/api.js";
import { svg, duration } from "/static/charts.js";
import { h, show } from "/static/dom.js";
import { errorPanel, isAbort, waitingBanner } from "/static/errors.js";
import { plural } from "/static/format.js";

const CSS = "/static/analysis.css";
export const SHOWN_KERNELS = 50;

// +1234.5 µs → "+1.235 ms"; −0 → "0".
function signedDuration(us) {
  if (us === null || us === undefined) return "—";
  if (us === 0) return "0";
  return (us > 0 ? "+" : "−") + duration(Math.abs(us));
}

function signedPoints(value) {
  if (value === null || value === undefined) return "—";
  return value === 0 ? "0" : `${value > 0 ? "+" : "−"}${Math.abs(value).toFixed(2)} pt`;
}

// One change as a bar from the middle: right (slower) or left (faster), its length its
// share of the largest change shown.
function changeBar(diff, largest, name) {
  const bar = svg("svg", { class: "change-bar", viewBox: "0 0 200 16", preserveAspectRatio: "none", role: "img", "aria-label": `${name}: ${signedDuration(diff)}` });
  bar.append(svg("line", { class: "change-axis", x1: 100, x2: 100, y1: 0, y2: 16 }));
  const width = largest > 0 ? Math.max(1, (Math.abs(diff) / largest) * 100) : 0;
  if (diff !== 0 && width > 0) {
    const cls = diff > 0 ? "change-slower" : "change-faster";
    bar.append(svg("rect", { class: cls, x: diff > 0 ? 100 : 100 - width, y: 2, width, height: 12 }, svg("title", {}, signedDuration(diff))));
  }
  return bar;
}

function tracesetLink(id) {
  return h("a", { href: `/tracesets/${encodeURIComponent(id)}` }, id);
}

export async function mountCompareView(root, { signal, navigate }) {
  if (!document.querySelector(`link[href="${CSS}"]`)) {
    document.head.append(h("link", { rel: "stylesheet", href: CSS }));
  }
  const params = new URLSearchParams(location.search);
  const base = params.get("base");
  const other = params.get("other");
  document.title = "Comparison · tracestore";
  if (!base || !other) {
    show(root, h("h1", {}, "Comparison"), errorPanel(new ApiError(400, "VALIDATION_ERROR", "Choose two tracesets to compare: tick two in the list, then Compare.")));
    return;
  }
  const body = h("section", { class: "comparison", "aria-busy": "true" }, h("p", { class: "muted" }, "Comparing…"));
  show(root, h("h1", {}, "Comparison"), h("p", { class: "compare-sides" }, "Base ", tracesetLink(base), " → other ", tracesetLink(other)), body);
  const query = { with: other };
  for (const name of ["baseRanks", "otherRanks", "steps"]) if (params.get(name)) query[name] = params.get(name);
  const waiting = waitingBanner();
  let answer;
  try {
    answer = await api(`/tracesets/${encodeURIComponent(base)}/compare`, { query, signal, onRetry: waiting.onRetry });
  } catch (error) {
    if (isAbort(error)) return;
    show(body, errorPanel(error, { retry: () => navigate(location.href, { replace: true }) }));
    body.removeAttribute("aria-busy");
    return;
  } finally {
    waiting.done();
  }
  body.removeAttribute("aria-busy");
  show(body, summary(answer), kernelTable(answer), namesSection(answer), rankTable(answer));
}

function summary(answer) {
  const facts = [
    ["Ranks compared", plural(answer.ranks.length, "pair")],
    ["Steps", answer.steps ?? "every profiled step"],
    ["Kernel names", `${answer.added.length} added, ${answer.deleted.length} removed, ${answer.increased.length} called more, ${answer.decreased.length} called less, ${answer.unchanged.length} as often`],
  ];
  return h("dl", { class: "analysis-facts" }, facts.map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value))));
}

function kernelTable(answer) {
  const changed = answer.kernels.filter((k) => k.diffDurationUs !== 0);
  const rows = changed.slice(0, SHOWN_KERNELS);
  const largest = Math.max(0, ...rows.map((k) => Math.abs(k.diffDurationUs)));
  const caption = changed.length > rows.length ? `the ${rows.length} largest changes of ${changed.length}` : plural(changed.length, "change");
  const same = answer.kernels.length - changed.length;
  return h(
    "div",
    {},
    h("h2", {}, "Kernels, slower first"),
    h(
      "p",
      { class: "muted" },
      `Total time of each kernel name in the chosen ranks and steps (${caption})`,
      same ? `; ${same} kernel names whose time did not change are not listed.` : ".",
    ),
    h(
      "table",
      { class: "kernels compare-kernels" },
      h("thead", {}, h("tr", {}, ["Change", "", "Base", "Other", "Calls (base → other)", "Kernel"].map((label) => h("th", { scope: "col" }, label)))),
      h(
        "tbody",
        {},
        rows.map((k) =>
          h(
            "tr",
            { dataset: { diff: k.diffDurationUs }, class: k.diffDurationUs > 0 ? "slower" : k.diffDurationUs < 0 ? "faster" : null },
            h("td", { class: "num" }, signedDuration(k.diffDurationUs)),
            h("td", { class: "share" }, changeBar(k.diffDurationUs, largest, k.name)),
            h("td", { class: "num" }, duration(k.baseDurationUs)),
            h("td", { class: "num" }, duration(k.otherDurationUs)),
            h("td", { class: "num" }, `${k.baseCount} → ${k.otherCount}`),
            h("td", { class: "kernel-name", title: k.name }, k.name),
          ),
        ),
      ),
    ),
  );
}

function namesSection(answer) {
  const list = (title, names, cls) =>
    h(
      "div",
      { class: `name-list ${cls}` },
      h("h3", {}, `${title} (${names.length})`),
      names.length ? h("ul", {}, names.slice(0, SHOWN_KERNELS).map((name) => h("li", { class: "kernel-name", title: name }, name))) : h("p", { class: "muted" }, "None."),
    );
  return h("div", { class: "compare-names" }, list("Added kernels", answer.added, "added"), list("Removed kernels", answer.deleted, "removed"));
}

function rankTable(answer) {
  const head = ["Base rank", "Other rank", "Median step (base → other)", "Δ median step", "Δ compute", "Δ non-compute", "Δ idle", "Δ overlap"];
  const rankText = (rank) => (rank === null ? "—" : String(rank));
  return h(
    "div",
    {},
    h("h2", {}, "Per rank"),
    h("p", { class: "muted" }, "Other minus base; compute, non-compute and idle in percentage points of each rank's GPU time, times per step where the step counts differ."),
    h(
      "table",
      { class: "compare-ranks" },
      h("thead", {}, h("tr", {}, head.map((label) => h("th", { scope: "col" }, label)))),
      h(
        "tbody",
        {},
        answer.ranks.map((r) =>
          h(
            "tr",
            {},
            h("td", { class: "num" }, rankText(r.baseRank)),
            h("td", { class: "num" }, rankText(r.otherRank)),
            h("td", { class: "num" }, `${duration(r.base.medianStepUs)} → ${duration(r.other.medianStepUs)}`),
            h("td", { class: "num" }, signedDuration(r.diff.medianStepUs)),
            h("td", { class: "num" }, signedPoints(r.diff.temporal.computePct)),
            h("td", { class: "num" }, signedPoints(r.diff.temporal.nonComputePct)),
            h("td", { class: "num" }, signedPoints(r.diff.temporal.idlePct)),
            h("td", { class: "num" }, signedPoints(r.diff.overlap.pct)),
          ),
        ),
      ),
    ),
  );
}
