// The workloadMetadata rules of upload, as tracestore/metadata.py applies them, with its
// messages word for word (the reference API's page on workload metadata is the
// authority). The page checks before it asks for upload URLs; the service still judges, and
// its answer is shown as it words it. tests/web/test_upload.py runs these against the Python
// rules over many inputs.
//
// JSON.parse cannot be used: it reads 2.0 as 2 (the rules refuse 2.0) and loses digits past
// 2^53. parseJson (over json_text.js's parser) keeps what the text says: integers as BigInt,
// other numbers as RawNumber (with their text), objects as Map (key order as written, a
// repeated key's last value, as Python's json does).

import { JsonTextError, parseExact } from "/static/json_text.js";

export const DEGREES = ["dp", "tp", "sp", "ep", "pp"];
export const MAX_RANK_COUNT = 2147483647n;
export const MAX_METADATA_BYTES = 65536;
export const MISSING_RANK_COUNT_MESSAGE =
  "Uploads with primary trace files must declare a rank count: " +
  "set workloadMetadata.shape.rankCount, " +
  `or workloadMetadata.parallelism degrees (${DEGREES.join(", ")})`;

const ROOT = "workloadMetadata";
const SHAPE = `${ROOT}.shape`;
const PARALLELISM = `${ROOT}.parallelism`;
const FORMULA = DEGREES.join(" × ");
const PRODUCT = `the parallelism product (${FORMULA})`;
const SHOWN_CHARS = 80;
// Python refuses to write an int of more decimal digits than this (sys.get_int_max_str_digits).
const MAX_INT_DIGITS = 4300;

// A rule broken: message is the API's own wording.
export class RuleError extends Error {}

// A JSON number that is not an integer, with the text it was written as.
export class RawNumber {
  constructor(text) {
    this.text = text;
  }
}

// ---- JSON text, read and written as tracestore/jsontext.py does ----

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/y;

// Parse JSON text into plain values (BigInt, RawNumber, Map, arrays, strings, booleans, null)
// over json_text.js's exact parser; throws SyntaxError naming the position.
export function parseJson(text) {
  let root;
  try {
    root = parseExact(text);
  } catch (error) {
    if (error instanceof JsonTextError) throw new SyntaxError(error.message);
    throw error;
  }
  const value = (node, depth) => {
    if (depth > 500) throw new SyntaxError("nested too deeply");
    switch (node.kind) {
      case "object":
        // A repeated key keeps its first place and its last value, as Python's json does.
        return new Map(node.entries.map(([key, child]) => [key, value(child, depth + 1)]));
      case "array":
        return node.items.map((child) => value(child, depth + 1));
      case "string":
        return node.value;
      case "literal":
        return { true: true, false: false, null: null }[node.text];
      default: {
        if (/[.eE]/.test(node.text)) return new RawNumber(node.text);
        const digits = node.text.replace("-", "").length;
        if (digits > MAX_INT_DIGITS) {
          throw new SyntaxError(`an integer of ${digits} digits (at most ${MAX_INT_DIGITS})`);
        }
        return BigInt(node.text);
      }
    }
  };
  return value(root, 0);
}

// A string as Python's json.dumps(ensure_ascii=False) writes it (a lone surrogate as it is).
function quoted(text) {
  let out = '"';
  for (const c of text) {
    const code = c.codePointAt(0);
    if (c === '"') out += '\\"';
    else if (c === "\\") out += "\\\\";
    else if (c === "\n") out += "\\n";
    else if (c === "\r") out += "\\r";
    else if (c === "\t") out += "\\t";
    else if (c === "\b") out += "\\b";
    else if (c === "\f") out += "\\f";
    else if (code < 0x20) out += "\\u" + code.toString(16).padStart(4, "0");
    else out += c;
  }
  return out + '"';
}

// Python's repr of a float: the shortest digits that read back, fixed notation for decimal
// exponents from -4 to 15 ("1000.0", "0.0001"), scientific past them ("1e+16", "1e-05").
function floatRepr(number) {
  if (number === Infinity) return "Infinity";
  if (number === -Infinity) return "-Infinity";
  const sign = number < 0 || Object.is(number, -0) ? "-" : "";
  const [mantissa, exponent] = Math.abs(number).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const point = Number(exponent) + 1; // where the point goes in digits
  if (point > -4 && point <= 16) {
    if (point <= 0) return `${sign}0.${"0".repeat(-point)}${digits}`;
    if (point >= digits.length) return `${sign}${digits}${"0".repeat(point - digits.length)}.0`;
    return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
  }
  const e = Number(exponent);
  const fraction = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${fraction}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
}

// Compact JSON text; numbers as written (jsontext.dumps) or, with asPython, as Python's
// json.dumps writes what json.loads read (a non-integer number as a float's repr).
export function writeJson(value, { asPython = false } = {}) {
  if (value === null || value === undefined) return "null";
  if (typeof value === "boolean") return String(value);
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number") return floatRepr(value);
  if (value instanceof RawNumber) return asPython ? floatRepr(parseFloat(value.text)) : value.text;
  if (typeof value === "string") return quoted(value);
  if (Array.isArray(value)) return "[" + value.map((v) => writeJson(v, { asPython })).join(",") + "]";
  if (value instanceof Map) {
    const members = [...value].map(([k, v]) => quoted(k) + ":" + writeJson(v, { asPython }));
    return "{" + members.join(",") + "}";
  }
  throw new TypeError(`${typeof value} is not JSON`);
}

function codePoints(text) {
  return [...text];
}

// A value as JSON text for a message, cut to a readable length (metadata._shown).
function shown(value) {
  let text;
  if (typeof value === "bigint" && value.toString().replace("-", "").length > MAX_INT_DIGITS) {
    // Python cannot write it either: it names its size (a product of huge degrees).
    const bits = (value < 0n ? -value : value).toString(2).length;
    text = `an integer of about ${Math.floor(bits * Math.log10(2)) + 1} digits`;
  } else {
    text = writeJson(value);
  }
  const points = codePoints(text);
  return points.length <= SHOWN_CHARS ? text : points.slice(0, SHOWN_CHARS).join("") + "…";
}

// ---- the rules (metadata.check_upload_metadata and what it calls) ----

// Bytes of the metadata as compact UTF-8 JSON, as Python's json.dumps writes it; a lone
// surrogate cannot be encoded, and the error names the member holding it as Python's does.
export function metadataSize(metadata) {
  const points = codePoints(writeJson(metadata, { asPython: true }));
  let size = 0;
  for (const point of points) {
    const code = point.codePointAt(0);
    if (code >= 0xd800 && code <= 0xdfff) throw new RuleError(surrogateProblem(metadata));
    size += code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
  }
  return size;
}

// The first lone surrogate of a string as "U+D800", or null (a pair is one character).
function loneSurrogate(text) {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const next = text.charCodeAt(i + 1);
    if (code >= 0xd800 && code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) i++;
    else if (code >= 0xd800 && code <= 0xdfff) return `U+${code.toString(16).toUpperCase()}`;
  }
  return null;
}

// Which member holds a lone surrogate, the first in the text's order (a member's name before
// its value), as metadata._surrogate_problem words it.
function surrogateProblem(metadata) {
  const pending = [[ROOT, metadata, false]];
  while (pending.length) {
    const [path, value, isName] = pending.pop();
    const found = typeof value === "string" ? loneSurrogate(value) : null;
    if (found) {
      const what = isName ? `${path} has a member name holding` : `${path} holds`;
      return `${what} a lone surrogate (${found}), which is not Unicode text`;
    }
    if (value instanceof Map) {
      for (const [key, item] of [...value].reverse()) pending.push([`${path}.${key}`, item, false], [path, key, true]);
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) pending.push([`${path}[${i}]`, value[i], false]);
    }
  }
  return `${ROOT} holds a lone surrogate, which is not Unicode text`;
}

// A count as Python's f"{n:,}" writes it (65,536).
function thousands(count) {
  return String(count).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

function checkMetadataSize(metadata) {
  const size = metadataSize(metadata);
  if (size > MAX_METADATA_BYTES) {
    throw new RuleError(
      `${ROOT} is larger than ${thousands(MAX_METADATA_BYTES)} bytes when serialized: ${thousands(size)} bytes`,
    );
  }
}

function memberObjects(metadata) {
  if (metadata === null || metadata === undefined) return [new Map(), new Map()];
  if (!(metadata instanceof Map)) {
    throw new RuleError(`${ROOT} must be an object or null, got ${shown(metadata)}`);
  }
  return ["shape", "parallelism"].map((name) => {
    const value = metadata.has(name) ? metadata.get(name) : null;
    if (value !== null && !(value instanceof Map)) {
      throw new RuleError(`${ROOT}.${name} must be an object or null, got ${shown(value)}`);
    }
    return value ?? new Map();
  });
}

function wholeNumber(path, value) {
  if (typeof value === "bigint" && value >= 1n) return value;
  throw new RuleError(`${path} must be a whole number of at least 1, got ${shown(value)}`);
}

const withCommas = (n) => n.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");

// The rank count the metadata declares (a BigInt) or null; throws RuleError.
export function declaredRankCount(metadata) {
  const [shape, parallelism] = memberObjects(metadata);
  const raw = shape.has("rankCount") ? shape.get("rankCount") : null;
  const rankCount = raw === null ? null : wholeNumber(`${SHAPE}.rankCount`, raw);
  const degrees = DEGREES.filter((name) => (parallelism.get(name) ?? null) !== null).map((name) =>
    wholeNumber(`${PARALLELISM}.${name}`, parallelism.get(name)),
  );
  const product = degrees.length ? degrees.reduce((a, b) => a * b, 1n) : null;
  if (rankCount !== null && rankCount > MAX_RANK_COUNT) {
    throw new RuleError(
      `${SHAPE}.rankCount must be at most ${withCommas(MAX_RANK_COUNT)}, got ${shown(rankCount)}`,
    );
  }
  if (product !== null && product > MAX_RANK_COUNT) {
    throw new RuleError(
      `${PRODUCT} of ${PARALLELISM} must be at most ${withCommas(MAX_RANK_COUNT)}, ` +
        `got ${shown(product)}`,
    );
  }
  if (rankCount !== null && product !== null && rankCount !== product) {
    throw new RuleError(
      `${SHAPE}.rankCount ${rankCount} differs from the parallelism product ${product} (${FORMULA})`,
    );
  }
  return rankCount ?? product;
}

// Check an upload's workloadMetadata, the rules in the service's order; the declared rank
// count (a Number, at most 2^31 - 1) or null. Throws RuleError with the service's message.
export function checkUploadMetadata(metadata, { hasPrimaryFiles }) {
  memberObjects(metadata);
  checkMetadataSize(metadata);
  const rankCount = declaredRankCount(metadata);
  if (rankCount === null && hasPrimaryFiles) throw new RuleError(MISSING_RANK_COUNT_MESSAGE);
  return rankCount === null ? null : Number(rankCount);
}

// ---- the small form ----

// A form field's text as a JSON value: a number when it is written as one (so "2.5" and "0"
// meet the rules as numbers), else the text itself, which the rules refuse by name.
export function fieldValue(text) {
  const trimmed = text.trim();
  if (!trimmed) return undefined;
  NUMBER.lastIndex = 0;
  const match = NUMBER.exec(trimmed);
  if (match && match[0].length === trimmed.length) return parseJson(trimmed);
  return trimmed;
}

// The metadata a form describes: fields maps rankCount, the degrees (dp tp sp ep pp cp fsdp)
// and the descriptive members (snake_case, as promotion and the list filters read them) to
// the text typed; empty fields are left out, and so are empty objects.
export function metadataFromFields(fields) {
  const metadata = new Map();
  for (const name of ["workload_family", "workload_name", "precision"]) {
    const text = (fields[name] ?? "").trim();
    if (text) metadata.set(name, text);
  }
  const rankCount = fieldValue(fields.rankCount ?? "");
  if (rankCount !== undefined) metadata.set("shape", new Map([["rankCount", rankCount]]));
  const parallelism = new Map();
  for (const name of [...DEGREES, "cp", "fsdp"]) {
    const value = fieldValue(fields[name] ?? "");
    if (value !== undefined) parallelism.set(name, value);
  }
  if (parallelism.size) metadata.set("parallelism", parallelism);
  return metadata.size ? metadata : null;
}
