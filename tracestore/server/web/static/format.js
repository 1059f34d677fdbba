// How numbers, sizes, times and rank sets read on the page.

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

// 1536 → "1.5 KiB" (the exact byte count belongs in a title beside it).
export function bytes(count) {
  if (count === null || count === undefined) return "—";
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${count} B` : `${value.toFixed(value < 10 ? 2 : 1)} ${UNITS[unit]}`;
}

// "2026-12-01T12:10:55.827Z" → "2026-12-01 12:10 UTC" (the API's times are UTC).
export function when(timestamp) {
  if (!timestamp) return "—";
  const match = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})/.exec(timestamp);
  return match ? `${match[1]} ${match[2]} UTC` : timestamp;
}

// [0, 1, 2, 5, 7, 8] → "0..2, 5, 7..8" (the census's own spelling of rank sets).
export function rankList(ranks) {
  const sorted = [...ranks].sort((a, b) => a - b);
  const parts = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j += 1;
    parts.push(i === j ? String(sorted[i]) : `${sorted[i]}..${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(", ");
}

// [{start, end}] → "3, 5..7".
export function rangeList(ranges) {
  return ranges.map((r) => (r.start === r.end ? String(r.start) : `${r.start}..${r.end}`)).join(", ");
}

export function plural(count, one, many = one + "s") {
  return `${count} ${count === 1 ? one : many}`;
}

// When a traceset goes and how to keep it: every one but a promoted one expires ttlDays after
// its last use ("2026-12-13 09:10 UTC: 7 days after its last use ..."; "never (promoted)").
export function expiry(traceset) {
  if (!traceset.expiresAt) return "never (promoted)";
  const days = plural(traceset.ttlDays, "day");
  return `${when(traceset.expiresAt)}: ${days} after its last use (a download counts); promote it to keep it`;
}

// A traceset's census verdict in words, and the class that colours it: a ready traceset
// whose census failed is never shown like a complete one (the list, the detail's header).
export function censusVerdict(traceset) {
  if (traceset.census === "fail") {
    const missing = traceset.missingRanks ? `: ${plural(traceset.missingRanks, "rank")} missing` : "";
    return { text: `census failed${missing}`, className: "census-fail" };
  }
  if (traceset.census === "pass") return { text: "census passed", className: "census-pass" };
  return { text: "census not known yet", className: "census-unknown" };
}

// The status badge's class: a ready traceset failing its census is not the green "ready".
export function statusClass(traceset) {
  return traceset.status === "ready" && traceset.census === "fail" ? "status-incomplete" : `status-${traceset.status}`;
}
