// Drives the agentgate Console's web pages in Debian's Chromium with npm
// playwright-core (no bundled browser download), as a person would: it
// fills the forms and clicks the buttons. The e2e browser tests run it:
//
//   AGENTGATE_CONSOLE_URL=http://127.0.0.1:8080 AGENTGATE_EMAIL=… AGENTGATE_PASSWORD=… \
//     node browser.mjs <scenario>
//
// Scenarios:
//   device  Open VERIFICATION_URI (a verification_uri_complete, relative to
//           the Console or whole), sign in when sent to the sign-in page,
//           check that the page shows USER_CODE and the client (and read
//           the client's name, when and from where the sign-in started),
//           pick WORKSPACE and click Approve.
//   keys    Sign in, create the service account SA_NAME and a key KEY_NAME
//           ("Inference only") on WORKSPACE's page, and read the key value
//           shown once.
//   pages   Sign in and visit WORKSPACE's pages (service accounts,
//           connections, policies, Claude Code, members, budgets); add a
//           model on the connections page, a policy on the policies page,
//           save Claude Code settings, and set a budget on the budgets
//           page. Then the workspaces page, the
//           device code form and a page that does not exist.
//
//   instance  The instance web app at INSTANCE_URL: the pairing page of an
//           unpaired browser, then PAIR_PATH (/auth/connect/<code>); create a
//           session, send PROMPT from the prompt box, watch the answer stream
//           in with its tool parts and the session's title turn into
//           EXPECT_TITLE, allow the permission ask in the page and
//           wait for EXPECT_ANSWER. Then the network drops (POST
//           NETWORK_CONTROL/cut: a proxy in front of the instance closes the
//           browser's connections and refuses new ones) while PROMPT2 is
//           sent through the API at INSTANCE_API (with INSTANCE_AUTH) and
//           asks again; after NETWORK_CONTROL/resume the page shows the ask
//           without a reload and rejects it. (The page that the first
//           ask's answer loads has its event stream held until the run has
//           ended: it must catch up when the stream opens.) Last the
//           stats, sessions and delete-confirmation pages, and the page
//           of a path that does not exist.
//   crosssite  A page of another site, ATTACKER_URL, fires at the instance
//           at INSTANCE_URL what any page can send without asking: a no-cors
//           POST /api/session with an untyped JSON body, no-cors reads of
//           PROJECT_DIR's location and plugins, a CORS read, an image. The
//           test checks on the instance that nothing happened.
//
// Each page is measured at 1280×800 ("desktop") and 390×844 ("phone"):
// "layout" in the output holds, per page and size, what lies outside the
// viewport or is cut off by a scrolling box (actions, table cells), the
// document's width against the viewport's, and the rendered height of
// the chart labels (see measure). With SCREENSHOT_DIR set, each page is
// also saved as <name>-desktop.png and <name>-phone.png, full page.
// CHROMIUM overrides /usr/bin/chromium.
//
// It prints one JSON object with what it saw ("console_errors" lists the
// browser's console errors, CSP violations included) and exits 0; on a
// failure it prints {"error": …} to standard error, saves error-*.png when
// SCREENSHOT_DIR is set, and exits 1.
import { chromium } from "playwright-core";
import { mkdtemp, rm, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

const scenario = process.argv[2];
const base = (process.env.AGENTGATE_CONSOLE_URL ?? "").replace(/\/+$/, "");
const email = process.env.AGENTGATE_EMAIL ?? "";
const password = process.env.AGENTGATE_PASSWORD ?? "";
const workspace = process.env.WORKSPACE ?? "";
const shots = process.env.SCREENSHOT_DIR ?? "";
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

const sizes = [
  { name: "desktop", width: 1280, height: 800 },
  { name: "phone", width: 390, height: 844 },
];

function need(name, value) {
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

// layouts collects what measure saw, per page and size.
const layouts = {};

// measure runs in the page: what a person on this viewport could not
// reach or read. The viewport is the document element's client width (the
// window's inner width less a scrollbar). An action (link, button, form
// field, details summary) or a table cell counts as cut off when it
// reaches past the viewport or past the padding box of an ancestor that
// clips or scrolls sideways (a scrolled table hides its right columns
// that way). Elements kept off screen on purpose are skipped: the skip
// link until focused, and what is clipped away for screen readers only
// (a table's header row, when its rows are shown as cards). Chart labels are
// the SVG text of a chart and the HTML axis labels around it; their
// rendered heights are reported, and x-axis labels that overlap or
// nearly touch.
function measure() {
  const vw = Math.min(window.innerWidth, document.documentElement.clientWidth);
  // shown: laid out, and not hidden (the content of a closed <details>
  // keeps a box in Chromium, but is not visible).
  const shown = (el) => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && el.checkVisibility({ visibilityProperty: true });
  };
  const describe = (el) => {
    const text = (el.getAttribute("aria-label") || el.innerText || el.value || el.name || el.id || "").trim().replace(/\s+/g, " ");
    return `${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""} "${text.slice(0, 40)}"`;
  };
  // bounds is the horizontal span in which el can be seen.
  const bounds = (el) => {
    let left = 0, right = vw;
    for (let a = el.parentElement; a && a !== document.documentElement && a !== document.body; a = a.parentElement) {
      if (getComputedStyle(a).overflowX === "visible") continue;
      const r = a.getBoundingClientRect();
      left = Math.max(left, r.left + a.clientLeft);
      right = Math.min(right, r.left + a.clientLeft + a.clientWidth);
    }
    return [left, right];
  };
  const cut = (el) => {
    const r = el.getBoundingClientRect();
    const [left, right] = bounds(el);
    return r.left < left - 0.5 || r.right > right + 0.5 ? `${describe(el)} spans ${Math.round(r.left)}–${Math.round(r.right)}, visible ${Math.round(left)}–${Math.round(right)}` : "";
  };
  const offPurpose = (el) => {
    if (el.closest(".skip")) return true;
    for (let a = el; a; a = a.parentElement) {
      const st = getComputedStyle(a);
      if (st.clip !== "auto" || st.clipPath !== "none") return true; // for screen readers only
    }
    return false;
  };
  const out = { width: vw, inner_width: window.innerWidth, scroll_width: document.documentElement.scrollWidth, actions: 0, cut_actions: [], cells: 0, cut_cells: [], labels: [], overlapping_labels: [] };
  // What makes the document wider than the viewport: the innermost
  // elements reaching past its right edge.
  out.too_wide = [];
  if (out.scroll_width > vw) {
    for (const el of document.body.querySelectorAll("*")) {
      if (el.getBoundingClientRect().right <= vw + 0.5) continue;
      if ([...el.children].some((c) => c.getBoundingClientRect().right > vw + 0.5)) continue;
      if (out.too_wide.length < 5) out.too_wide.push(`${describe(el)} ends at ${Math.round(el.getBoundingClientRect().right)}`);
    }
  }
  for (const el of document.querySelectorAll("a[href], button, input:not([type=hidden]), select, textarea, summary")) {
    if (offPurpose(el) || !shown(el)) continue;
    out.actions++;
    const c = cut(el);
    if (c) out.cut_actions.push(c);
  }
  for (const el of document.querySelectorAll("td, th")) {
    if (offPurpose(el) || !shown(el)) continue;
    out.cells++;
    const c = cut(el);
    if (c) out.cut_cells.push(c);
  }
  for (const axis of ["svg text", ".chart-y span", ".chart-x span"]) {
    const seen = [];
    for (const el of document.querySelectorAll(axis)) {
      if (!el.textContent.trim() || !shown(el)) continue;
      const r = el.getBoundingClientRect();
      out.labels.push({ text: el.textContent.trim(), height: Math.round(r.height * 10) / 10, font_px: parseFloat(getComputedStyle(el).fontSize) });
      if (axis === ".chart-x span") {
        for (const o of seen) {
          // closer than 4 px reads as one label
          if (r.left < o.r.right + 4 && o.r.left < r.right + 4) out.overlapping_labels.push(`${o.text} / ${el.textContent.trim()}`);
        }
        seen.push({ r, text: el.textContent.trim() });
      }
    }
  }
  return out;
}

// screenshot measures the page at both sizes, once as it is and once with
// every <details> open (their forms and tables count too), saves it at
// both sizes when SCREENSHOT_DIR is set, and goes back to the first size.
async function screenshot(page, name) {
  layouts[name] = {};
  for (const s of sizes) {
    await page.setViewportSize({ width: s.width, height: s.height });
    await page.waitForTimeout(50);
    const seen = await page.evaluate(measure);
    await page.evaluate(() => {
      for (const d of document.querySelectorAll("details:not([open])")) {
        d.open = true;
        d.dataset.measureOpened = "";
      }
    });
    const opened = await page.evaluate(measure);
    await page.evaluate(() => {
      for (const d of document.querySelectorAll("details[data-measure-opened]")) {
        d.open = false;
        delete d.dataset.measureOpened;
      }
    });
    seen.details_open = { scroll_width: opened.scroll_width, too_wide: opened.too_wide, actions: opened.actions, cut_actions: opened.cut_actions, cells: opened.cells, cut_cells: opened.cut_cells };
    layouts[name][s.name] = seen;
    if (shots) await page.screenshot({ path: join(shots, `${name}-${s.name}.png`), fullPage: true });
  }
  await page.setViewportSize({ width: sizes[0].width, height: sizes[0].height });
}

async function signIn(page) {
  await page.getByLabel("Email").fill(need("AGENTGATE_EMAIL", email));
  await page.getByLabel("Password").fill(need("AGENTGATE_PASSWORD", password));
  await Promise.all([
    page.waitForURL((u) => u.pathname !== "/signin"),
    page.getByRole("button", { name: "Sign in" }).click(),
  ]);
}

async function signInTo(page, path) {
  await page.goto(`${base}/signin?next=${encodeURIComponent(path)}`);
  await signIn(page);
  if (new URL(page.url()).pathname !== path.split("?")[0]) {
    throw new Error(`after sign-in the browser is at ${page.url()}, not ${path}`);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const scenarios = {
  // crosssite: a page of another site (ATTACKER_URL) the user merely visits
  // fires requests at the instance (INSTANCE_URL) that a page can send
  // without asking first: a no-cors POST with an untyped JSON body, no-cors
  // reads of a project (PROJECT_DIR), a form post, an image. The test then
  // checks on the instance that none of them had an effect.
  async crosssite(page) {
    const url = need("INSTANCE_URL", process.env.INSTANCE_URL).replace(/\/+$/, "");
    const project = need("PROJECT_DIR", process.env.PROJECT_DIR);
    await page.goto(need("ATTACKER_URL", process.env.ATTACKER_URL));
    const out = await page.evaluate(
      async ({ url, project }) => {
        const body = JSON.stringify({ title: "pwned", permissions: [{ action: "bash", resource: "*", effect: "allow" }] });
        const q = "?" + new URLSearchParams({ "location[directory]": project });
        const sent = [];
        for (const [path, init] of [
          ["/api/session", { mode: "no-cors", method: "POST", body: new Blob([body]) }],
          ["/api/session", { mode: "no-cors", method: "POST", body, headers: { "Content-Type": "text/plain" } }],
          ["/api/location" + q, { mode: "no-cors" }],
          ["/api/plugin" + q, { mode: "no-cors" }],
        ]) {
          try {
            await fetch(url + path, init);
            sent.push(path);
          } catch (e) {
            sent.push(path + ": " + e);
          }
        }
        // A CORS read of the instance's answer is blocked by the browser
        // unless the instance allows this origin.
        let read = "blocked";
        try {
          read = await (await fetch(url + "/api/session")).text();
        } catch {}
        const img = new Image();
        img.src = url + "/api/agent" + q;
        await new Promise((r) => {
          img.onload = img.onerror = r;
        });
        return { sent, read };
      },
      { url, project },
    );
    // The instance's 403s and the blocked read are what the browser logs
    // as errors here: they are the expected outcome, not a page fault.
    out.refusals_logged = consoleErrors.splice(0).length;
    return out;
  },
  async instance(page, context) {
    const url = need("INSTANCE_URL", process.env.INSTANCE_URL).replace(/\/+$/, "");
    const auth = "Basic " + Buffer.from(need("INSTANCE_AUTH", process.env.INSTANCE_AUTH)).toString("base64");
    const direct = need("INSTANCE_API", process.env.INSTANCE_API).replace(/\/+$/, "");
    const api = async (method, path, body) => {
      const res = await fetch(direct + path, {
        method,
        headers: { Authorization: auth, "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
      return res.json();
    };
    const out = {};

    // Not paired: the page says how to pair, and shows no data.
    const first = await page.goto(`${url}/`);
    out.unpaired_status = first.status();
    out.unpaired_title = (await page.locator("h1").innerText()).trim();
    await screenshot(page, "instance-pair");
    // Chromium logs the page's own 401 as a console error: expected here.
    for (let i = consoleErrors.length - 1; i >= 0; i--) {
      if (/status of 401/.test(consoleErrors[i])) consoleErrors.splice(i, 1);
    }

    // Pair: the link sets the cookie and lands on the sessions list.
    await page.goto(url + need("PAIR_PATH", process.env.PAIR_PATH));
    out.landed = new URL(page.url()).pathname;

    // Create a session (untitled: the title agent names it) and prompt it.
    await Promise.all([
      page.waitForURL((u) => u.pathname.startsWith("/ui/session/")),
      page.getByRole("button", { name: "Create session" }).click(),
    ]);
    const path = new URL(page.url()).pathname;
    out.session = path.split("/")[3];
    out.title_before = (await page.locator("h1#title").innerText()).trim();
    await page.getByLabel("Prompt").fill(need("PROMPT", process.env.PROMPT));
    await Promise.all([
      page.waitForURL((u) => u.pathname === path),
      page.getByRole("button", { name: "Send" }).click(),
    ]);
    await page.evaluate(() => { window.__sameDocument = true; });

    // The answer streams in (text shown before its message is stored),
    // then the tool parts and the ask arrive, all without a reload.
    const streaming = page.locator("#streaming:not([hidden]) .text");
    await streaming.waitFor({ timeout: 30_000 });
    out.streamed_text = await streaming.innerText();
    const ask = page.locator('section[aria-label="Permission ask"]');
    await ask.waitFor({ timeout: 30_000 });
    out.ask_text = (await ask.innerText()).trim();
    out.tool_parts = await page.locator("details.tool .toolname").allInnerTexts();
    const expectTitle = need("EXPECT_TITLE", process.env.EXPECT_TITLE);
    await page.waitForFunction((t) => document.querySelector("h1#title")?.textContent === t, expectTitle, { timeout: 30_000 });
    out.title_live = (await page.locator("h1#title").innerText()).trim();
    out.live_without_reload = await page.evaluate(() => window.__sameDocument === true);
    await screenshot(page, "instance-session-ask");
    // The reply reloads the page while the turn still runs; the new
    // page's event stream is held until the run has ended, so the turn
    // finishes before the stream opens: the page must fetch its state
    // when the stream opens, not wait for events sent before that.
    let held = false;
    await page.route("**/api/event", async (route) => {
      if (held) return route.continue();
      held = true;
      out.rendered_running = await page.evaluate(() => document.getElementById("status")?.getAttribute("data-running") === "true");
      for (let i = 0; i < 600; i++) {
        const s = await api("GET", `/api/session/${out.session}`);
        if (s.data.time.idle) break;
        await sleep(100);
      }
      await route.continue();
    });
    await Promise.all([
      page.waitForURL((u) => u.pathname === path),
      ask.getByRole("button", { name: "Allow once" }).click(),
    ]);
    await page.getByText(need("EXPECT_ANSWER", process.env.EXPECT_ANSWER)).first().waitFor({ timeout: 30_000 });
    await page.getByText("Run succeeded").first().waitFor({ timeout: 30_000 });
    out.status_after_open = (await page.locator("#status").innerText()).trim();
    await page.unroute("**/api/event");
    out.tool_parts_done = await page.locator("details.tool .toolname").allInnerTexts();
    await screenshot(page, "instance-session");

    // The event stream drops while the agent asks again: after the
    // reconnect the page catches up on its own.
    await page.evaluate(() => { window.__sameDocument = true; });
    await page.waitForSelector('body[data-stream="open"]');
    const control = need("NETWORK_CONTROL", process.env.NETWORK_CONTROL);
    await fetch(`${control}/cut`, { method: "POST" });
    await page.waitForSelector('body[data-stream="reconnecting"]', { timeout: 15_000 });
    await api("POST", `/api/session/${out.session}/prompt`, { text: need("PROMPT2", process.env.PROMPT2) });
    let pending = [];
    for (let i = 0; i < 300 && pending.length === 0; i++) {
      pending = await api("GET", `/permission?sessionID=${out.session}`);
      if (pending.length === 0) await sleep(100);
    }
    if (pending.length === 0) throw new Error("the second ask never came");
    await sleep(500);
    out.ask_while_offline = (await page.locator(`#ask-${pending[0].id}`).count()) > 0;
    await fetch(`${control}/resume`, { method: "POST" });
    // the cut stream's end is logged as a console error: expected here
    for (let i = consoleErrors.length - 1; i >= 0; i--) {
      if (/ERR_INCOMPLETE_CHUNKED_ENCODING|ERR_CONNECTION_(RESET|CLOSED|REFUSED)|ERR_EMPTY_RESPONSE/.test(consoleErrors[i])) consoleErrors.splice(i, 1);
    }
    const ask2 = page.locator(`#ask-${pending[0].id}`);
    await ask2.waitFor({ timeout: 30_000 });
    out.reconnected_without_reload = await page.evaluate(() => window.__sameDocument === true);
    await ask2.getByPlaceholder("Why not (optional)").fill("not now");
    await Promise.all([
      page.waitForURL((u) => u.pathname === path),
      ask2.getByRole("button", { name: "Reject" }).click(),
    ]);
    await page.locator(".marker.idle").nth(1).waitFor({ timeout: 30_000 });

    // The other pages.
    await page.goto(`${url}/ui/stats?days=7`);
    await page.locator("svg.chart").waitFor();
    out.stats_bars = await page.locator("svg.chart rect.bar").count();
    out.stats_tools = await page.locator("table tbody th").allInnerTexts();
    await screenshot(page, "instance-stats");
    await page.goto(`${url}/`);
    out.listed = await page.locator(".sessions .title").allInnerTexts();
    out.listed_outcomes = await page.locator(".sessions .session .badge").allInnerTexts();
    await screenshot(page, "instance-sessions");
    await page.goto(`${url}${path}/delete`);
    await screenshot(page, "instance-delete");
    const missing = await page.goto(`${url}/ui/no-such-page`);
    out.error_status = missing.status();
    // Chromium logs the page's own 404 as a console error: expected here.
    for (let i = consoleErrors.length - 1; i >= 0; i--) {
      if (/status of 404/.test(consoleErrors[i])) consoleErrors.splice(i, 1);
    }
    await screenshot(page, "instance-error");
    return out;
  },

  async device(page) {
    const target = need("VERIFICATION_URI", process.env.VERIFICATION_URI);
    const userCode = need("USER_CODE", process.env.USER_CODE);
    await page.goto(new URL(target, base + "/").href);
    const signinURL = page.url();
    if (new URL(signinURL).pathname !== "/signin") {
      throw new Error(`the verification page did not ask to sign in first: ${signinURL}`);
    }
    await screenshot(page, "signin");
    await signIn(page);
    const deviceURL = page.url();
    const codeShown = (await page.locator("#user-code").textContent()).trim();
    const clientShown = (await page.locator("#client-id").textContent()).trim();
    // What the page says of the sign-in: the client's name (for a client
    // the Console knows), and when and from which address it started.
    const textOf = async (sel) => ((await page.locator(sel).count()) > 0 ? (await page.locator(sel).first().textContent()).trim() : "");
    const clientName = await textOf("#client-name");
    const requestedAt = await textOf("#requested-at");
    const requestedFrom = await textOf("#requested-from");
    if (codeShown !== userCode) throw new Error(`the page shows the code ${codeShown}, not ${userCode}`);
    await screenshot(page, "device");
    // A client that asked for org scope gets a workspace picker; another
    // (the released OpenCode CLI) signs in bound to no workspace.
    if ((await page.locator('input[name="workspace"]').count()) > 0) {
      await page.locator(`input[name="workspace"][value="${need("WORKSPACE", workspace)}"]`).check();
    }
    await Promise.all([
      page.waitForURL((u) => u.pathname === "/device"),
      page.getByRole("button", { name: "Approve" }).click(),
    ]);
    await page.getByText("You can return to your terminal").waitFor();
    const result = (await page.locator("main").innerText()).trim();
    await screenshot(page, "device-approved");
    return { signin_url: signinURL, device_url: deviceURL, code_shown: codeShown, client_shown: clientShown, client_name: clientName,
      requested_at: requestedAt, requested_from: requestedFrom, result };
  },

  async keys(page, context) {
    const saName = need("SA_NAME", process.env.SA_NAME);
    const keyName = need("KEY_NAME", process.env.KEY_NAME);
    const list = `/w/${encodeURIComponent(need("WORKSPACE", workspace))}/service-accounts`;
    await signInTo(page, list);
    await page.getByLabel("New service account").fill(saName);
    await Promise.all([
      page.waitForURL((u) => u.searchParams.get("done") === "sa-created"),
      page.getByRole("button", { name: "Create service account" }).click(),
    ]);
    const section = page.locator("section.card").filter({ has: page.getByRole("heading", { name: saName, exact: true }) });
    await section.getByLabel("Key name").fill(keyName);
    await section.getByLabel("Permission").selectOption("inference");
    await Promise.all([
      page.waitForURL((u) => u.pathname.endsWith("/keys")),
      section.getByRole("button", { name: "Create key" }).click(),
    ]);
    const input = page.locator("#key-value");
    await input.waitFor();
    const key = await input.inputValue();
    const readOnly = await input.evaluate((el) => el.readOnly);
    // The Copy button appears only with JavaScript, and copies the value.
    const copy = page.getByRole("button", { name: "Copy" });
    await copy.waitFor({ state: "visible" });
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
    await copy.click();
    await page.getByRole("button", { name: "Copied" }).waitFor();
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    await screenshot(page, "key-created");
    await page.getByRole("link", { name: "Done" }).click();
    await page.waitForURL((u) => u.pathname === list);
    const listing = await page.content();
    await screenshot(page, "service-accounts");
    return { key, read_only: readOnly, copied, listing_shows_key: listing.includes(key) };
  },

  async pages(page) {
    const ws = `/w/${encodeURIComponent(need("WORKSPACE", workspace))}`;
    await signInTo(page, `${ws}/service-accounts`);
    const seen = {};
    for (const name of ["service-accounts", "connections", "policies", "claude-code", "members", "budgets"]) {
      await page.goto(`${base}${ws}/${name}`);
      const current = await page.locator('nav.wsnav a[aria-current="page"]').textContent();
      seen[name] = { title: await page.title(), nav: current.trim(), h1: (await page.locator("h1").first().textContent()).trim() };
      if (name === "budgets") {
        const first = page.locator("form").filter({ has: page.locator('input[name="limit_usd"]') }).first();
        await first.locator('input[name="limit_usd"]').fill("25");
        await first.locator('select[name="period"]').selectOption("monthly");
        await Promise.all([
          page.waitForURL((u) => u.searchParams.get("done") === "budget-set"),
          first.getByRole("button", { name: /^Save/ }).click(),
        ]);
        seen[name].bars = await page.locator("svg.chart rect.bar").count();
        seen[name].flash = (await page.locator(".flash").textContent()).trim();
      }
      if (name === "connections") {
        // Add a model with its price and output limit through the form.
        const det = page.locator("details").filter({ hasText: "Add a model to" }).first();
        await det.locator("summary").click();
        const f = det.locator("form");
        await f.locator('input[name="model"]').fill("browser-model");
        await f.locator('input[name="price_input"]').fill("1.5");
        await f.locator('input[name="limit_output"]').fill("4096");
        await Promise.all([
          page.waitForURL((u) => u.searchParams.get("done") === "model-saved"),
          f.getByRole("button", { name: "Save model" }).click(),
        ]);
        seen[name].flash = (await page.locator(".flash").textContent()).trim();
      }
      if (name === "policies") {
        const det = page.locator("details").filter({ hasText: "Add a policy" }).first();
        await det.locator("summary").click();
        const f = det.locator("form");
        await f.locator('input[name="name"]').fill("No browser models");
        await f.locator('select[name="effect"]').selectOption("deny");
        await f.locator('input[name="models"]').fill("browser-*");
        await Promise.all([
          page.waitForURL((u) => u.searchParams.get("done") === "policy-created"),
          f.getByRole("button", { name: "Add policy" }).click(),
        ]);
        seen[name].flash = (await page.locator(".flash").textContent()).trim();
      }
      if (name === "claude-code") {
        // The owner's Claude Code settings, through the form.
        await page.locator('textarea[name="settings"]').fill('{"permissions": {"allow": ["Bash(npm run *)"], "deny": ["WebFetch"]}}');
        await Promise.all([
          page.waitForURL((u) => u.searchParams.get("done") === "claude-code-saved"),
          page.getByRole("button", { name: "Save settings" }).click(),
        ]);
        seen[name].flash = (await page.locator(".flash").textContent()).trim();
      }
      await screenshot(page, name);
    }
    // The pages outside the workspace: the workspaces and sign-ins, the
    // device code form, and the page of an error.
    await page.goto(`${base}/`);
    seen.home = { h1: (await page.locator("h1").first().textContent()).trim(), revoke: await page.getByRole("button", { name: /^Revoke/ }).count() };
    await screenshot(page, "home");
    await page.goto(`${base}/device`);
    seen.device_entry = { h1: (await page.locator("h1").first().textContent()).trim() };
    await screenshot(page, "device-entry");
    const missing = await page.goto(`${base}${ws}/no-such-page`);
    seen.error = { status: missing.status(), h1: (await page.locator("h1").first().textContent()).trim() };
    // Chromium logs the page's own 404 as a console error: expected here.
    for (let i = consoleErrors.length - 1; i >= 0; i--) {
      if (/status of 404/.test(consoleErrors[i])) consoleErrors.splice(i, 1);
    }
    await screenshot(page, "error");
    return { pages: seen };
  },
};

let context;
let page;
// Chromium's profile and crash dumps in one temporary directory, removed
// at the end. Chromium still makes "Crash Reports" under
// $XDG_CONFIG_HOME/chromium and dconf's files under $XDG_CACHE_HOME: the
// tests run this script with HOME, the XDG directories and TMPDIR in a
// temporary directory of their own.
const scratch = await mkdtemp(join(tmpdir(), "agentgate-chromium-"));
const userDataDir = join(scratch, "profile");
const crashDumpsDir = join(scratch, "crash-dumps");
const consoleErrors = [];
try {
  if (!scenarios[scenario]) throw new Error(`unknown scenario ${JSON.stringify(scenario)}; use device, keys, pages, instance or crosssite`);
  if (scenario !== "instance" && scenario !== "crosssite") need("AGENTGATE_CONSOLE_URL", base);
  if (shots) await mkdir(shots, { recursive: true });
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      `--crash-dumps-dir=${crashDumpsDir}`,
    ],
    viewport: { width: sizes[0].width, height: sizes[0].height },
    timeout: 60_000,
  });
  context.setDefaultTimeout(20_000);
  page = context.pages()[0] ?? (await context.newPage());
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  const out = await scenarios[scenario](page, context);
  process.stdout.write(JSON.stringify({ scenario, ...out, layout: layouts, console_errors: consoleErrors }) + "\n");
} catch (e) {
  if (page && shots) {
    await page.screenshot({ path: join(shots, `error-${scenario}.png`), fullPage: true }).catch(() => {});
  }
  const at = page ? page.url() : "";
  process.stderr.write(JSON.stringify({ error: String(e?.stack ?? e), url: at, console_errors: consoleErrors }) + "\n");
  process.exitCode = 1;
} finally {
  if (context) await context.close().catch(() => {});
  await rm(scratch, { recursive: true, force: true }).catch(() => {});
}
