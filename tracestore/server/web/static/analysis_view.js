// The traceset page's analysis section: where each rank's GPU time went, from
// GET /tracesets/{id}/analysis (ANALYTICS.md's numbers). Per rank, the compute / non-compute /
// idle shares and the communication overlap as columns; the step times as a ranks × steps
// heatmap; the kernels that took the most time over all ranks, with their kind; idle time by
// cause. While the analysis jobs run the section says so and asks again until they are done.
import { api } from "/static/api.js";
import { markStragglers } from "/static/census_grid.js";
import { duration, heatmap, legend, pct, shareBar, stackedColumns } from "/static/charts.js";
import { h, show } from "/static/dom.js";
import { isAbort } from "/static/errors.js";
import { plural } from "/static/format.js";

const CSS = "/static/analysis.css";
export const POLL_MS = 2000;
const POLLS = 300; // ten minutes of asking
export const TOP_KERNELS = 15;
const STRAGGLERS_LISTED = 20; // the rest are counted; the census grid and heatmap mark them all
const KINDS = { COMPUTATION: "kind-compute", COMMUNICATION: "kind-communication", MEMORY: "kind-memory" };
const CAUSES = [
  ["host_wait", "cause-host", "the GPU waited for the CPU to launch"],
  ["kernel_wait", "cause-kernel", "gaps under 30 µs between kernels"],
  ["other", "cause-other", "longer gaps"],
];

// The section, filled in once the analysis is fetched (and again while it is pending).
export function analysisSection(id, { signal }) {
  if (!document.querySelector(`link[href="${CSS}"]`)) {
    document.head.append(h("link", { rel: "stylesheet", href: CSS }));
  }
  const body = h("div", { class: "analysis-body" }, h("p", { class: "muted", "aria-busy": "true" }, "Loading the analysis…"));
  const section = h(
    "section",
    { class: "panel analysis", "aria-labelledby": "h-analysis", dataset: { status: "loading" } },
    h("h2", { id: "h-analysis" }, "Where the GPU time went"),
    body,
  );
  fill(section, body, id, signal, 0);
  return section;
}

async function fill(section, body, id, signal, polls) {
  let answer;
  try {
    answer = await api(`/tracesets/${encodeURIComponent(id)}/analysis`, { signal });
  } catch (error) {
    if (isAbort(error) || signal.aborted) return;
    section.dataset.status = "error";
    show(body, h("p", { class: "error", role: "alert" }, `The analysis could not be read: ${error.message}`));
    return;
  }
  if (signal.aborted) return;
  section.dataset.status = answer.status;
  show(body, content(answer));
  if (answer.status === "complete") markStragglers(document, answer.summary?.stragglers ?? []);
  if (answer.status === "pending" && polls < POLLS) {
    // A view shown again (the page re-renders while inspection runs) has a section of its own.
    setTimeout(() => signal.aborted || !section.isConnected || fill(section, body, id, signal, polls + 1), POLL_MS);
  }
}

function content(answer) {
  const analysed = answer.ranks.filter((entry) => entry.status === "complete");
  const failed = answer.ranks.filter((entry) => entry.status === "failed");
  if (answer.status === "pending") {
    return [
      h("p", { class: "pending", role: "status" }, `Analysis pending: its jobs are running (${plural(answer.ranks.length, "file")} read so far). This section refreshes by itself.`),
      failures(failed),
    ];
  }
  if (answer.status !== "complete") {
    const what = answer.status === "none" ? "No analysis" : "The analysis failed";
    return [h("p", { class: "muted" }, `${what}: ${answer.reason ?? "no reason recorded"}.`), failures(failed)];
  }
  const straggling = new Map((answer.summary?.stragglers ?? []).map((s) => [String(s.rank), s.reason]));
  return [
    summaryFacts(answer),
    stragglerList(answer.summary),
    h("h3", {}, "Compute, non-compute and idle time per rank"),
    timeColumns(analysed),
    h("h3", {}, "Communication under computation per rank"),
    overlapColumns(analysed),
    h("h3", {}, "Step times, ranks × steps"),
    stepHeatmap(analysed, straggling),
    h("h3", {}, "The kernels that took the most time"),
    kernelTable(analysed),
    h("h3", {}, "Idle time by cause"),
    idleCauses(analysed),
    failures(failed),
  ];
}

function summaryFacts(answer) {
  const s = answer.summary;
  const spread = (value, format) =>
    value?.median === null || value?.median === undefined ? "—" : `${format(value.median)} (${format(value.min)} – ${format(value.max)})`;
  const facts = [
    ["Ranks analysed", s.rankCount],
    ["Compute, median (min – max)", spread(s.computePct, pct)],
    ["Non-compute", spread(s.nonComputePct, pct)],
    ["Idle", spread(s.idlePct, pct)],
    ["Overlap", spread(s.overlapPct, pct)],
    ["Step time", spread(s.stepTimeUs, duration)],
    ["Slowest / fastest rank", s.slowestRank === null ? "—" : `${s.slowestRank} / ${s.fastestRank}`],
  ];
  return h("dl", { class: "analysis-facts" }, facts.map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value))));
}

const label = (entry) => (entry.rank === null ? entry.file : String(entry.rank));

function timeColumns(entries) {
  const temporal = entries.map((entry) => entry.temporal ?? {});
  return stackedColumns({
    labels: entries.map(label),
    name: "rank",
    yLabel: ["100 %", "0 %"],
    series: [
      { name: "compute", cls: "seg-compute", values: temporal.map((t) => t.computePct ?? 0) },
      { name: "non-compute", cls: "seg-noncompute", note: "(communication and copies not under computation)", values: temporal.map((t) => t.nonComputePct ?? 0) },
      { name: "idle", cls: "seg-idle", values: temporal.map((t) => t.idlePct ?? 0) },
    ],
    title: (i) =>
      `${entries[i].rank === null ? entries[i].file : `rank ${entries[i].rank}`}: compute ${pct(temporal[i].computePct)}, non-compute ${pct(temporal[i].nonComputePct)}, idle ${pct(temporal[i].idlePct)} of ${duration(temporal[i].kernelTimeUs)}`,
  });
}

function overlapColumns(entries) {
  const overlap = entries.map((entry) => entry.overlap ?? {});
  return stackedColumns({
    labels: entries.map(label),
    name: "rank",
    yLabel: ["100 %", "0 %"],
    series: [
      { name: "communication time under computation", cls: "seg-overlap", values: overlap.map((o) => o.pct ?? 0) },
      { name: "communication exposed", cls: "seg-exposed", values: overlap.map((o) => (o.pct === null || o.pct === undefined ? 0 : 100 - o.pct)) },
    ],
    title: (i) =>
      overlap[i].pct === null || overlap[i].pct === undefined
        ? `${label(entries[i])}: no communication kernels`
        : `${label(entries[i])}: ${pct(overlap[i].pct)} of ${duration(overlap[i].communicationTimeUs)} of communication under computation`,
  });
}

// Who held the others back (summary.stragglers, worst first), each with its reason, and what
// the verdict rests on; absent from an analysis stored before the service looked.
function stragglerList(summary) {
  if (!summary?.stragglers) return null;
  const note = summary.collectiveMatching?.note;
  if (summary.stragglers.length === 0) {
    return h("p", { class: "stragglers none muted" }, `No straggler: no rank computes 10 % more than the median rank or arrives last at most collectives.${note ? ` ${note}` : ""}`);
  }
  return h(
    "div",
    { class: "stragglers" },
    h("h3", {}, `${plural(summary.stragglers.length, "straggler")}, worst first`),
    h(
      "ol",
      {},
      summary.stragglers.slice(0, STRAGGLERS_LISTED).map((s) => h("li", { dataset: { rank: String(s.rank) } }, h("strong", {}, `rank ${s.rank}`), ` ${s.reason.replace(/^rank \S+ /, "")}; its waits at collectives: ${duration(s.waitUs)} in all`)),
    ),
    summary.stragglers.length > STRAGGLERS_LISTED &&
      h("p", { class: "muted" }, `… and ${summary.stragglers.length - STRAGGLERS_LISTED} more (the API's summary.stragglers lists them all).`),
    note && h("p", { class: "muted" }, note),
  );
}

function stepHeatmap(entries, straggling) {
  const numbers = new Set();
  const rows = entries.map((entry) => {
    const steps = new Map();
    for (const step of entry.steps ?? []) {
      steps.set(step.step, { us: step.durationUs, truncated: step.truncated });
      numbers.add(step.step);
    }
    return { rank: label(entry), steps };
  });
  if (numbers.size === 0) return h("p", { class: "muted" }, "No ProfilerStep in the traces.");
  const steps = [...numbers].sort((a, b) => a - b);
  return [heatmap(rows, steps, straggling), stepTable(rows, steps)];
}

// The heatmap's numbers, for a screen reader or a copy: built when opened.
function stepTable(rows, steps) {
  const details = h("details", { class: "step-table" }, h("summary", {}, "The step times as a table"));
  details.addEventListener("toggle", () => {
    if (!details.open || details.querySelector("table")) return;
    details.append(
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "rank"), steps.map((step) => h("th", { scope: "col", class: "num" }, `step ${step}`)))),
        h(
          "tbody",
          {},
          rows.map((row) =>
            h(
              "tr",
              {},
              h("th", { scope: "row" }, row.rank),
              steps.map((step) => {
                const cell = row.steps.get(step);
                return h("td", { class: "num" }, cell ? duration(cell.us) + (cell.truncated ? " (truncated)" : "") : "—");
              }),
            ),
          ),
        ),
      ),
    );
  });
  return details;
}

// Each rank's kernel rows added up by (kind, name); a rank's "others" row (past its 100th)
// counts for the shares only.
function kernelTable(entries) {
  const rows = new Map();
  let total = 0;
  for (const entry of entries) {
    for (const row of entry.kernels ?? []) {
      total += row.sumUs;
      if (row.name === "others") continue;
      const key = `${row.kind}\u0000${row.name}`;
      const found = rows.get(key) ?? { name: row.name, kind: row.kind, count: 0, sumUs: 0, maxUs: 0, ranks: 0 };
      found.count += row.count;
      found.sumUs += row.sumUs;
      found.maxUs = Math.max(found.maxUs, row.maxUs);
      found.ranks += 1;
      rows.set(key, found);
    }
  }
  const top = [...rows.values()].sort((a, b) => b.sumUs - a.sumUs || (a.name < b.name ? -1 : 1)).slice(0, TOP_KERNELS);
  if (top.length === 0) return h("p", { class: "muted" }, "No kernels in the traces.");
  return [
    legend(Object.entries(KINDS).map(([name, cls]) => ({ name: name.toLowerCase(), cls }))),
    h(
      "table",
      { class: "kernels" },
      h("thead", {}, h("tr", {}, ["Kind", "Kernel", "Calls", "Total", "Mean", "Longest", "Share of kernel time"].map((text) => h("th", { scope: "col" }, text)))),
      h(
        "tbody",
        {},
        top.map((row) => {
          const share = total ? (100 * row.sumUs) / total : 0;
          return h(
            "tr",
            { dataset: { kind: row.kind ?? "" } },
            h("td", {}, h("span", { class: `kind ${KINDS[row.kind] ?? ""}` }, (row.kind ?? "mixed").toLowerCase())),
            h("td", { class: "kernel-name", title: row.name }, row.name),
            h("td", { class: "num" }, row.count.toLocaleString("en")),
            h("td", { class: "num" }, duration(row.sumUs)),
            h("td", { class: "num" }, duration(row.sumUs / row.count)),
            h("td", { class: "num" }, duration(row.maxUs)),
            h("td", { class: "share" }, shareBar([{ cls: KINDS[row.kind] ?? "seg-idle", value: share, label: `${share.toFixed(1)} %` }, { cls: "seg-rest", value: 100 - share, label: "" }], `${share.toFixed(1)} %`), ` ${share.toFixed(1)} %`),
          );
        }),
      ),
    ),
  ];
}

// Idle time by cause over all ranks and streams, then per rank.
function idleCauses(entries) {
  const perRank = entries.map((entry) => {
    const sums = Object.fromEntries(CAUSES.map(([cause]) => [cause, 0]));
    for (const row of entry.idle ?? []) sums[row.category] = (sums[row.category] ?? 0) + row.idleTimeUs;
    return sums;
  });
  const totals = CAUSES.map(([cause, cls, meaning]) => ({ cause, cls, meaning, us: perRank.reduce((sum, sums) => sum + sums[cause], 0) }));
  const all = totals.reduce((sum, t) => sum + t.us, 0);
  if (all === 0) return h("p", { class: "muted" }, "No idle time between kernels on any stream.");
  const most = Math.max(...perRank.map((sums) => CAUSES.reduce((sum, [cause]) => sum + sums[cause], 0)), 1);
  return [
    shareBar(totals.map((t) => ({ cls: t.cls, value: t.us, label: `${t.cause}: ${duration(t.us)}` })), "Idle time by cause, all ranks"),
    h(
      "ul",
      { class: "chart-legend idle-totals" },
      totals.map((t) => h("li", { dataset: { cause: t.cause } }, h("span", { class: `swatch ${t.cls}` }), `${t.cause} ${duration(t.us)} (${((100 * t.us) / all).toFixed(1)} %)`, h("span", { class: "muted" }, `: ${t.meaning}`))),
    ),
    stackedColumns({
      labels: entries.map(label),
      name: "rank",
      yLabel: [duration(most), "0"],
      max: most,
      series: CAUSES.map(([cause, cls]) => ({ name: cause, cls, values: perRank.map((sums) => sums[cause]) })),
      title: (i) => `${label(entries[i])}: ${CAUSES.map(([cause]) => `${cause} ${duration(perRank[i][cause])}`).join(", ")}`,
    }),
  ];
}

function failures(failed) {
  if (failed.length === 0) return null;
  return [
    h("h3", {}, `Not analysed (${plural(failed.length, "file")})`),
    h(
      "ul",
      { class: "analysis-failures" },
      failed.map((entry) => h("li", {}, h("span", { class: "file" }, entry.file), entry.rank === null ? "" : ` (rank ${entry.rank})`, `: ${entry.reason}`)),
    ),
  ];
}
