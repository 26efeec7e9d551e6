package instance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/tidwall/gjson"

	_ "github.com/agentgate/agentgate"
	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
	"github.com/agentgate/agentgate/modules/agentgate"
)

const upstreamKey = "sk-upstream-member-SECRET"

// TestMain points Caddy's own directories (its instance id, autosave and
// default storage) into a temporary directory before any test loads a
// config in this process.
func TestMain(m *testing.M) {
	dir, err := testenv.IsolateCaddy("agentgate-instance-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	caddy.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// memberEnv is Caddy in this process with a site serving llm_gateway and
// the Console, and a site serving an agent_instance that is a member of
// the workspace "acme"; the workspace has a connection to a fake provider
// and the model "smart" on it.
type memberEnv struct {
	t       *testing.T
	cfg     []byte
	inst    string // http://127.0.0.1:port of the instance
	dir     string // the instance's directory
	svc     *service.Service
	fake    *fakeprovider.Provider
	ws, sa  string
	name    string
	smartID string
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// memberConfig is the JSON config: the gateway's site (unless noGateway),
// and the instance's with extra fields.
func memberConfig(t *testing.T, base, name, project string, noGateway bool, extra string) []byte {
	gwHandlers := `{"handler": "llm_gateway"}, {"handler": "workspace_console"}`
	if noGateway {
		gwHandlers = `{"handler": "workspace_console"}`
	}
	return []byte(fmt.Sprintf(`{
		"admin": {"disabled": true, "config": {"persist": false}},
		"storage": {"module": "file_system", "root": %q},
		"logging": {"logs": {"default": {"writer": {"output": "file", "filename": %q}, "level": "INFO"}}},
		"apps": {
			"agentgate": {"storage": {"path": %q}},
			"http": {"servers": {
				"gw": {"listen": ["127.0.0.1:%d"], "routes": [{"handle": [%s]}]},
				"inst": {"listen": ["127.0.0.1:%d"], "routes": [{"handle": [
					{"handler": "agent_instance", "name": %q, "directory": %q, "workspace": "acme"%s}
				]}]}
			}}
		}
	}`, filepath.Join(base, "caddy-storage"), filepath.Join(base, "caddy.log"), filepath.Join(base, "data"),
		freePort(t), gwHandlers, freePort(t), name, project, extra))
}

func loadConfig(cfg []byte) error { return caddy.Load(cfg, true) }

func newMemberEnv(t *testing.T) *memberEnv { return newMemberEnvWith(t, "") }

// newMemberEnvWith is newMemberEnv with extra fields in the instance's
// handler config.
func newMemberEnvWith(t *testing.T, extra string) *memberEnv {
	t.Helper()
	base := t.TempDir()
	project := filepath.Join(base, "project")
	os.MkdirAll(project, 0o755)
	os.WriteFile(filepath.Join(project, "NOTES.md"), []byte("ship on Friday\n"), 0o644)
	name := "member-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	cfg := memberConfig(t, base, name, project, false, extra)
	if err := loadConfig(cfg); err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { caddy.Stop() })
	e := &memberEnv{t: t, cfg: cfg, dir: project, name: name}
	e.inst = "http://" + gjson.GetBytes(cfg, "apps.http.servers.inst.listen.0").String()
	v, err := caddy.ActiveContext().App("agentgate")
	if err != nil {
		t.Fatal(err)
	}
	if e.svc, err = v.(*agentgate.App).Service(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.member()
	if e.fake, err = fakeprovider.Start(upstreamKey); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.fake.Close() })
	op := service.Operator(e.ws)
	conn, err := e.svc.CreateConnection(context.Background(), op, service.ConnectionInput{Name: "fake", Kind: store.KindOpenAI,
		BaseURL: e.fake.URL + "/v1", Credential: upstreamKey,
		Models: map[string]service.ModelInput{"gpt-4o": {Pricing: &store.Pricing{Input: 2 * money.Scale, Output: 8 * money.Scale}}}})
	if err != nil {
		t.Fatal(err)
	}
	e.smartID = conn.ID
	e.addModel("smart")
	return e
}

// member reads the workspace and the instance's account as the config's
// start left them.
func (e *memberEnv) member() {
	e.t.Helper()
	im, err := e.svc.EnsureInstanceMember(context.Background(), "acme", e.name)
	if err != nil || im.AccountCreated {
		e.t.Fatalf("the instance's member was not created at start: %+v %v", im, err)
	}
	e.ws, e.sa = im.Workspace, im.Account.ID
}

func (e *memberEnv) addModel(id string) {
	e.t.Helper()
	if _, err := e.svc.CreateWorkspaceModel(context.Background(), service.Operator(e.ws), service.WorkspaceModelInput{ID: id,
		Targets: []store.ModelTarget{{Connection: e.smartID, Model: "gpt-4o"}}}); err != nil {
		e.t.Fatal(err)
	}
}

// noKeepAlive opens a connection per request: a reload closes the old
// server's.
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

func (e *memberEnv) call(method, path string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, e.inst+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (e *memberEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// prompt sends a prompt and waits for the run's idle marker (the n-th);
// it returns the session's assistant messages.
func (e *memberEnv) prompt(sid, text string, n int) []gjson.Result {
	e.t.Helper()
	if st, b := e.call("POST", "/api/session/"+sid+"/prompt", map[string]any{"text": text}); st != 200 {
		e.t.Fatalf("prompt: %d %s", st, b)
	}
	return e.settled(sid, n)
}

// settled waits for the session's n-th idle marker and returns its
// assistant messages.
func (e *memberEnv) settled(sid string, n int) []gjson.Result {
	e.t.Helper()
	var msgs []byte
	e.waitFor("the run to settle", func() bool {
		_, msgs = e.call("GET", "/api/session/"+sid+"/message", nil)
		return gjson.GetBytes(msgs, `data.#(type=="idle")#|#`).Int() >= int64(n)
	})
	as := gjson.GetBytes(msgs, `data.#(type=="assistant")#`).Array()
	// The list is newest first; ids ascend in time.
	sort.Slice(as, func(i, j int) bool { return as[i].Get("id").String() < as[j].Get("id").String() })
	return as
}

func (e *memberEnv) usage(sid string) []*store.UsageRecord {
	e.t.Helper()
	recs, _, err := e.svc.Usage(context.Background(), service.Operator(e.ws), service.UsageQuery{Session: sid})
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// onlyRecord is the session's usage record once there is exactly one.
func (e *memberEnv) onlyRecord(sid string) *store.UsageRecord {
	if rs := e.usage(sid); len(rs) == 1 {
		return rs[0]
	}
	return nil
}

// The instance is a member of the workspace named in its config (created
// at start): its turns go through the gateway in-process, metered against
// its service account with the agent session, at the price the session
// shows; so does the request that titles the session after its first
// prompt; a budget exhausted mid-turn and the account deleted fail a turn
// with the cause, and the session answers again once fixed (a reload
// creates the account again).
func TestMemberTurns(t *testing.T) {
	e := newMemberEnv(t)
	st, b := e.call("GET", "/api/model", nil)
	if st != 200 || gjson.GetBytes(b, "data.#").Int() != 1 || gjson.GetBytes(b, "data.0.id").String() != "smart" ||
		gjson.GetBytes(b, "data.0.cost.0.input").Float() != 2 {
		t.Fatalf("/api/model: %d %s", st, b)
	}
	if st, b := e.call("GET", "/config/providers", nil); gjson.GetBytes(b, "default.agentgate").String() != "smart" {
		t.Fatalf("/config/providers: %d %s", st, b)
	}
	e.call("POST", "/api/session", map[string]any{"id": "ses_member"})
	as := e.prompt("ses_member", "hello", 1)
	if len(as) != 1 || as[0].Get("content.0.text").String() != fakeprovider.Text {
		t.Fatalf("answer: %v", as)
	}
	if got := e.fake.Last().Header.Get("Authorization"); got != "Bearer "+upstreamKey {
		t.Fatalf("the provider got %q", got)
	}
	// Two records name the session: its turn's and its title request's
	// (the fake answers both alike).
	var recs []*store.UsageRecord
	e.waitFor("the usage records", func() bool { recs = e.usage("ses_member"); return len(recs) == 2 })
	for _, rec := range recs {
		if rec.MemberID != e.sa || rec.MemberKind != store.MemberServiceAccount || rec.Model != "smart" || rec.Status != 200 || rec.KeyID != "" {
			t.Fatalf("record %+v", rec)
		}
		// The session shows what the gateway charged.
		if c := as[0].Get("cost").Float(); c*1e12 < float64(rec.Cost)-1 || c*1e12 > float64(rec.Cost)+1 {
			t.Fatalf("session cost %v, record %d pico", c, rec.Cost)
		}
	}
	e.waitFor("the title", func() bool {
		_, b := e.call("GET", "/api/session/ses_member", nil)
		return gjson.GetBytes(b, "data.title").String() == fakeprovider.Text
	})

	// A budget exhausted mid-turn: the first step calls a tool, and by the
	// second the account's budget has no room.
	ctx := context.Background()
	op := service.Operator(e.ws)
	var mu sync.Mutex
	steps := 0
	e.fake.SetBehavior(fakeprovider.Behavior{Script: func([]byte) fakeprovider.Step {
		mu.Lock()
		defer mu.Unlock()
		steps++
		if steps == 1 {
			zero := money.Micros(0)
			if _, err := e.svc.SetBudget(ctx, op, e.sa, service.BudgetInput{LimitUSD: &zero, Period: store.PeriodTotal}); err != nil {
				t.Error(err)
			}
			return fakeprovider.Step{Calls: []fakeprovider.Call{{ID: "call_read", Name: "read", Args: `{"filePath":"NOTES.md"}`}}}
		}
		return fakeprovider.Step{Text: "unreachable"}
	}})
	as = e.prompt("ses_member", "read the notes", 2)
	last := as[len(as)-1]
	if last.Get("error.status").Int() != 402 || !strings.Contains(last.Get("error.message").String(), "The workspace budget refused this turn") ||
		as[len(as)-2].Get("content.0.state.status").String() != "completed" {
		t.Fatalf("budget mid-turn: %v", as)
	}
	if _, err := e.svc.SetBudget(ctx, op, e.sa, service.BudgetInput{Period: store.PeriodTotal}); err != nil {
		t.Fatal(err)
	}
	e.fake.SetBehavior(fakeprovider.Behavior{})
	as = e.prompt("ses_member", "again", 3)
	if last := as[len(as)-1]; last.Get("content.0.text").String() != fakeprovider.Text || last.Get("error").Exists() {
		t.Fatalf("after the budget was lifted: %s", last.Raw)
	}

	// The account deleted in the Console: the next turn says so; a reload
	// creates the account again and the session answers.
	if err := e.svc.DeleteServiceAccount(ctx, op, e.sa); err != nil {
		t.Fatal(err)
	}
	as = e.prompt("ses_member", "still there?", 4)
	last = as[len(as)-1]
	if last.Get("error.status").Int() != 401 || !strings.Contains(last.Get("error.message").String(), "service account can no longer use the workspace") ||
		!strings.Contains(last.Get("error.message").String(), e.sa) {
		t.Fatalf("deleted account: %s", last.Raw)
	}
	old := e.sa
	if err := loadConfig(e.cfg); err != nil {
		t.Fatal(err)
	}
	e.member()
	if e.sa == old {
		t.Fatal("the reload did not create a new account")
	}
	as = e.prompt("ses_member", "and now?", 5)
	if last := as[len(as)-1]; last.Get("content.0.text").String() != fakeprovider.Text {
		t.Fatalf("after the reload: %s", last.Raw)
	}
	e.waitFor("the new account's record", func() bool {
		for _, r := range e.usage("ses_member") {
			if r.MemberID == e.sa {
				return true
			}
		}
		return false
	})
}

// A model removed while a session uses it, and a policy that denies the
// instance a model: the denied model is not offered, and the turns fail
// with the cause.
func TestMemberModelRemovedAndDenied(t *testing.T) {
	e := newMemberEnv(t)
	ctx := context.Background()
	op := service.Operator(e.ws)
	e.addModel("spare")
	e.call("POST", "/api/session", map[string]any{"id": "ses_rm", "model": map[string]any{"id": "spare", "providerID": "agentgate"}})
	if as := e.prompt("ses_rm", "hello", 1); as[0].Get("content.0.text").String() != fakeprovider.Text {
		t.Fatalf("first turn: %v", as)
	}
	if err := e.svc.DeleteWorkspaceModel(ctx, op, "spare"); err != nil {
		t.Fatal(err)
	}
	if _, b := e.call("GET", "/api/model", nil); strings.Contains(string(b), `"spare"`) {
		t.Fatalf("a removed model is listed: %s", b)
	}
	as := e.prompt("ses_rm", "again", 2)
	if msg := as[1].Get("error.message").String(); as[1].Get("error.status").Int() != 404 || !strings.Contains(msg, `Model "spare" is not a model of the workspace`) {
		t.Fatalf("removed model: %s", as[1].Raw)
	}

	if _, err := e.svc.CreatePolicy(ctx, op, service.PolicyInput{Name: "no smart for the agent", Effect: store.EffectDeny,
		Models: []string{"smart"}, ServiceAccounts: []string{e.sa}}); err != nil {
		t.Fatal(err)
	}
	if _, b := e.call("GET", "/api/model", nil); gjson.GetBytes(b, "data.#").Int() != 0 {
		t.Fatalf("a denied model is listed: %s", b)
	}
	e.call("POST", "/api/session", map[string]any{"id": "ses_deny", "model": map[string]any{"id": "smart", "providerID": "agentgate"}})
	as = e.prompt("ses_deny", "hello", 1)
	if msg := as[0].Get("error.message").String(); as[0].Get("error.status").Int() != 403 || !strings.Contains(msg, "no smart for the agent") {
		t.Fatalf("denied model: %s", as[0].Raw)
	}
	// Without a model the instance may use, a session that names none is
	// told how to get one.
	e.call("POST", "/api/session", map[string]any{"id": "ses_none"})
	as = e.prompt("ses_none", "hello", 1)
	if msg := as[0].Get("error.message").String(); !strings.Contains(msg, "The workspace has no model this instance may use") {
		t.Fatalf("no model: %s", as[0].Raw)
	}
}

// An interrupt during an in-process streamed call cancels the provider's
// request, and the usage record says the client went away, as over HTTP.
func TestMemberInterrupt(t *testing.T) {
	e := newMemberEnv(t)
	e.fake.SetBehavior(fakeprovider.Behavior{Delay: 100 * time.Millisecond, Chunks: 200})
	// Named: no title request streams beside the turn.
	e.call("POST", "/api/session", map[string]any{"id": "ses_int", "title": "interrupted"})
	if st, b := e.call("POST", "/api/session/ses_int/prompt", map[string]any{"text": "talk"}); st != 200 {
		t.Fatalf("prompt: %d %s", st, b)
	}
	e.waitFor("the provider's stream", func() bool { return len(e.fake.Received()) == 1 })
	time.Sleep(300 * time.Millisecond) // a few events streamed
	if st, b := e.call("POST", "/api/session/ses_int/interrupt", nil); st/100 != 2 {
		t.Fatalf("interrupt: %d %s", st, b)
	}
	e.waitFor("the provider's request cancelled", func() bool { return e.fake.Last().Canceled })
	var rec *store.UsageRecord
	e.waitFor("the usage record", func() bool { rec = e.onlyRecord("ses_int"); return rec != nil })
	if !rec.ClientDisconnected || !rec.Streamed || rec.MemberID != e.sa {
		t.Fatalf("record %+v", rec)
	}
	as := e.settled("ses_int", 1)
	if as[0].Get("error.type").String() != "MessageAbortedError" {
		t.Fatalf("interrupted turn: %s", as[0].Raw)
	}
}

// title_model titles sessions with that workspace model, through the
// gateway: its usage record names the session; the turns use the
// session's model.
func TestMemberTitleModel(t *testing.T) {
	e := newMemberEnvWith(t, `, "title_model": "tiny"`)
	e.addModel("tiny") // after smart by id: smart stays the default model
	e.fake.SetBehavior(fakeprovider.Behavior{Script: func(body []byte) fakeprovider.Step {
		if strings.Contains(string(body), "Generate a title for this conversation") {
			return fakeprovider.Step{Text: "Release notes"}
		}
		return fakeprovider.Step{Text: fakeprovider.Text}
	}})
	e.call("POST", "/api/session", map[string]any{"id": "ses_title"})
	if as := e.prompt("ses_title", "write the release notes", 1); as[0].Get("content.0.text").String() != fakeprovider.Text {
		t.Fatalf("answer: %v", as)
	}
	var recs []*store.UsageRecord
	e.waitFor("the usage records", func() bool { recs = e.usage("ses_title"); return len(recs) == 2 })
	models := map[string]int{}
	for _, rec := range recs {
		if rec.MemberID != e.sa || rec.Status != 200 {
			t.Fatalf("record %+v", rec)
		}
		models[rec.Model]++
	}
	if models["tiny"] != 1 || models["smart"] != 1 {
		t.Fatalf("records by model: %v", models)
	}
	e.waitFor("the title", func() bool {
		_, b := e.call("GET", "/api/session/ses_title", nil)
		return gjson.GetBytes(b, "data.title").String() == "Release notes"
	})
}

// Configs that cannot work fail to load, saying why; a workspace named
// but missing is created.
func TestMemberConfigErrors(t *testing.T) {
	base := t.TempDir()
	project := t.TempDir()
	for _, c := range []struct {
		what      string
		noGateway bool
		extra     string
		want      string
	}{
		{"no gateway", true, "", "has no llm_gateway"},
		{"unknown workspace id", false, `, "workspace": "wrk_nope"`, `workspace "wrk_nope": the workspace does not exist`},
		{"workspace and provider", false, `, "provider": {"base_url": "http://127.0.0.1:1/v1"}`, "`workspace` or a `provider` block, not both"},
		{"model without workspace", false, `, "workspace": "", "model": "smart"`, "`model` is the default workspace model"},
	} {
		t.Run(c.what, func(t *testing.T) {
			cfg := memberConfig(t, base, "bad-"+strings.ReplaceAll(c.what, " ", "-"), project, c.noGateway, c.extra)
			err := loadConfig(cfg)
			if err == nil {
				caddy.Stop()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q lacks %q", err, c.want)
			}
			t.Log(err)
		})
	}
}

// A reload that fails to start (here: a workspace id no one has) leaves
// the running config's instance answering with its own workspace.
func TestMemberFailedReloadKeepsWorking(t *testing.T) {
	e := newMemberEnv(t)
	bad := strings.Replace(string(e.cfg), `"workspace": "acme"`, `"workspace": "wrk_nope"`, 1)
	if bad == string(e.cfg) {
		t.Fatal("the config has no workspace to replace")
	}
	if err := loadConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), "wrk_nope") {
		t.Fatalf("the bad reload: %v", err)
	}
	e.call("POST", "/api/session", map[string]any{"id": "ses_kept"})
	if as := e.prompt("ses_kept", "hello", 1); as[0].Get("content.0.text").String() != fakeprovider.Text {
		t.Fatalf("after the failed reload: %s", as[0].Raw)
	}
	if st, b := e.call("GET", "/api/model", nil); gjson.GetBytes(b, "data.0.id").String() != "smart" {
		t.Fatalf("/api/model after the failed reload: %d %s", st, b)
	}
}
