// workloadMetadata as a readable tree, exactly as stored: member order and every number's
// text as the API returned it (json_text.js), with the raw JSON beside it.
import { h } from "/static/dom.js";

export function metadataTree(node, text) {
  if (!node || (node.kind === "literal" && node.text === "null")) {
    return h("p", { class: "muted" }, "No workloadMetadata was given.");
  }
  return h(
    "div",
    { class: "metadata" },
    h("ul", { class: "tree", role: "tree" }, children(node, "")),
    h(
      "details",
      { class: "raw" },
      h("summary", {}, "The JSON as stored"),
      h("pre", { class: "raw-json" }, text.slice(node.start, node.end)),
    ),
  );
}

// path: where the member is (shape.rankCount, tags[0]), for a test or a tooltip to name it.
function children(node, path) {
  if (node.kind === "object") {
    return node.entries.map(([key, value]) => item(key, value, path ? `${path}.${key}` : key));
  }
  if (node.kind === "array") {
    return node.items.map((value, index) => item(`[${index}]`, value, `${path}[${index}]`, true));
  }
  return [];
}

function item(key, node, path, indexed = false) {
  const name = h("span", { class: indexed ? "key index" : "key" }, key);
  if (node.kind === "object" || node.kind === "array") {
    const size = node.kind === "object" ? node.entries.length : node.items.length;
    const empty = node.kind === "object" ? "{}" : "[]";
    if (size === 0) return h("li", { role: "treeitem" }, name, " ", h("span", { class: "value empty" }, empty));
    return h(
      "li",
      { role: "treeitem", "aria-expanded": "true" },
      h("details", { open: true }, h("summary", {}, name, h("span", { class: "muted" }, node.kind === "array" ? ` [${size}]` : "")), h("ul", { role: "group" }, children(node, path))),
    );
  }
  return h("li", { role: "treeitem", dataset: { path }, title: path }, name, " ", scalar(node));
}

function scalar(node) {
  if (node.kind === "string") return h("span", { class: "value string" }, JSON.stringify(node.value));
  return h("span", { class: `value ${node.kind === "number" ? "number" : node.text}` }, node.text);
}
