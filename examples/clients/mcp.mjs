// The official MCP SDK's client over Streamable HTTP against the agentgate
// Console's MCP server:
//
//   MCP_URL=https://console.example.com/mcp AGENTGATE_API_KEY=ag_sk_… node mcp.mjs
//
// (ORG sets x-org-id, which a person's access token needs when its sign-in
// is bound to no workspace.) Prints what it saw as JSON.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const headers = { Authorization: `Bearer ${process.env.AGENTGATE_API_KEY}` };
if (process.env.ORG) headers["x-org-id"] = process.env.ORG;
const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), { requestInit: { headers } });
const client = new Client({ name: "agentgate-example", version: "1.0.0" });
await client.connect(transport);
const out = { server: client.getServerVersion(), sessionId: transport.sessionId };
out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args });
  return { isError: r.isError ?? false, structured: r.structuredContent ?? null, text: r.content?.[0]?.text ?? "" };
};
out.models = await call("workspace_models", {});
out.budget = await call("my_budget", {});
out.usage = await call("my_usage", { days: 7 });
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
