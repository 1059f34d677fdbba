// workloadMetadata as a readable tree, exactly as stored: member order and every number's
// text as the API returned it, with the raw JSON beside it.
import { h } from "/static/dom.js";

// The API answers workloadMetadata as it was stored (2.0 stays 2.0, 1e3 stays 1e3,
// 12345678901234567891 keeps every digit); JSON.parse would make those numbers doubles. This
// reads JSON text into a tree that keeps each value's text: { kind: "object", entries:
// [[key, node]] } | { kind: "array", items } | { kind: "string", value } | { kind: "number" |
// "literal", text }, each with the [start, end) offsets of its text. The text must be JSON
// (JSON.parse it first): nothing here checks it. Iterative, so deep nesting cannot overflow.
export function parseExact(text) {
  const stack = [];
  let root;
  let key = null; // in an object, the member's name once read; null while a name is due
  for (let at = 0; at < text.length; ) {
    const c = text[at];
    if (c === "}" || c === "]") {
      stack.pop().end = ++at;
      continue;
    }
    if (" \t\n\r,:".includes(c)) {
      at += 1;
      continue;
    }
    const parent = stack[stack.length - 1];
    const start = at;
    let node;
    if (c === '"') {
      for (at += 1; text[at] !== '"'; ) at += text[at] === "\\" ? 2 : 1;
      const value = JSON.parse(text.slice(start, ++at));
      if (parent?.kind === "object" && key === null) {
        key = value;
        continue;
      }
      node = { kind: "string", value, start, end: at };
    } else if (c === "{" || c === "[") {
      at += 1;
      node = c === "{" ? { kind: "object", entries: [], start } : { kind: "array", items: [], start };
    } else {
      while (at < text.length && !" \t\n\r,]}".includes(text[at])) at += 1;
      const word = text.slice(start, at);
      node = { kind: /^[-\d]/.test(word) ? "number" : "literal", text: word, start, end: at };
    }
    if (!parent) root = node;
    else if (parent.kind === "array") parent.items.push(node);
    else {
      parent.entries.push([key, node]);
      key = null;
    }
    if (node.kind === "object" || node.kind === "array") stack.push(node);
  }
  return root;
}

// The node of member `name` of a parsed object, or undefined.
export function member(node, name) {
  if (node?.kind !== "object") return undefined;
  return node.entries.find(([key]) => key === name)?.[1];
}

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
