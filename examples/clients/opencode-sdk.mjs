// The released OpenCode SDK (@opencode-ai/sdk, client.v2) against an
// OpenCode-style instance server: every call it exposes for sessions,
// messages, history, models, providers, commands and skills, with the
// same inputs; prints each call's status, error tag and the shape of its
// answer (field names and types) as JSON.
//
//   OPENCODE_URL=http://127.0.0.1:4096 OPENCODE_PASSWORD=… OPENCODE_DIR=/path/to/project \
//   MODEL_PROVIDER=agentgate MODEL_ID=gpt-4o node opencode-sdk.mjs
import { createOpencodeClient } from "@opencode-ai/sdk/v2";

const dir = process.env.OPENCODE_DIR;
const auth = "Basic " + Buffer.from("opencode:" + process.env.OPENCODE_PASSWORD).toString("base64");
const client = createOpencodeClient({ baseUrl: process.env.OPENCODE_URL, headers: { Authorization: auth }, directory: dir }).v2;
const model = { providerID: process.env.MODEL_PROVIDER, id: process.env.MODEL_ID };
const location = { directory: dir };
const msgID = "msg_conformance" + Date.now().toString(36);

// shape is a value's field names and types: objects by key, arrays by the
// union of their elements' shapes.
function merge(a, b) {
  if (a && b && typeof a === "object" && typeof b === "object" && !Array.isArray(a) && !Array.isArray(b)) {
    const out = { ...a };
    for (const k of Object.keys(b)) out[k] = k in out ? merge(out[k], b[k]) : b[k];
    return out;
  }
  if (Array.isArray(a) && Array.isArray(b)) return [a[0] === "empty" ? b[0] : b[0] === "empty" ? a[0] : merge(a[0], b[0])];
  return b === "null" ? a : b;
}

function shape(v) {
  if (v === null || v === undefined) return "null";
  if (Array.isArray(v)) {
    let merged = "empty";
    for (const x of v) merged = merged === "empty" ? shape(x) : merge(merged, shape(x));
    return [merged];
  }
  if (typeof v === "object") {
    const out = {};
    for (const k of Object.keys(v).sort()) out[k] = shape(v[k]);
    return out;
  }
  return typeof v;
}

const out = {};
async function record(name, p) {
  const r = await p;
  const body = r.data ?? r.error;
  out[name] = { status: r.response?.status ?? 0, tag: r.error?._tag ?? null, shape: shape(body) };
  return r.data;
}

await record("health.get", client.health.get());
await record("location.get", client.location.get({ location }));
await record("agent.list", client.agent.list({ location }));
const created = await record("session.create", client.session.create({ agent: "build", model, location }));
const sid = created?.data?.id ?? created?.id;
await record("session.get", client.session.get({ sessionID: sid }));
await record("session.get.missing", client.session.get({ sessionID: "ses_doesnotexist" }));
await record("session.list", client.session.list({ limit: 5 }));
await record("session.list.badCursor", client.session.list({ cursor: "not-a-cursor" }));
await record("session.switchAgent", client.session.switchAgent({ sessionID: sid, agent: "plan" }));
await record("session.switchModel", client.session.switchModel({ sessionID: sid, model }));
await record("session.prompt", client.session.prompt({ sessionID: sid, id: msgID, prompt: { text: "say hello" } }));
await record("session.prompt.duplicate", client.session.prompt({ sessionID: sid, id: msgID, prompt: { text: "again" } }));
await record("session.prompt.missing", client.session.prompt({ sessionID: "ses_doesnotexist", prompt: { text: "x" } }));
// Until the agent loop is idle (wait answers 503 on the released server).
for (let i = 0; i < 200; i++) {
  const a = await client.session.active();
  const active = a.data?.data ?? {};
  if (!(sid in active) && i > 2) break;
  await new Promise((r) => setTimeout(r, 100));
}
await record("session.active", client.session.active());
const msgs = await record("session.messages", client.session.messages({ sessionID: sid, limit: 50 }));
await record("session.messages.badCursor", client.session.messages({ sessionID: sid, cursor: "bad" }));
const first = (msgs?.data ?? [])[0];
if (first) await record("session.message", client.session.message({ sessionID: sid, messageID: first.id }));
await record("session.message.missing", client.session.message({ sessionID: sid, messageID: "msg_doesnotexist" }));
await record("session.history", client.session.history({ sessionID: sid, limit: 100 }));
await record("session.context", client.session.context({ sessionID: sid }));
await record("session.interrupt", client.session.interrupt({ sessionID: sid }));
await record("model.list", client.model.list({ location }));
await record("provider.list", client.provider.list({ location }));
await record("provider.get.missing", client.provider.get({ providerID: "nope", location }));
await record("command.list", client.command.list({ location }));
await record("skill.list", client.skill.list({ location }));
await record("fs.list", client.fs.list({ location }));
await record("fs.find", client.fs.find({ location, query: "readme" }));
await record("permission.request.list", client.permission.request.list({ location }));
await record("question.request.list", client.question.request.list({ location }));

// The event stream: its first frames.
const ac = new AbortController();
const events = await client.event.subscribe({ signal: ac.signal });
const seen = [];
for await (const ev of events.stream) {
  seen.push(ev);
  if (seen.length >= 1) break;
}
ac.abort();
out["event.subscribe"] = { status: 200, tag: null, shape: shape(seen[0]) };
console.log(JSON.stringify(out));
process.exit(0);
