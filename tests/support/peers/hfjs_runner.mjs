// Drive huggingface.js (@huggingface/hub) as a real XET peer against `git xet serve` on loopback.
//
// Reads one JSON batch of jobs on stdin, writes one JSON result on stdout (see tests/support/hfjs_peer.py):
//   direct:   [path]  upload through its own xorb/shard upload code (uploadShards), as commit() does
//   commit:   [path]  upload through its commit flow: the Hub's git side (preupload, commit) is a
//             stub here, LFS batch and xet-write-token go to our server's Hub emulation
//   edit:     [{name, hash, size, splices: [[start, end, insert_path]]}]  commit() of an "edit" of a
//             stored file: it uploads only the re-chunked windows around the splices
//   download: [{hash, size, dest, ranges: [[start, end)]}]  read back with its XetBlob
//   chunk:    [path]  chunk lengths its chunker cuts (to find files hitting its <8 KiB cut)
//   block_before_xorb_ms: N  block the event loop for N ms before its first xorb POST, as its chunking
//             of a large file does between the dedup query and that POST
// Every request goes through `guardedFetch`, which refuses anything not on 127.0.0.1.
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync, openAsBlob } from "node:fs";
import { createRequire, Module } from "node:module";
import { dirname } from "node:path";

const PKG_DIR = process.env.HFJS_PACKAGE_DIR;
const require = createRequire(`${PKG_DIR}/`);

/** The package bundle, plus the internal upload/chunk functions its public API does not export. */
function loadHub() {
  const file = require.resolve("@huggingface/hub");
  const source = readFileSync(file, "utf8");
  const internals = ["uploadShards", "XetBlob", "createXorbs"];
  for (const name of internals) {
    if (!new RegExp(`(function\\*?|class|var) ${name}\\b`).test(source)) {
      throw new Error(`${file} has no ${name}: the pinned @huggingface/hub changed, update tests/peers/hfjs_runner.mjs`);
    }
  }
  const mod = new Module(file, null);
  mod.filename = file;
  mod.paths = Module._nodeModulePaths(dirname(file));
  mod._compile(`${source}\nmodule.exports.__peer = { ${internals.join(", ")} };\n`, file);
  return mod.exports;
}

const hub = loadHub();
const jobs = JSON.parse(readFileSync(0, "utf8"));
const requests = [];

async function guardedFetch(input, init = {}) {
  const url = new URL(typeof input === "string" ? input : input.url);
  if (url.hostname !== "127.0.0.1") {
    throw new Error(`refusing a request to ${url.host}: the peer may only talk to 127.0.0.1`);
  }
  if (jobs.block_before_xorb_ms && (init.method ?? "GET") === "POST" && url.pathname.startsWith("/v1/xorbs/")) {
    const until = Date.now() + jobs.block_before_xorb_ms;
    jobs.block_before_xorb_ms = 0; // once
    while (Date.now() < until) {
      // busy: no timer, no socket event runs meanwhile
    }
  }
  const response = await fetch(input, init);
  requests.push(`${init.method ?? "GET"} ${url.pathname} ${response.status}`);
  return response;
}

async function fileSource(path) {
  const data = readFileSync(path);
  return { path, content: await openAsBlob(path), sha256: createHash("sha256").update(data).digest("hex") };
}

/** uploadShards: the same xorb and shard code commit() runs, fed directly with a CAS token. */
async function directUpload(paths) {
  const xetParams = {
    casUrl: jobs.cas_url,
    accessToken: jobs.write_token,
    expiresAt: new Date(Date.now() + 3600 * 1000),
    sessionId: "hfjs-peer",
    refreshWriteTokenUrl: `${jobs.hub_url}/api/models/${jobs.repo}/xet-write-token/main`,
  };
  async function* source() {
    for (const path of paths) yield await fileSource(path);
  }
  const files = [];
  for await (const event of hub.__peer.uploadShards(source(), { fetch: guardedFetch, xetParams, repo: { type: "model", name: jobs.repo }, rev: "main" })) {
    if (event.event === "file") files.push({ path: event.path, xet_hash: event.xetHash, sha256: event.sha256 });
  }
  return files;
}

/**
 * commit(): preupload and commit are the Hub's git side, which our server does not have; they are
 * answered here. The user token goes in by this fetch, not as `accessToken`: huggingface.js
 * insists that one starts with "hf_", a Hub convention our server's tokens do not follow.
 */
async function commitUpload(paths, edits) {
  const commits = [];
  const hubFetch = async (input, init = {}) => {
    const url = new URL(typeof input === "string" ? input : input.url);
    if (url.pathname.endsWith("/preupload/main")) {
      requests.push(`POST ${url.pathname} stub`);
      const body = JSON.parse(init.body);
      return Response.json({ files: body.files.map((f) => ({ path: f.path, uploadMode: "lfs" })) });
    }
    if (url.pathname.endsWith("/commit/main")) {
      requests.push(`POST ${url.pathname} stub`);
      commits.push(String(init.body).split("\n").map((line) => JSON.parse(line)));
      return Response.json({ commitOid: "0".repeat(40), commitUrl: `${jobs.hub_url}/commit` });
    }
    const headers = new Headers(init.headers);
    if (url.origin === new URL(jobs.hub_url).origin && !headers.has("authorization")) {
      headers.set("authorization", `Bearer ${jobs.user_token}`);
    }
    return guardedFetch(input, { ...init, headers });
  };
  const operations = [];
  for (const path of paths ?? []) operations.push({ operation: "addOrUpdate", path: path.split("/").pop(), content: await openAsBlob(path) });
  for (const edit of edits ?? []) {
    const originalContent = xetBlob(edit.hash, edit.size);
    const splices = [];
    for (const [start, end, insertPath] of edit.splices) splices.push({ start, end, content: await openAsBlob(insertPath) });
    operations.push({ operation: "edit", path: edit.name, originalContent, edits: splices });
  }
  const result = await hub.commit({ repo: { type: "model", name: jobs.repo }, operations, title: "peer upload", hubUrl: jobs.hub_url, fetch: hubFetch, useXet: true });
  const lfsFiles = commits.flat().filter((entry) => entry.key === "lfsFile").map((entry) => entry.value);
  return { commit_oid: result?.commit?.oid ?? null, lfs_files: lfsFiles };
}

async function blobBytes(blob) {
  return Buffer.from(await blob.arrayBuffer());
}

/** A XetBlob of a stored file, seeded with a CAS read token (as the Hub's download path hands it one). */
function xetBlob(hash, size) {
  const readToken = { accessToken: jobs.read_token, exp: Math.floor(Date.now() / 1000) + 3600, casUrl: jobs.cas_url };
  const refreshUrl = `${jobs.hub_url}/api/models/${jobs.repo}/xet-read-token/main`;
  return new hub.__peer.XetBlob({ fetch: guardedFetch, hash, size, refreshUrl, readToken });
}

async function download(items) {
  for (const item of items) {
    const blob = xetBlob(item.hash, item.size);
    writeFileSync(item.dest, await blobBytes(blob));
    for (const [i, [start, end]] of (item.ranges ?? []).entries()) {
      writeFileSync(`${item.dest}.range${i}`, await blobBytes(blob.slice(start, end)));
    }
  }
}

/** Chunk lengths its chunker cuts, from its own createXorbs; its one dedup query is answered 404 here. */
async function chunkLengths(path) {
  async function* source() {
    yield await fileSource(path);
  }
  const params = {
    fetch: async () => new Response(null, { status: 404 }),
    xetParams: { casUrl: "http://127.0.0.1", accessToken: "unused", expiresAt: new Date(Date.now() + 3600e3) },
  };
  const lengths = [];
  for await (const event of hub.__peer.createXorbs(source(), params)) {
    if (event.event === "xorb") lengths.push(...event.chunks.map((c) => c.length));
  }
  return lengths;
}

const out = { direct: [], commit: null, chunks: {}, requests };
if (jobs.direct?.length) out.direct = await directUpload(jobs.direct);
if (jobs.commit?.length || jobs.edit?.length) out.commit = await commitUpload(jobs.commit, jobs.edit);
if (jobs.download?.length) await download(jobs.download);
for (const path of jobs.chunk ?? []) out.chunks[path] = await chunkLengths(path);
process.stdout.write(JSON.stringify(out));
