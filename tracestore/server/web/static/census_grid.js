// The rank census as a grid: one cell per expected rank (present, missing or duplicated) and
// one per rank found outside the expected range; in a set of Kineto timelines and execution
// traces each cell shows both halves. Choosing a cell lists the rank's files.
import { h, show } from "/static/dom.js";

// Past this many cells the grid stops (the lists under it still name every problem): a
// browser lays out some thousands of cells at once without a stutter.
export const GRID_LIMIT = 4096;
const HALVES = [
  ["kineto", "K", "Kineto timeline"],
  ["executionTrace", "ET", "execution trace"],
];

export function censusGrid(census) {
  const expected = census.expectedRankCount ?? 0;
  const byRank = new Map(census.ranks.map((entry) => [entry.rank, entry]));
  const duplicated = new Map(census.duplicatedRanks.map(({ rank, files }) => [rank, files]));
  const missing = (rank) => census.ranksMissing.some((r) => r.start <= rank && rank <= r.end);
  const kinds = new Set(census.ranks.flatMap((entry) => entry.halves));
  const paired = kinds.has("kineto") || kinds.has("executionTrace");
  const shownExpected = Math.min(expected, GRID_LIMIT);
  const ranks = [];
  for (let rank = 0; rank < shownExpected; rank += 1) ranks.push(rank);
  const outside = census.ranksUnexpected.slice(0, Math.max(0, GRID_LIMIT - shownExpected));
  if (expected === 0 && outside.length === 0) return null;

  const detail = h("div", { class: "rank-detail", "aria-live": "polite" });
  const cell = (rank, inRange) => {
    const entry = byRank.get(rank);
    const state = !inRange ? "unexpected" : duplicated.has(rank) ? "duplicated" : entry && !missing(rank) ? "present" : "missing";
    const halves = entry?.halves ?? [];
    const label = `rank ${rank}: ${state}` +
      (paired ? `; ${HALVES.map(([kind, , name]) => `${name} ${halves.includes(kind) ? "present" : "absent"}`).join(", ")}` : "");
    return h(
      "li",
      {},
      h(
        "button",
        {
          type: "button",
          class: `cell ${state}`,
          dataset: { rank, state },
          title: label,
          "aria-label": label,
          "aria-pressed": "false",
          tabindex: "-1",
          onclick: (event) => {
            grid.querySelector('[aria-pressed="true"]')?.setAttribute("aria-pressed", "false");
            event.currentTarget.setAttribute("aria-pressed", "true");
            moveTo(event.currentTarget, false);
            const straggling = event.currentTarget.dataset.straggler;
            show(detail, rankDetail(rank, state, entry, duplicated.get(rank), straggling));
          },
        },
        h("span", { class: "rank-number" }, rank),
        paired &&
          h(
            "span",
            { class: "halves" },
            HALVES.map(([kind, letter]) => h("span", { class: `half ${halves.includes(kind) ? "on" : "off"}`, dataset: { half: kind } }, letter)),
          ),
      ),
    );
  };
  const grid = h("ol", { class: "census-grid", "aria-label": "Ranks (arrow keys move between them)" });
  grid.append(...ranks.map((rank) => cell(rank, true)), ...outside.map((rank) => cell(rank, false)));
  // One tab stop for the whole grid (a roving tabindex): thousands of cells would otherwise
  // be thousands of Tab presses between the census and the rest of the page.
  const buttons = [...grid.querySelectorAll("button.cell")];
  const moveTo = (button, focus = true) => {
    grid.querySelector('button.cell[tabindex="0"]')?.setAttribute("tabindex", "-1");
    button.setAttribute("tabindex", "0");
    if (focus) button.focus();
  };
  if (buttons.length) buttons[0].setAttribute("tabindex", "0");
  grid.addEventListener("keydown", (event) => {
    const at = buttons.indexOf(event.target);
    if (at < 0) return;
    const row = Math.max(1, buttons.filter((b) => b.offsetTop === buttons[0].offsetTop).length);
    const to = {
      ArrowRight: at + 1,
      ArrowLeft: at - 1,
      ArrowDown: at + row,
      ArrowUp: at - row,
      Home: 0,
      End: buttons.length - 1,
    }[event.key];
    if (to === undefined) return;
    event.preventDefault();
    moveTo(buttons[Math.min(buttons.length - 1, Math.max(0, to))]);
  });
  return h(
    "div",
    { class: "census" },
    legend(paired),
    grid,
    expected > GRID_LIMIT &&
      h("p", { class: "muted" }, `The grid shows ranks 0..${GRID_LIMIT - 1} of ${expected}; the list below names every missing or duplicated rank.`),
    detail,
  );
}

function legend(paired) {
  const swatch = (state, text) => h("li", {}, h("span", { class: `swatch ${state}` }), text);
  return h(
    "ul",
    { class: "legend" },
    swatch("present", "present"),
    swatch("missing", "missing"),
    swatch("duplicated", "duplicated (two files of one kind)"),
    swatch("unexpected", "outside the expected ranks"),
    paired && h("li", {}, "K / ET: the rank's Kineto timeline and execution trace (dim: absent)"),
  );
}

function rankDetail(rank, state, entry, duplicateFiles, straggling) {
  const files = entry?.files ?? [];
  return h(
    "div",
    {},
    h("h3", {}, `Rank ${rank}: ${state}`),
    straggling && h("p", { class: "straggler-reason" }, `Straggler: ${straggling}`),
    files.length === 0
      ? h("p", { class: "muted" }, "No file holds this rank.")
      : h(
          "ul",
          {},
          files.map((file) =>
            h(
              "li",
              {},
              h("code", {}, file.file),
              ` (${file.kind}${file.pid !== null && file.pid !== undefined ? `, pid ${file.pid}` : ""})`,
              file.rankProvenance && h("span", { class: "muted" }, ` — ${file.rankProvenance}`),
            ),
          ),
        ),
    duplicateFiles && h("p", { class: "bad" }, `Held by ${duplicateFiles.length} files of one kind: ${duplicateFiles.join(", ")}`),
  );
}

// The analysis's stragglers ({rank, reason}, summary.stragglers) marked on the census grids
// under `root`: a class, the reason in the cell's label and in its detail, a legend entry.
export function markStragglers(root, stragglers) {
  for (const grid of root.querySelectorAll("div.census")) {
    let marked = 0;
    for (const { rank, reason } of stragglers) {
      const button = grid.querySelector(`button.cell[data-rank="${Number(rank)}"]`);
      if (!button || button.dataset.straggler) continue;
      button.classList.add("straggler");
      button.dataset.straggler = reason;
      const label = `${button.getAttribute("aria-label")}; straggler: ${reason}`;
      button.setAttribute("aria-label", label);
      button.title = label;
      marked += 1;
    }
    const legendList = grid.querySelector(".legend");
    if (marked && legendList && !legendList.querySelector(".swatch.straggler")) {
      legendList.append(h("li", {}, h("span", { class: "swatch straggler" }), "straggler (held the others back: see the analysis)"));
    }
  }
}
