// Uploading from the browser: the CLI's flow (tracestore/client/uploader.py) through api.js.
// POST /tracesets/upload-url answers the session with a first page of presigned part URLs
// (the resume route answers the rest); parts are PUT a few at a time, each file is hashed in
// order meanwhile, and the completion carries every part's ETag and each file's SHA-256 for
// the service to verify. What was sent is kept in localStorage, so after a reload the same
// files, picked again, finish with only the parts the service does not hold.
import { api, ApiError, errorOf, fetchRetrying, NetworkError, sleep, UnansweredError } from "/static/api.js";
import { Sha256 } from "/static/sha256.js";

export const PUT_CONCURRENCY = 4;
export const STATE_KEY = "tracestore.uploads";
const HASH_CHUNK = 4 * 1024 * 1024;
const PART_RETRY_STATUSES = [408, 429, 500];
const PART_RETRY_DELAYS_MS = [500, 1000, 2000, 4000, 8000];

// ---- the files picked ----

// A file to upload: its name in the traceset, the File, its role.
function picked(name, file, role) {
  return { name, file, role, size: file.size, lastModified: file.lastModified };
}

// The files of an <input type=file> (webkitdirectory or not), named like the CLI names a
// folder's files: relative to the folder picked.
export function filesOfInput(fileList, role) {
  const found = [...fileList].map((file) => {
    const relative = file.webkitRelativePath;
    const name = relative ? relative.split("/").slice(1).join("/") : file.name;
    return picked(name, file, role);
  });
  return found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

// The folder an input's files came from (the default traceset name), or "".
export function folderOfInput(fileList) {
  const first = fileList[0]?.webkitRelativePath ?? "";
  return first.split("/")[0] ?? "";
}

function entryFile(entry) {
  return new Promise((resolve, reject) => entry.file(resolve, reject));
}

function readBatch(reader) {
  return new Promise((resolve, reject) => reader.readEntries(resolve, reject));
}

// The files under dropped entries (FileSystemEntry): a folder's named relative to it, a file
// by its own name. readEntries answers a folder in batches until an empty one.
export async function filesOfEntries(entries, role) {
  const found = [];
  const walk = async (entry, prefix) => {
    if (entry.isFile) {
      found.push(picked(prefix + entry.name, await entryFile(entry), role));
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await readBatch(reader);
        if (!batch.length) break;
        for (const child of batch) await walk(child, prefix + entry.name + "/");
      }
    }
  };
  for (const entry of entries) {
    if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await readBatch(reader);
        if (!batch.length) break;
        for (const child of batch) await walk(child, "");
      }
    } else {
      await walk(entry, "");
    }
  }
  return found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

// What a drop holds: its files and the folder dropped (the default name), if one was.
export async function filesOfDrop(dataTransfer, role) {
  const entries = [];
  const loose = [];
  for (const item of dataTransfer.items ?? []) {
    if (item.kind !== "file") continue;
    const entry = item.webkitGetAsEntry?.();
    if (entry) entries.push(entry);
    else if (item.getAsFile()) loose.push(item.getAsFile());
  }
  const files = [...(await filesOfEntries(entries, role)), ...filesOfInput(loose, role)];
  const folder = entries.length === 1 && entries[0].isDirectory ? entries[0].name : "";
  return { files, folder };
}

// ---- what survives a reload ----

export function savedUploads() {
  try {
    const saved = JSON.parse(localStorage.getItem(STATE_KEY) ?? "[]");
    return Array.isArray(saved) ? saved : [];
  } catch {
    return [];
  }
}

function writeSaved(list) {
  try {
    localStorage.setItem(STATE_KEY, JSON.stringify(list));
  } catch {
    // Storage full or refused (a private window): the upload goes on, only a reload loses it.
  }
}

export function saveUpload(state) {
  writeSaved([...savedUploads().filter((s) => s.uploadId !== state.uploadId), state]);
}

export function forgetUpload(uploadId) {
  writeSaved(savedUploads().filter((s) => s.uploadId !== uploadId));
}

// Why the files picked again are not the files an unfinished upload started with, or null.
export function differences(state, files) {
  const local = new Map(files.map((f) => [f.name, f]));
  for (const want of state.files) {
    const have = local.get(want.name);
    if (!have) return `${want.name} is not among the files picked; pick the folder this upload started from`;
    if (have.size !== want.size) {
      return `${want.name} is ${have.size} bytes now; the upload declared ${want.size} bytes`;
    }
    if (have.lastModified !== want.lastModified) {
      return `${want.name} was modified after the upload started; start a new upload for the new files`;
    }
  }
  const extra = files.find((f) => !state.files.some((s) => s.name === f.name));
  return extra ? `${extra.name} is not part of this upload` : null;
}

// ---- the flow ----

// The body of upload-url (and of its dry run) for the files, with the metadata's JSON text
// as written (it must be one JSON value: JSON.parse it first).
export function uploadRequestText({ name, files, metadataText }) {
  const request = { name, files: files.map((f) => ({ name: f.name, size: f.size, role: f.role })) };
  const json = JSON.stringify(request);
  return metadataText ? `${json.slice(0, -1)},"workloadMetadata":${metadataText}}` : json;
}

// upload-url's dry run (POST /tracesets/upload-url/check) of what startUpload would send:
// { valid, rankCount }, or the ApiError upload-url would answer. It creates nothing, so it
// is retried like a read.
export function checkUpload({ name, files, metadataText, signal, onRetry }) {
  return api("/tracesets/upload-url/check", {
    method: "POST",
    bodyText: uploadRequestText({ name, files, metadataText }),
    idempotent: true,
    signal,
    onRetry,
  });
}

// The census before upload (POST /tracesets/upload-url/census): the primary files' first
// bytes, which the service inspects as `tracestore upload` inspects the whole files before
// sending (the same code, the same verdict; `unknown` for a file whose first bytes do not
// tell its rank). At most 1 MiB a file, and 8 MiB in all (fewer a file when there are many),
// so the body stays under the service's JSON limit. Creates nothing: retried like a read.
export const CENSUS_HEAD_BYTES = 1024 * 1024;
const CENSUS_BYTES = 8 * 1024 * 1024;

function base64Of(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

export async function censusBeforeUpload({ files, metadataText, signal }) {
  const primary = files.filter((f) => f.role === "primary");
  const each = Math.min(CENSUS_HEAD_BYTES, Math.floor(CENSUS_BYTES / Math.max(primary.length, 1)));
  const members = [];
  for (const f of primary) {
    const head = new Uint8Array(await f.file.slice(0, each).arrayBuffer());
    members.push(`{"name":${JSON.stringify(f.name)},"size":${f.size},"head":"${base64Of(head)}"}`);
  }
  return api("/tracesets/upload-url/census", {
    method: "POST",
    bodyText: `{"files":[${members.join(",")}],"workloadMetadata":${metadataText ?? "null"}}`,
    idempotent: true,
    signal,
  });
}

// POST /tracesets/upload-url: the upload's state is saved before any part goes. Returns
// { session, state }. Sent once: a failure after it went may have created the traceset
// (UnansweredError, worded here for the person who pressed Upload).
export async function startUpload({ name, files, metadataText, signal, onRetry }) {
  let session;
  try {
    session = await api("/tracesets/upload-url", {
      method: "POST",
      bodyText: uploadRequestText({ name, files, metadataText }),
      signal,
      onRetry,
    });
  } catch (error) {
    if (!(error instanceof UnansweredError)) throw error;
    throw new UnansweredError(
      `The request to start the upload went out but no answer came back (${error.cause?.message}). ` +
        `The service may have created the traceset ${JSON.stringify(name)} (status uploading): ` +
        "look for it in the list before you upload again. The page did not send the request twice.",
    );
  }
  const state = {
    uploadId: session.uploadId,
    tracesetId: session.tracesetId,
    name,
    startedAt: new Date().toISOString(),
    files: files.map(({ name: n, size, lastModified, role }) => ({ name: n, size, lastModified, role })),
    etags: {},
  };
  saveUpload(state);
  return { session, state };
}

// GET /tracesets/upload-url/{id}: the session as the service holds it (parts received, URLs
// for the first missing ones); with file, that file's URLs from fromPart on.
export function resumeSession(uploadId, { file, fromPart, signal, onRetry } = {}) {
  const query = file === undefined ? undefined : { file, fromPart };
  return api(`/tracesets/upload-url/${encodeURIComponent(uploadId)}`, { query, signal, onRetry });
}

// The file's part size: every part but the last has it (uploader._part_size).
function partSizeOf(entry, fallback) {
  const sizes = [...entry.parts, ...(entry.receivedParts ?? [])].map((p) => p.size);
  return Math.max(0, ...sizes) || fallback || 1;
}

// XMLHttpRequest as fetch: a Response back, onSent(bytes) as the body goes.
function sendWithProgress(onSent) {
  return (url, init) =>
    new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open(init.method, url);
      for (const [key, value] of Object.entries(init.headers ?? {})) xhr.setRequestHeader(key, value);
      xhr.upload.onprogress = (event) => onSent(event.loaded);
      xhr.onload = () => {
        const headers = new Headers();
        for (const line of xhr.getAllResponseHeaders().trim().split(/[\r\n]+/)) {
          const at = line.indexOf(":");
          if (at > 0) headers.append(line.slice(0, at).trim(), line.slice(at + 1).trim());
        }
        const empty = [204, 205, 304].includes(xhr.status);
        resolve(new Response(empty ? null : xhr.response, { status: xhr.status, headers }));
      };
      xhr.onerror = () => reject(new TypeError("the connection failed"));
      xhr.ontimeout = () => reject(new TypeError("the request timed out"));
      init.signal?.addEventListener("abort", () => {
        xhr.abort();
        reject(init.signal.reason);
      });
      xhr.send(init.body);
    });
}

// A file's SHA-256, read in order. A small file, in a secure context, goes to crypto.subtle
// (native, faster; it takes one whole buffer); any other through our incremental SHA-256.
export async function fileSha256(file, signal) {
  if (file.size <= HASH_CHUNK && globalThis.crypto?.subtle) {
    const digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
    return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
  }
  const sha = new Sha256();
  for (let at = 0; at < file.size; at += HASH_CHUNK) {
    signal?.throwIfAborted();
    sha.update(await file.slice(at, at + HASH_CHUNK).arrayBuffer());
  }
  return sha.hexDigest();
}

function unreadable(file, error) {
  return new Error(
    `${file.name} could not be read (${error.message}); it may have changed since it was ` +
      "picked: pick it again",
  );
}

// Send the parts the service does not hold and complete the upload; the traceset.
//   session: the start or resume answer; files: the picked files (checked to be its files);
//   state: the saved state (its ETags are kept up to date); onProgress({files, done, total});
//   onWaiting(text | null): a retry is waiting, or no longer.
export async function sendAndComplete({ session, files, state, onProgress, onWaiting, signal }) {
  const local = new Map(files.map((f) => [f.name, f]));
  const stop = new AbortController();
  const abort = () => stop.abort(signal.reason);
  signal?.addEventListener("abort", abort);
  const progress = new Map(session.files.map((e) => [e.name, { done: 0, size: e.size }]));
  const inflight = new Map();
  const total = session.files.reduce((sum, e) => sum + e.size, 0);
  const report = () => {
    let done = 0;
    const perFile = {};
    for (const [name, p] of progress) {
      let sending = 0;
      for (const [key, sent] of inflight) if (key.startsWith(name + "\u0000")) sending += sent;
      perFile[name] = { done: Math.min(p.size, p.done + sending), size: p.size };
      done += perFile[name].done;
    }
    onProgress?.({ files: perFile, done, total });
  };
  const etags = {};
  const jobs = [];
  for (const entry of session.files) {
    const file = local.get(entry.name);
    if (!file) throw new Error(`Upload ${session.uploadId} holds ${entry.name}, which the files picked do not`);
    if (file.size !== entry.size) {
      throw new Error(`${entry.name} is ${file.size} bytes; the upload declared ${entry.size} bytes`);
    }
    const partSize = partSizeOf(entry, session.partSize);
    const count = Math.max(1, Math.ceil(entry.size / partSize));
    const urls = new Map(entry.parts.map((p) => [p.partNumber, p.url]));
    etags[entry.name] = {};
    for (const held of entry.receivedParts ?? []) {
      etags[entry.name][held.partNumber] = held.etag;
      progress.get(entry.name).done += held.size;
    }
    for (let number = 1; number <= count; number++) {
      if (etags[entry.name][number] !== undefined) continue;
      const offset = (number - 1) * partSize;
      jobs.push({
        file,
        number,
        offset,
        size: Math.min(partSize, entry.size - offset),
        url: urls.get(number) ?? "",
      });
    }
  }
  state.etags = etags;
  saveUpload(state);
  // Part-major, as the CLI sends: part 1 of every file, then part 2, ...
  jobs.sort((a, b) => a.number - b.number);
  report();

  const fresh = new Map();
  const freshUrl = async (job) => {
    const key = `${job.file.name}\u0000${job.number}`;
    if (!fresh.has(key)) {
      const page = await resumeSession(session.uploadId, {
        file: job.file.name,
        fromPart: job.number,
        signal: stop.signal,
      });
      for (const entry of page.files) {
        for (const part of entry.parts) fresh.set(`${entry.name}\u0000${part.partNumber}`, part.url);
      }
    }
    const url = fresh.get(key);
    fresh.delete(key);
    if (!url) throw new Error(`Part ${job.number} of ${job.file.name} has no URL`);
    return url;
  };

  // A part URL of another origin is the bucket's (S3): a browser that gets no answer from it
  // is most often refused by its CORS rule, which only the deployment can fix.
  const elsewhere = (url) => {
    const origin = new URL(url, location.href).origin;
    if (origin === location.origin) return "";
    return ` to the bucket at ${origin} (if this lasts, its CORS rule must allow PUT from ${location.origin} and expose ETag: docs/deploy.md)`;
  };

  const waiting = (what) => (attempt, delay) =>
    onWaiting?.(`${what}: no answer yet; trying again in ${(delay / 1000).toFixed(1)} s (try ${attempt + 1})`);

  const sendPart = async (job) => {
    const key = `${job.file.name}\u0000${job.number}`;
    let url = job.url || (await freshUrl(job));
    let refreshed = false;
    for (let attempt = 0; ; attempt++) {
      inflight.set(key, 0);
      const bucket = elsewhere(url);
      const answer = await fetchRetrying(
        url,
        {
          method: "PUT",
          headers: { "Content-Type": "application/octet-stream" },
          body: job.file.file.slice(job.offset, job.offset + job.size),
        },
        {
          signal: stop.signal,
          onRetry: waiting(`Sending ${job.file.name}${bucket}`),
          send: sendWithProgress((sent) => {
            inflight.set(key, sent);
            report();
          }),
        },
      ).catch((error) => {
        // Not "the service did not answer": the bucket did not, as far as the page can tell.
        if (bucket && error instanceof NetworkError && !stop.signal.aborted) {
          throw new NetworkError(`Sending ${job.file.name}${bucket}: no answer (${error.message.replace(/^The service did not answer: /, "")})`);
        }
        throw error;
      });
      inflight.delete(key);
      if (answer.status === 200) {
        onWaiting?.(null);
        etags[job.file.name][job.number] = (answer.headers.get("etag") ?? "").replaceAll('"', "");
        progress.get(job.file.name).done += job.size;
        saveUpload(state);
        report();
        return;
      }
      if (answer.status === 403 && !refreshed) {
        // The URL expired during a long upload: the resume route signs a fresh one.
        url = await freshUrl(job);
        refreshed = true;
      } else if (PART_RETRY_STATUSES.includes(answer.status) && attempt < PART_RETRY_DELAYS_MS.length) {
        waiting(`Sending ${job.file.name}`)(attempt + 1, PART_RETRY_DELAYS_MS[attempt]);
        await sleep(PART_RETRY_DELAYS_MS[attempt], stop.signal);
      } else {
        throw await errorOf(answer);
      }
      report();
    }
  };

  const hashes = {};
  const hashing = (async () => {
    for (const entry of session.files) {
      const file = local.get(entry.name);
      try {
        hashes[entry.name] = await fileSha256(file.file, stop.signal);
      } catch (error) {
        if (stop.signal.aborted) throw error;
        throw unreadable(file, error);
      }
    }
  })();
  const workers = Array.from({ length: Math.min(PUT_CONCURRENCY, jobs.length) }, async () => {
    while (jobs.length) {
      const job = jobs.shift();
      try {
        await sendPart(job);
      } catch (error) {
        if (error instanceof ApiError || stop.signal.aborted) throw error;
        if (error?.name === "NotReadableError") throw unreadable(job.file, error);
        throw error;
      }
    }
  });
  try {
    // The first failure stops the rest: what was sent is saved, a later try resumes it.
    await Promise.all([hashing, ...workers].map((p) => p.catch((e) => {
      stop.abort(e);
      throw e;
    })));
  } finally {
    signal?.removeEventListener("abort", abort);
    inflight.clear();
  }
  onWaiting?.(null);
  const traceset = await complete(session.uploadId, etags, hashes, { signal, onRetry: waiting("Completing") });
  forgetUpload(session.uploadId);
  return traceset;
}

// POST /tracesets/upload-url/complete; a 409 while our own earlier attempt (cut off by a
// network error) still runs is waited out, as the CLI does.
async function complete(uploadId, etags, hashes, { signal, onRetry }) {
  const files = Object.entries(etags).map(([name, parts]) => ({
    name,
    parts: Object.entries(parts)
      .map(([number, etag]) => ({ partNumber: Number(number), etag }))
      .sort((a, b) => a.partNumber - b.partNumber),
    sha256: hashes[name],
  }));
  const deadline = Date.now() + 10 * 60 * 1000;
  for (;;) {
    try {
      return await api("/tracesets/upload-url/complete", {
        method: "POST",
        body: { uploadId, files },
        idempotent: true, // a completed session answers its traceset again
        signal,
        onRetry,
      });
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 409 || Date.now() > deadline) throw error;
      await sleep(1000, signal);
    }
  }
}

// Continue a saved upload with the files picked again: the service's view of what it holds
// wins (parts it holds are not sent again). A session completed meanwhile answers its traceset.
export async function continueUpload({ state, files, onProgress, onWaiting, signal }) {
  const problem = differences(state, files);
  if (problem) throw new Error(problem);
  const onRetry = (attempt, delay) =>
    onWaiting?.(`Asking the service: no answer yet; trying again in ${(delay / 1000).toFixed(1)} s`);
  const session = await resumeSession(state.uploadId, { signal, onRetry });
  if (session.state === "completed") {
    forgetUpload(state.uploadId);
    return api(`/tracesets/${encodeURIComponent(session.tracesetId)}`, { signal });
  }
  return sendAndComplete({ session, files, state, onProgress, onWaiting, signal });
}
