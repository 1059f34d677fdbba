// The analysis section's charts, drawn with plain SVG and one canvas (docs/web.md says why no
// charting library): stacked columns per rank, a share bar, and the ranks × steps heatmap.
// Every label is text (textContent), every colour a class of analysis.css but the heatmap's.
import { h } from "/static/dom.js";

const SVG = "http://www.w3.org/2000/svg";

// svg("rect", { x: 1 }, child...) → an SVG element (dom.js's h() makes HTML elements).
export function svg(tag, attrs = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null && value !== false) element.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

// 1234.5 µs → "1.235 ms" (times of the API are µs).
export function duration(us) {
  if (us === null || us === undefined) return "—";
  if (us >= 1e6) return `${(us / 1e6).toFixed(3)} s`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(3)} ms`;
  return `${Number(us).toFixed(us < 10 ? 3 : 1)} µs`;
}

export function pct(value) {
  return value === null || value === undefined ? "—" : `${Number(value).toFixed(2)} %`;
}

// Up to `most` evenly spread indexes of `count` items, the first and the last included.
function ticks(count, most = 9) {
  if (count <= most) return [...Array(count).keys()];
  const step = (count - 1) / (most - 1);
  return [...new Set([...Array(most).keys()].map((i) => Math.round(i * step)))];
}

// Labels under a chart of `count` equal columns, each at its column's centre.
function axis(labels, count, name) {
  const row = h("div", { class: "axis", "aria-hidden": "true" });
  for (const index of ticks(count)) {
    const tick = h("span", {}, labels[index]);
    tick.style.setProperty("left", `${((index + 0.5) / count) * 100}%`); // CSSOM: CSP allows it
    row.append(tick);
  }
  return [row, h("p", { class: "axis-name" }, name)];
}

// Columns of stacked segments, one column per rank: series [{ name, cls, values }], each
// value the segment's height in units of `max`; title(i) is a column's hover text.
export function stackedColumns({ labels, series, max = 100, title, name, yLabel }) {
  const count = labels.length;
  const chart = svg("svg", {
    class: "columns",
    viewBox: `0 0 ${count} ${max}`,
    preserveAspectRatio: "none",
    role: "img",
    "aria-label": name,
  });
  for (let i = 0; i < count; i++) {
    const column = svg("g", { class: "column", "data-index": i }, svg("title", {}, title(i)));
    let top = max;
    for (const { cls, values } of series) {
      const value = Math.max(0, Math.min(values[i] ?? 0, top));
      if (value > 0) {
        column.append(svg("rect", { class: cls, x: i + 0.06, width: 0.88, y: top - value, height: value }));
        top -= value;
      }
    }
    chart.append(column);
  }
  return h(
    "figure",
    { class: "chart", dataset: { columns: String(count) } },
    h("div", { class: "plot" }, h("span", { class: "y-top" }, yLabel[0]), h("span", { class: "y-bottom" }, yLabel[1]), chart),
    axis(labels, count, name),
    legend(series),
  );
}

export function legend(series) {
  return h(
    "ul",
    { class: "chart-legend" },
    series.map(({ name, cls, note }) => h("li", {}, h("span", { class: `swatch ${cls}` }), name, note ? h("span", { class: "muted" }, ` ${note}`) : null)),
  );
}

// One horizontal bar of segments [{ cls, value, label }], their widths their share of the sum.
export function shareBar(segments, name) {
  const total = segments.reduce((sum, s) => sum + s.value, 0) || 1;
  const bar = svg("svg", { class: "share-bar", viewBox: "0 0 1000 24", preserveAspectRatio: "none", role: "img", "aria-label": name });
  let x = 0;
  for (const { cls, value, label } of segments) {
    const width = (value / total) * 1000;
    if (width > 0) bar.append(svg("rect", { class: cls, x, y: 0, width, height: 24 }, svg("title", {}, label)));
    x += width;
  }
  return bar;
}

// A light-to-dark ramp (yellow → red) for the heatmap: t in [0, 1].
function ramp(t) {
  const stops = [
    [255, 247, 188],
    [254, 196, 79],
    [236, 112, 20],
    [153, 52, 4],
  ];
  const at = Math.min(stops.length - 1.0001, Math.max(0, t) * (stops.length - 1));
  const i = Math.floor(at);
  const f = at - i;
  const [a, b] = [stops[i], stops[i + 1]];
  return `rgb(${a.map((v, k) => Math.round(v + (b[k] - v) * f)).join(",")})`;
}

const HEATMAP_MAX_HEIGHT = 480; // CSS px: past this many ranks, a pixel row holds several
const ROW_HEIGHT = 12; // ... and below it, each rank's row is this tall

// The ranks × steps heatmap of step durations: rows[] = { rank, steps: Map(step → {us,
// truncated}) }, steps[] the step numbers. Past HEATMAP_MAX_HEIGHT rows, each row of pixels
// holds a block of ranks and shows its slowest, so a slow rank stays visible at 1,024 ranks.
// marked: Map(rank label → reason) of rows outlined and flagged on the rank axis (stragglers).
export function heatmap(rows, steps, marked = new Map()) {
  let low = Infinity;
  let high = -Infinity;
  for (const row of rows) {
    for (const cell of row.steps.values()) {
      if (cell.truncated) continue;
      low = Math.min(low, cell.us);
      high = Math.max(high, cell.us);
    }
  }
  const perRow = Math.max(1, Math.ceil(rows.length / HEATMAP_MAX_HEIGHT));
  const blocks = Math.ceil(rows.length / perRow);
  const rowHeight = perRow > 1 ? 1 : Math.max(1, Math.min(ROW_HEIGHT, Math.floor(HEATMAP_MAX_HEIGHT / blocks)));
  const height = blocks * rowHeight;
  const canvas = h("canvas", {
    class: "heatmap",
    role: "img",
    "aria-label": `Step durations: ${rows.length} ranks × ${steps.length} steps`,
    dataset: { ranks: String(rows.length), steps: String(steps.length), ranksPerRow: String(perRow) },
  });
  canvas.style.setProperty("height", `${height}px`);
  const caption = h("p", { class: "heatmap-caption muted", "aria-live": "polite" }, "Point at a cell for its rank, step and duration.");

  // The block of ranks a row of pixels shows, and per step its slowest rank's cell.
  const block = (index) => rows.slice(index * perRow, (index + 1) * perRow);
  const slowest = (index, step) => {
    let found = null;
    for (const row of block(index)) {
      const cell = row.steps.get(step);
      if (cell && (!found || (!cell.truncated && (found.cell.truncated || cell.us > found.cell.us)))) found = { row, cell };
    }
    return found;
  };
  const markedBlocks = [...new Set(rows.flatMap((row, i) => (marked.has(row.rank) ? [Math.floor(i / perRow)] : [])))];
  canvas.dataset.marked = String(markedBlocks.length);
  const draw = () => {
    const width = canvas.clientWidth || 900;
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const context = canvas.getContext("2d");
    context.scale(ratio, ratio);
    const cellWidth = width / steps.length;
    for (let index = 0; index < blocks; index++) {
      steps.forEach((step, column) => {
        const found = slowest(index, step);
        if (!found) return;
        context.fillStyle = found.cell.truncated ? "#d6d9df" : ramp(high > low ? (found.cell.us - low) / (high - low) : 0.5);
        context.fillRect(column * cellWidth, index * rowHeight, Math.ceil(cellWidth), rowHeight);
      });
    }
    context.strokeStyle = "#1f4fd1";
    context.lineWidth = 2;
    for (const index of markedBlocks) {
      context.strokeRect(1, index * rowHeight + 1, width - 2, Math.max(rowHeight - 2, 1));
    }
  };
  canvas.addEventListener("mousemove", (event) => {
    // offsetX/Y: from the canvas's padding edge, which its drawing fills.
    const column = Math.floor((event.offsetX / canvas.clientWidth) * steps.length);
    const index = Math.floor(event.offsetY / rowHeight);
    if (column < 0 || column >= steps.length || index < 0 || index >= blocks) return;
    const found = slowest(index, steps[column]);
    const ranks = block(index);
    const where = ranks.length > 1 ? `ranks ${ranks[0].rank}–${ranks[ranks.length - 1].rank} (the slowest: ${found?.row.rank ?? "—"})` : `rank ${ranks[0].rank}`;
    const straggling = ranks.filter((row) => marked.has(row.rank)).map((row) => marked.get(row.rank));
    caption.textContent = (found
      ? `${where}, step ${steps[column]}: ${duration(found.cell.us)}${found.cell.truncated ? " (truncated: the profiler stopped inside it)" : ""}`
      : `${where}, step ${steps[column]}: not in this rank's trace`) + (straggling.length ? `. Straggler: ${straggling.join("; ")}` : "");
  });
  // Drawn at its laid-out width, and again when that changes (the observer goes with it).
  new ResizeObserver(draw).observe(canvas);

  const rankTicks = ticks(blocks, 6).map((index) => {
    const tick = h("span", {}, String(block(index)[0].rank));
    tick.style.setProperty("top", `${index * rowHeight}px`);
    return tick;
  });
  for (const index of markedBlocks) {
    const flagged = block(index).filter((row) => marked.has(row.rank));
    const flag = h("span", { class: "straggler-mark", title: flagged.map((row) => marked.get(row.rank)).join("; ") }, `◆ ${flagged[0].rank}`);
    flag.style.setProperty("top", `${index * rowHeight}px`);
    rankTicks.push(flag);
  }
  const scale = h("div", { class: "scale", "aria-hidden": "true" }, h("span", {}, duration(low)), h("span", { class: "ramp" }), h("span", {}, duration(high)));
  return h(
    "figure",
    { class: "chart heatmap-chart" },
    h("div", { class: "heatmap-plot" }, h("div", { class: "rank-axis", "aria-hidden": "true" }, rankTicks), canvas),
    axis(steps.map(String), steps.length, "step"),
    scale,
    caption,
  );
}
