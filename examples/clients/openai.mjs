// The official OpenAI SDK pointed at the agentgate gateway, configured only
// with a base URL and a workspace key, as a user would:
//
//   AGENTGATE_BASE_URL=https://inference.example.com/custom/conn_… \
//   AGENTGATE_API_KEY=ag_sk_… MODEL=gpt-4o node openai.mjs
//
// It prints one JSON object with what each call returned.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.AGENTGATE_BASE_URL, apiKey: process.env.AGENTGATE_API_KEY, maxRetries: 0 });
const model = process.env.MODEL;
const out = {};

const chat = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Say hello" }] });
out.chat = { text: chat.choices[0].message.content, model: chat.model, usage: chat.usage };

let text = "";
const stream = await client.chat.completions.create({ model, stream: true, messages: [{ role: "user", content: "Say hello" }] });
for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
out.chatStream = { text };

const resp = await client.responses.create({ model, input: "Say hello" });
out.responses = { text: resp.output_text, usage: resp.usage };

text = "";
const rstream = await client.responses.create({ model, input: "Say hello", stream: true });
for await (const ev of rstream) if (ev.type === "response.output_text.delta") text += ev.delta;
out.responsesStream = { text };

// models.list() is answered by the gateway from its store: only through it.
if (process.env.LIST_MODELS) {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  out.models = ids;
}

if (process.env.DISABLED_MODEL) {
  try {
    await client.chat.completions.create({ model: process.env.DISABLED_MODEL, messages: [{ role: "user", content: "x" }] });
    out.disabled = { error: null };
  } catch (e) {
    out.disabled = { error: e.constructor.name, status: e.status, message: e.message };
  }
}
console.log(JSON.stringify(out));
