// JSON parsed without losing what was written. The API returns workloadMetadata exactly as
// it was stored (2.0 stays 2.0, 1e3 stays 1e3, 12345678901234567891 keeps every digit, key
// order as given; the service itself keeps the last of repeated keys and writes an integer
// -0 as 0); JSON.parse would turn those numbers into doubles. This parser keeps every
// value's source text (and repeated keys, were any sent), so the page shows what is stored.
//
// A node is { kind: "object", entries: [[key, node]] } | { kind: "array", items: [node] } |
// { kind: "string", value } | { kind: "number" | "literal", text }, each with the
// [start, end) offsets of its text.

export class JsonTextError extends Error {}

const SCALAR = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null/y;

export function parseExact(text) {
  let at = 0;
  const fail = (what) => {
    throw new JsonTextError(`${what} at offset ${at}`);
  };
  const space = () => {
    while (at < text.length && " \t\n\r".includes(text[at])) at += 1;
  };
  const stringToken = () => {
    const start = at;
    at += 1;
    while (at < text.length && text[at] !== '"') at += text[at] === "\\" ? 2 : 1;
    if (at >= text.length) fail("unterminated string");
    at += 1;
    return JSON.parse(text.slice(start, at));
  };
  // Iterative over containers, so deep nesting cannot overflow the call stack.
  const stack = [];
  let root;
  let key = null;
  const place = (node) => {
    const parent = stack[stack.length - 1];
    if (!parent) root = node;
    else if (parent.kind === "array") parent.items.push(node);
    else parent.entries.push([key, node]);
  };
  for (;;) {
    space();
    const parent = stack[stack.length - 1];
    let empty = false;
    if (parent?.kind === "object") {
      if (text[at] === "}" && parent.entries.length === 0) empty = true;
      else {
        if (text[at] !== '"') fail("expected a member name");
        key = stringToken();
        space();
        if (text[at] !== ":") fail("expected ':'");
        at += 1;
        space();
      }
    } else if (parent?.kind === "array" && text[at] === "]" && parent.items.length === 0) {
      empty = true;
    }
    if (empty) close();
    else {
      const start = at;
      const c = text[at];
      if (c === "{" || c === "[") {
        at += 1;
        const node =
          c === "{" ? { kind: "object", entries: [], start } : { kind: "array", items: [], start };
        place(node);
        stack.push(node);
        continue;
      }
      if (c === '"') place({ kind: "string", value: stringToken(), start, end: at });
      else {
        // Sticky, from `at`: a number is as long as it is written (the service keeps a
        // 5,000-digit fraction), never cut at a window's edge.
        SCALAR.lastIndex = at;
        const match = SCALAR.exec(text);
        if (!match) fail("unexpected character");
        at += match[0].length;
        const kind = /^[-\d]/.test(match[0]) ? "number" : "literal";
        place({ kind, text: match[0], start, end: at });
      }
    }
    // After a value: a comma continues its container, a bracket closes it (and maybe more).
    for (;;) {
      space();
      const open = stack[stack.length - 1];
      if (!open) {
        if (at !== text.length) fail("text after the JSON value");
        return root;
      }
      if (text[at] === ",") {
        at += 1;
        break;
      }
      if (text[at] === (open.kind === "object" ? "}" : "]")) close();
      else fail("expected ',' or a closing bracket");
    }
  }

  function close() {
    const node = stack.pop();
    at += 1;
    node.end = at;
  }
}

// The node of member `name` of a parsed object, or undefined.
export function member(node, name) {
  if (node?.kind !== "object") return undefined;
  return node.entries.find(([key]) => key === name)?.[1];
}
