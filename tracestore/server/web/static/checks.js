// A list of checks (the census's, the readiness ones, validate's) as ok / warning / FAILED /
// not evaluated, each with its message in the API's words.
import { h } from "/static/dom.js";

const CHECK_NAMES = {
  rankCountMatches: "Rank census",
  parallelismConsistent: "Parallelism degrees",
  processGroupsMatch: "Process groups",
  hta: "HTA (Holistic Trace Analysis)",
  chakra: "Chakra (trace link)",
  astra: "ASTRA-sim",
  perfetto: "Perfetto / browser viewer",
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

