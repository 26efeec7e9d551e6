// The official Google Gen AI SDK pointed at the agentgate gateway:
//
//   AGENTGATE_BASE_URL=https://inference.example.com/custom/conn_… \
//   AGENTGATE_API_KEY=ag_sk_… MODEL=gemini-pro node google.mjs
import { GoogleGenAI } from "@google/genai";

const ai = new GoogleGenAI({ apiKey: process.env.AGENTGATE_API_KEY, httpOptions: { baseUrl: process.env.AGENTGATE_BASE_URL } });
const model = process.env.MODEL;
const out = {};

const res = await ai.models.generateContent({ model, contents: "Say hello" });
out.generate = { text: res.text, usage: res.usageMetadata };

let text = "";
for await (const chunk of await ai.models.generateContentStream({ model, contents: "Say hello" })) text += chunk.text ?? "";
out.generateStream = { text };

// Gemini CLI counts tokens of prompts with files.
const count = await ai.models.countTokens({ model, contents: "Say hello" });
out.countTokens = { totalTokens: count.totalTokens };

// models.list() is answered by the gateway from its store: only through it.
if (process.env.LIST_MODELS) {
  const names = [];
  for await (const m of await ai.models.list()) names.push(m.name);
  out.models = names;
}

if (process.env.DISABLED_MODEL) {
  try {
    await ai.models.generateContent({ model: process.env.DISABLED_MODEL, contents: "x" });
    out.disabled = { error: null };
  } catch (e) {
    out.disabled = { error: e.constructor.name, status: e.status, message: e.message };
  }
}
console.log(JSON.stringify(out));
