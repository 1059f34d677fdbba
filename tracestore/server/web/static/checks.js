// A list of checks (the census's, validate's) as ok / warning / FAILED / not evaluated, and
// the tools that can read a traceset as ready / not ready (a tool it is not ready for is no
// failure of the traceset), each with its message in the API's words.
import { h } from "/static/dom.js";

const CHECK_NAMES = {
  rankCountMatches: "Rank census",
  parallelismConsistent: "Parallelism degrees",
  processGroupsMatch: "Process groups",
  hta: "HTA (Holistic Trace Analysis)",
  chakra: "Chakra (trace link)",
  astra: "ASTRA-sim",
  perfetto: "Perfetto / browser viewer",
  stragglers: "Stragglers",
};

export function checkList(entries) {
  return h(
    "ul",
    { class: "checks" },
    entries.map(([name, check]) => {
      const state = check.passed === null ? "pending" : !check.passed ? "failed" : check.warning ? "warning" : "passed";
      const word = { pending: "not evaluated", failed: "FAILED", warning: "warning", passed: "ok" }[state];
      return h(
        "li",
        { class: `check ${state}`, dataset: { check: name, state } },
        h("span", { class: "check-state" }, word),
        h("strong", {}, CHECK_NAMES[name] ?? name),
        h("span", { class: "check-message" }, check.message ?? ""),
      );
    }),
  );
}


// Readiness entries [name, {ready, message}]: validate's `readiness` (name hta_ready ...) or
// the recorded `inspection.readiness` (key hta ..., `passed` for `ready`).
export function readinessList(entries) {
  return h(
    "ul",
    { class: "checks readiness" },
    entries.map(([name, entry]) => {
      const ready = entry.ready !== undefined ? entry.ready : entry.passed;
      const state = ready === null || ready === undefined ? "pending" : ready ? "ready" : "not-ready";
      const word = { pending: "not evaluated", ready: "ready", "not-ready": "not ready" }[state];
      const key = name.replace(/_ready$/, "");
      return h(
        "li",
        { class: `check ${state}`, dataset: { check: name, state } },
        h("span", { class: "check-state" }, word),
        h("strong", {}, CHECK_NAMES[key] ?? entry.tool ?? name),
        h("span", { class: "check-message" }, entry.message ?? ""),
      );
    }),
  );
}
