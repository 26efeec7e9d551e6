// agentgate's plugin host: runs one location's OpenCode plugins in Bun
// (in the instance's sandbox) and answers the instance server over stdio.
// Requests come on stdin, one JSON object per line ({id, method, params});
// answers ({id, result} or {id, error}) go to stdout, each line starting
// with MARK, so that whatever a plugin prints (console output goes to
// stderr; a stray stdout write is told apart by the missing mark) never
// passes for an answer. The plugins' client requests go out the same way
// ({rpc: "http", id, req}) and their answers come in on stdin ({rpc:
// "http", id, res}).
import { pathToFileURL } from "node:url";
import readline from "node:readline";

const MARK = "\u001eagentgate-host ";
const modules = process.env.AGENTGATE_PLUGIN_MODULES || "";
const write = process.stdout.write.bind(process.stdout);
const send = (msg) => write(MARK + JSON.stringify(msg) + "\n");
const toErr = (...a) => process.stderr.write(a.map((x) => (typeof x === "string" ? x : Bun.inspect(x))).join(" ") + "\n");
for (const k of ["log", "info", "debug", "warn", "error", "trace"]) console[k] = toErr;

// Bare imports a plugin cannot resolve from its own directory resolve
// through NODE_PATH: the configured node_modules, then the host's own
// small @opencode-ai/plugin (tool() and a JSON-Schema tool.schema). The
// server sets it, and disables Bun's auto-install (bunfig.toml).
function fromModules(spec) {
  if (!modules) return null;
  try { return Bun.resolveSync(spec, modules); } catch { return null; }
}

// A JSON Schema from a tool's args: the host's tool.schema values carry
// theirs; zod schemas convert with zod's own toJSONSchema (zod 4) when the
// modules have zod, else by reading their definition.
let zod = null;
async function zodModule() {
  if (zod !== null) return zod;
  const p = fromModules("zod");
  zod = p ? await import(pathToFileURL(p).href).catch(() => false) : false;
  return zod;
}
function fromDef(s) {
  if (s && s.__jsonSchema) return s.__jsonSchema;
  const def = s?._zod?.def ?? s?._def;
  if (!def) throw new Error("not a schema");
  let t = String(def.type ?? def.typeName ?? "").replace(/^Zod/, "").toLowerCase();
  const d = s.description ?? def.description;
  const withDesc = (o) => (d ? { ...o, description: d } : o);
  switch (t) {
    case "string": return withDesc({ type: "string" });
    case "number": return withDesc({ type: "number" });
    case "int": case "bigint": return withDesc({ type: "integer" });
    case "boolean": return withDesc({ type: "boolean" });
    case "any": case "unknown": return withDesc({});
    case "null": return withDesc({ type: "null" });
    case "literal": return withDesc({ const: def.value ?? (def.values ?? [])[0] });
    case "enum": return withDesc({ type: "string", enum: Array.isArray(def.values) ? def.values : Object.values(def.entries ?? {}) });
    case "array": return withDesc({ type: "array", items: fromDef(def.element ?? def.type) });
    case "optional": case "default": case "nullable": return withDesc(fromDef(def.innerType));
    case "union": return withDesc({ anyOf: def.options.map(fromDef) });
    case "object": return withDesc(objectSchema(typeof def.shape === "function" ? def.shape() : def.shape));
    case "record": return withDesc({ type: "object", additionalProperties: fromDef(def.valueType) });
  }
  throw new Error(`unsupported schema type ${JSON.stringify(t)}`);
}
function isOptional(s) {
  if (s?.__optional) return true;
  if (typeof s?.isOptional === "function") { try { return s.isOptional(); } catch {} }
  const t = String(s?._zod?.def?.type ?? s?._def?.typeName ?? "");
  return /optional|default/i.test(t);
}
function objectSchema(shape) {
  if (!shape || typeof shape !== "object") throw new Error("args must be an object of schemas");
  const properties = {}, required = [];
  for (const [k, v] of Object.entries(shape)) {
    properties[k] = fromDef(v);
    if (!isOptional(v)) required.push(k);
  }
  const o = { type: "object", properties };
  if (required.length) o.required = required;
  return o;
}
async function toolSchema(args) {
  if (args === undefined) return { type: "object", properties: {} };
  const z = await zodModule();
  if (z && typeof z.toJSONSchema === "function" && Object.values(args).every((v) => v && v._zod)) {
    const s = z.toJSONSchema(z.object(args));
    delete s.$schema;
    return s;
  }
  return objectSchema(args);
}

// Locations: directory → loaded plugins [{id, hooks}].
const locations = new Map();

// The plugins' client talks to the server over stdio (the host has no
// network): its fetch sends each request as a marked {rpc: "http"} line
// and the server answers on stdin. The base URL is never resolved.
const CLIENT_URL = "http://agentgate.plugin";
const MAX_BODY = 4 << 20;
// Requests of the host to the server ({rpc: "http" | "ask"}) wait here
// for their answers; metadata updates ({rpc: "meta"}) are not answered.
const rpcPending = new Map();
let rpcNext = 0;
function rpcCall(kind, req) {
  const id = ++rpcNext;
  return new Promise((resolve, reject) => {
    rpcPending.set(id, resolve);
    try { send({ rpc: kind, id, req }); } catch (e) { rpcPending.delete(id); reject(e); }
  });
}
async function rpcFetch(input, init) {
  const req = input instanceof Request ? input : new Request(input, init);
  const u = new URL(req.url);
  const headers = {};
  req.headers.forEach((v, k) => { headers[k] = v; });
  let body = "";
  if (req.body) {
    const buf = Buffer.from(await req.arrayBuffer());
    if (buf.length > MAX_BODY) throw new Error("request body too large for the plugin host");
    body = buf.toString("base64");
  }
  const res = await rpcCall("http", { method: req.method, url: u.pathname + u.search, headers, body });
  const status = Number(res?.status) || 502;
  const bytes = Buffer.from(String(res?.body ?? ""), "base64");
  const nobody = status === 204 || status === 304 || req.method === "HEAD";
  return new Response(nobody ? null : bytes, { status, headers: res?.headers ?? {} });
}

async function makeClient(p) {
  const sdk = fromModules("@opencode-ai/sdk/client") || fromModules("@opencode-ai/sdk");
  if (!sdk) return null;
  const mod = await import(pathToFileURL(sdk).href);
  const headers = p.auth ? { Authorization: p.auth } : {};
  return mod.createOpencodeClient({ baseUrl: CLIENT_URL, headers, directory: p.directory, fetch: rpcFetch });
}

// serverPlugins are a module's plugin functions, as OpenCode reads them: a
// default export {id?, server, tui?} (the plugin module of newer plugins)
// is one plugin, its server function; otherwise every exported function
// (`async (input, options) => hooks`), and every exported object with a
// server function, is one, each once. The parts of the released contract
// this server does not serve are recorded in unused and reported as not
// used: a v2 plugin object ({id, effect} or {id, setup}), a tui export.
function serverPlugins(mod, unused) {
  const note = (v) => {
    if (typeof v.server !== "function" && (typeof v.effect === "function" || typeof v.setup === "function")) {
      unused[`v2 plugin ${String(v.id ?? "").slice(0, 64)}`.trim()] = "the v2 plugin API (effect or promise) is not served by this server";
    }
    if (v.tui !== undefined && v.tui !== null) unused.tui = "this server has no TUI of its own to extend";
  };
  for (const v of new Set(Object.values(mod))) {
    if (v && typeof v === "object") note(v);
  }
  const d = mod.default;
  if (d && typeof d === "object" && typeof d.server === "function") return [d.server.bind(d)];
  const seen = new Set();
  const out = [];
  for (const v of Object.values(mod)) {
    if (seen.has(v)) continue;
    seen.add(v);
    const fn = typeof v === "function" ? v : v && typeof v === "object" && typeof v.server === "function" ? v.server.bind(v) : null;
    if (fn) out.push(fn);
  }
  return out;
}

async function load(p) {
  // A process serves one location: plugins resolve relative paths (and
  // process.cwd()) in it, as in OpenCode, which runs in the project.
  try { process.chdir(p.directory); } catch {}
  const client = await makeClient(p).catch(() => null);
  const $ = Bun.$.cwd(p.directory);
  let serverUrl;
  try { serverUrl = new URL(p.serverUrl || CLIENT_URL); } catch {}
  const loaded = [];
  const report = [];
  for (const spec of p.plugins) {
    const unused = {};
    const input = { client, project: p.project ?? {}, directory: p.directory, worktree: p.worktree, serverUrl, $,
      experimental_workspace: {
        register(type) { unused[`experimental_workspace.register(${String(type).slice(0, 64)})`] = "this server has no workspace adapters"; },
      } };
    try {
      if (spec.error) throw new Error(spec.error);
      const mod = await import(pathToFileURL(spec.entry).href);
      const hooksList = [];
      for (const fn of serverPlugins(mod, unused)) {
        const hooks = await fn(input, spec.options ?? undefined);
        // A helper a module exports beside its plugin may hand back what
        // it was given: that is no set of hooks.
        if (hooks && typeof hooks === "object" && hooks !== input) hooksList.push(hooks);
      }
      if (hooksList.length === 0 && Object.keys(unused).length === 0) throw new Error("the module exports no plugin function");
      const tools = [];
      const names = new Set();
      for (const hooks of hooksList) {
        for (const [name, def] of Object.entries(hooks.tool ?? {})) {
          if (!/^[a-zA-Z0-9_-]{1,64}$/.test(name)) throw new Error(`tool ${JSON.stringify(name)}: the name must be 1-64 letters, digits, _ or -`);
          if (!def || typeof def.execute !== "function") throw new Error(`tool ${name}: no execute function`);
          let schema;
          try { schema = await toolSchema(def.args); } catch (e) { throw new Error(`tool ${name}: invalid args schema: ${e.message}`); }
          if (!names.has(name)) tools.push({ name, description: String(def.description ?? ""), schema });
          names.add(name);
        }
      }
      const hookNames = [...new Set(hooksList.flatMap((h) => Object.keys(h)))].sort();
      loaded.push({ id: spec.id, hooks: hooksList });
      report.push({ id: spec.id, ok: true, hooks: hookNames, tools, unused });
    } catch (e) {
      report.push({ id: spec.id, ok: false, error: String(e?.message ?? e).slice(0, 2000) });
    }
  }
  locations.set(p.directory, loaded);
  // config hooks see the location's configuration once loaded
  for (const pl of loaded) for (const h of pl.hooks) if (typeof h.config === "function") await Promise.resolve(h.config(p.config ?? {})).catch(() => {});
  return { plugins: report };
}

function find(dir, pluginId) {
  const list = locations.get(dir);
  if (!list) throw new Error("location not loaded");
  return pluginId ? list.filter((p) => p.id === pluginId) : list;
}

// The tool calls running, by the server's call token: their abort
// controllers.
const calls = new Map();
const META_MAX = 64 << 10;

// sendMeta hands the server a tool's metadata({title, metadata}): it
// updates the running tool part. It never throws at the plugin: input that
// is not an object is ignored, metadata that is not JSON or is too large
// is dropped (the server is told why), a title is cut at 1,000 characters.
function sendMeta(call, input) {
  try {
    if (!call || !input || typeof input !== "object") return;
    const req = { call };
    if (input.title !== undefined && input.title !== null) req.title = String(input.title).slice(0, 1000);
    if (input.metadata !== undefined) req.metadata = input.metadata;
    let size = 0;
    try { size = JSON.stringify(req).length; } catch { delete req.metadata; req.dropped = "the metadata is not JSON"; }
    if (size > META_MAX) { delete req.metadata; req.dropped = `the metadata is over ${META_MAX} bytes`; }
    send({ rpc: "meta", id: ++rpcNext, req });
  } catch {}
}

function permissionError(err) {
  const e = new Error(String(err?.message ?? "the permission was refused"));
  e.name = String(err?.name ?? "PermissionRejectedError");
  return e;
}

async function runTool(p) {
  for (const pl of find(p.directory, p.plugin)) {
    for (const h of pl.hooks) {
      const def = h.tool?.[p.name];
      if (!def) continue;
      const ctrl = new AbortController();
      const call = String(p.call ?? "");
      if (call) calls.set(call, ctrl);
      const c = p.context ?? {};
      const ctx = {
        sessionID: c.sessionID, messageID: c.messageID, agent: c.agent, callID: c.callID,
        directory: p.directory, worktree: p.worktree, abort: ctrl.signal,
        metadata(input) { sendMeta(call, input); },
        // ask goes through the server's permission rules and, when they
        // ask, to the user; a refusal is thrown as the released server
        // throws it (PermissionRejectedError, PermissionCorrectedError
        // with the user's feedback, PermissionDeniedError by a rule).
        async ask(input) {
          if (ctrl.signal.aborted) throw permissionError({ name: "AbortError", message: "the tool call was aborted" });
          const req = { call, permission: input?.permission, patterns: input?.patterns, always: input?.always, metadata: input?.metadata ?? {} };
          try { JSON.stringify(req); } catch { throw permissionError({ name: "InvalidAskError", message: "ask: the input is not JSON" }); }
          const res = await rpcCall("ask", req);
          if (!res || res.error) throw permissionError(res?.error ?? { message: "no answer to the permission request" });
        },
      };
      try {
        const out = await def.execute(p.args ?? {}, ctx);
        if (typeof out === "string") return { output: out };
        if (out && typeof out === "object") return { output: String(out.output ?? ""), title: typeof out.title === "string" ? out.title : undefined, metadata: out.metadata };
        return { output: String(out ?? "") };
      } finally {
        calls.delete(call);
      }
    }
  }
  throw new Error(`no plugin defines the tool ${p.name}`);
}

function abortTool(p) {
  const ctrl = calls.get(String(p.call ?? ""));
  if (ctrl) ctrl.abort(new DOMException("The session was interrupted", "AbortError"));
  return {};
}

// What a hook must leave in its output; a hook that leaves anything else
// returned garbage.
const isStrings = (a) => Array.isArray(a) && a.every((x) => typeof x === "string");
const checks = {
  "experimental.chat.messages.transform": (o) => {
    if (!Array.isArray(o.messages)) return "output.messages must be an array of {info, parts}";
    for (const [i, m] of o.messages.entries()) {
      if (!m || typeof m !== "object" || !m.info || typeof m.info !== "object" || !Array.isArray(m.parts)) return `message ${i} is not {info, parts}`;
      if (m.info.role !== "user" && m.info.role !== "assistant") return `message ${i}: role ${JSON.stringify(m.info.role)} is neither user nor assistant`;
      for (const [k, x] of m.parts.entries()) {
        if (!x || typeof x !== "object" || typeof x.type !== "string") return `message ${i} part ${k} has no type`;
        if (x.type === "text" && typeof x.text !== "string") return `message ${i} part ${k}: text is not a string`;
        if (x.type === "tool" && (typeof x.callID !== "string" || !x.callID || typeof x.tool !== "string" || !x.tool || !x.state || typeof x.state !== "object"))
          return `message ${i} part ${k}: a tool part needs callID, tool and state`;
      }
    }
    return true;
  },
  "experimental.chat.system.transform": (o) => isStrings(o.system) || "output.system must be an array of strings",
  "experimental.text.complete": (o) => typeof o.text === "string" || "output.text must be a string",
  "experimental.session.compacting": (o) => (isStrings(o.context) && (o.prompt == null || typeof o.prompt === "string")) ||
    "output.context must be an array of strings and output.prompt a string",
  "experimental.compaction.autocontinue": (o) => typeof o.enabled === "boolean" || "output.enabled must be a boolean",
  "tool.definition": (o) => (typeof o.description === "string" && o.parameters && typeof o.parameters === "object" && !Array.isArray(o.parameters)) ||
    "output.description must be a string and output.parameters a JSON Schema object",
};

// trigger runs a hook of every plugin of the location in load order, each
// seeing the output the one before it left. A plugin whose hook throws,
// or leaves an output that is not what the hook returns (or not JSON),
// leaves the output as it found it and is reported in errors; the next
// plugin goes on.
async function trigger(p) {
  let output = p.output ?? {};
  const errors = [];
  const check = checks[p.name];
  for (const pl of find(p.directory)) {
    for (const h of pl.hooks) {
      const fn = h[p.name];
      if (typeof fn !== "function") continue;
      const before = structuredClone(output);
      try {
        await fn(p.input ?? {}, output);
        const ok = check ? check(output) : true;
        if (ok !== true) throw new Error(`returned garbage: ${ok}`);
        JSON.stringify(output);
      } catch (e) {
        output = before;
        errors.push({ plugin: pl.id, error: String(e?.message ?? e).slice(0, 500) });
      }
    }
  }
  return { output, errors };
}

// definitions runs tool.definition for each tool of a step in one call.
async function definitions(p) {
  const tools = [];
  const errors = [];
  for (const t of p.tools ?? []) {
    const r = await trigger({ directory: p.directory, name: "tool.definition", input: { toolID: t.id },
      output: { description: t.description, parameters: t.parameters } });
    tools.push(r.output);
    for (const e of r.errors) errors.push({ ...e, tool: t.id });
  }
  return { tools, errors };
}

async function onEvent(p) {
  for (const pl of locations.get(p.directory) ?? []) {
    for (const h of pl.hooks) {
      if (typeof h.event !== "function") continue;
      for (const event of p.events ?? [p.event]) Promise.resolve().then(() => h.event({ event })).catch(() => {});
    }
  }
  return {};
}

// unload calls each plugin's dispose hook, then forgets the location.
async function unload(p) {
  for (const pl of locations.get(p.directory) ?? []) {
    for (const h of pl.hooks) if (typeof h.dispose === "function") await Promise.resolve().then(() => h.dispose()).catch(() => {});
  }
  locations.delete(p.directory);
  return {};
}

const methods = { load, tool: runTool, abort: abortTool, trigger, definitions, event: onEvent, unload, ping: async () => ({ pong: true }) };

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on("line", (line) => {
  let req;
  try { req = JSON.parse(line); } catch { return; }
  if (!req || typeof req !== "object") return;
  if (req.rpc) {
    const resolve = rpcPending.get(req.id);
    rpcPending.delete(req.id);
    if (resolve) resolve(req.res);
    return;
  }
  const fn = methods[req.method];
  if (!fn) { send({ id: req.id, error: `unknown method ${req.method}` }); return; }
  Promise.resolve().then(() => fn(req.params ?? {})).then(
    (result) => send({ id: req.id, result }),
    (e) => send({ id: req.id, error: String(e?.message ?? e).slice(0, 2000) }),
  );
});
rl.on("close", () => process.exit(0));
process.on("unhandledRejection", (e) => toErr("plugin host: unhandled rejection:", String(e?.message ?? e)));
send({ id: 0, result: { ready: true, bun: Bun.version } });
