// Device sign-in (RFC 8628) against the agentgate Console with the npm
// openid-client v6, configured only with the Console's base URL, as a CLI
// would:
//
//   AGENTGATE_CONSOLE_URL=https://console.example.com node device.mjs
//
// It prints one JSON line per step, and after each of the steps "tokens"
// and "refreshed" it waits for a line on standard input before it goes on
// (so that whoever drives it can check the tokens first):
//
//   {"step":"device", user_code, verification_uri, verification_uri_complete, expires_in, interval}
//   {"step":"tokens", access_token, refresh_token, token_type, expires_in, org_id}
//   {"step":"refreshed", …the same fields…}            (client.refreshTokenGrant)
//   {"step":"reuse", error, status, error_description} (the first refresh token again)
//
// A failure prints {"step":"error", name, code, error, status, message} and
// exits 1.
import * as client from "openid-client";
import { createInterface } from "node:readline";

const base = (process.env.AGENTGATE_CONSOLE_URL ?? "").replace(/\/+$/, "");
const clientId = process.env.CLIENT_ID || "agentgate-cli";
const print = (v) => process.stdout.write(JSON.stringify(v) + "\n");

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function goOn() {
  const { done } = await lines.next();
  if (done) throw new Error("standard input closed");
}

const tokenFields = (t) => ({
  access_token: t.access_token,
  refresh_token: t.refresh_token,
  token_type: t.token_type,
  expires_in: t.expires_in,
  org_id: t.org_id,
});

try {
  const config = new client.Configuration(
    {
      issuer: base,
      device_authorization_endpoint: base + "/auth/device/code",
      token_endpoint: base + "/auth/device/token",
    },
    clientId,
  );
  // Plain HTTP on the loopback interface, for the tests.
  client.allowInsecureRequests(config);

  const da = await client.initiateDeviceAuthorization(config, { supports_org_scope: "true" });
  print({
    step: "device",
    user_code: da.user_code,
    verification_uri: da.verification_uri,
    verification_uri_complete: da.verification_uri_complete,
    expires_in: da.expires_in,
    interval: da.interval,
  });

  const tokens = await client.pollDeviceAuthorizationGrant(config, da);
  print({ step: "tokens", ...tokenFields(tokens) });
  await goOn();

  const refreshed = await client.refreshTokenGrant(config, tokens.refresh_token);
  print({ step: "refreshed", ...tokenFields(refreshed) });
  await goOn();

  try {
    await client.refreshTokenGrant(config, tokens.refresh_token);
    print({ step: "reuse", error: null });
  } catch (e) {
    print({ step: "reuse", name: e.name, error: e.error ?? null, status: e.status ?? null, error_description: e.error_description ?? null });
  }
  process.exit(0);
} catch (e) {
  print({ step: "error", name: e?.name, code: e?.code, error: e?.error, status: e?.status, message: String(e?.message ?? e) });
  process.exit(1);
}
