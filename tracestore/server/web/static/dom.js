// Building elements without innerHTML: every value the API returns goes in as text, so a
// traceset named "<img onerror=...>" is shown, never run (and the CSP forbids inline code).

// h("a", { href, class: "x", dataset: { rank: 3 }, onclick }, "text", child, [more]) → element.
// Attributes that are null, undefined or false are left out; true sets an empty attribute.
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "dataset") Object.assign(element.dataset, value);
    else if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else if (name === "value" && "value" in element) element.value = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else element.append(child instanceof Node ? child : String(child));
  }
}

// Replaces what `container` shows with `children`.
export function show(container, ...children) {
  container.replaceChildren();
  append(container, children);
  return container;
}
