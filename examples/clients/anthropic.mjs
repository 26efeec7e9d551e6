// The official Anthropic SDK pointed at the agentgate gateway:
//
//   AGENTGATE_BASE_URL=https://inference.example.com/custom/conn_… \
//   AGENTGATE_API_KEY=ag_sk_… MODEL=claude-sonnet node anthropic.mjs
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.env.AGENTGATE_BASE_URL, apiKey: process.env.AGENTGATE_API_KEY, maxRetries: 0 });
const model = process.env.MODEL;
const out = {};

const msg = await client.messages.create({ model, max_tokens: 64, messages: [{ role: "user", content: "Say hello" }] });
out.messages = { text: msg.content[0].text, model: msg.model, usage: msg.usage };

let text = "";
const stream = client.messages.stream({ model, max_tokens: 64, messages: [{ role: "user", content: "Say hello" }] });
stream.on("text", (t) => { text += t; });
const final = await stream.finalMessage();
out.messagesStream = { text, usage: final.usage };

// Claude Code counts tokens (for /context and more) with the token-counting
// beta header; the gateway forwards it like a message.
const count = await client.messages.countTokens(
  { model, messages: [{ role: "user", content: "Say hello" }] },
  { headers: { "anthropic-beta": "token-counting-2024-11-01" } },
);
out.countTokens = count;

// Model discovery (what Claude Code's gateway model discovery calls):
// the gateway answers from its store, so only through the gateway.
if (process.env.LIST_MODELS) {
  const ids = [];
  for await (const m of client.models.list({ limit: 1000 })) ids.push(m.id);
  out.models = ids;
}

if (process.env.DISABLED_MODEL) {
  try {
    await client.messages.create({ model: process.env.DISABLED_MODEL, max_tokens: 8, messages: [{ role: "user", content: "x" }] });
    out.disabled = { error: null };
  } catch (e) {
    out.disabled = { error: e.constructor.name, status: e.status, message: e.message };
  }
}
console.log(JSON.stringify(out));
