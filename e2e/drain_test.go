package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// TestInstanceDrainThroughGateway: an instance whose provider is a gateway
// route of the same process, with a workspace key, answers prompts; the
// gateway meters the turns; a budget that refuses the key fails the turn
// with a clear error and the session stays usable.
func TestInstanceDrainThroughGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	ctx := testContext(t, 2*time.Minute)
	const secret = "sk-provider-drain-SECRET"
	s, tn, p := fakeWorkspace(t, ctx, "Drain", secret)
	project := t.TempDir()
	gi := s.gatewayInstance(t, ctx, tn, p, secret, project, "\t\t\tinput_price 2.5\n\t\t\toutput_price 10\n")
	base, auth, sa, key := gi.base, gi.auth, gi.sa, gi.key
	st, b, _ := call(ctx, httpClient, "POST", base+"/api/session", auth, map[string]any{"title": "drain"})
	id := gjson.GetBytes(b, "data.id").String()
	if st != 200 || id == "" {
		t.Fatalf("create: %d %s", st, b)
	}
	export := func() []byte {
		_, b, _ := call(ctx, httpClient, "GET", base+"/api/experimental/session/"+id+"/export", auth, nil)
		return b
	}
	prompt := func(text string, idles int64) []byte {
		t.Helper()
		st, b, _ := call(ctx, httpClient, "POST", base+"/api/session/"+id+"/prompt", auth, map[string]any{"text": text})
		if st != 200 {
			t.Fatalf("prompt: %d %s", st, b)
		}
		var out []byte
		waitFor(t, ctx, "the turn settles", func() bool {
			out = export()
			return gjson.GetBytes(out, `data.messages.#(type=="idle")#|#`).Int() >= idles
		})
		return out
	}

	// A prompt becomes an assistant message with the fake's text and usage.
	ex := prompt("hello", 1)
	a := gjson.GetBytes(ex, `data.messages.#(type=="assistant")`)
	if a.Get("content.0.text").String() != fakeprovider.Text || a.Get("tokens.output").Float() == 0 || a.Get("cost").Float() <= 0 ||
		gjson.GetBytes(ex, "data.info.outcome").String() != "succeeded" {
		t.Fatalf("export: %s", ex)
	}
	if got := p.Last().Header.Get("Authorization"); got != "Bearer "+secret {
		t.Fatalf("the provider got Authorization %q", got)
	}
	// The gateway metered the turn against the service account.
	waitFor(t, ctx, "usage on the service account", func() bool {
		_, b, _ := s.admin(ctx, "GET", "/agentgate/workspaces/"+tn.Workspace+"/budgets", nil)
		return strings.Contains(string(b), sa.ID)
	})

	// A budget that refuses the key: the turn fails with the gateway's error.
	must(t, "set budget", 200, nil)(s.admin(ctx, "PUT", "/agentgate/workspaces/"+tn.Workspace+"/budgets/"+sa.ID,
		map[string]any{"limit_usd": 0.000001, "period": "total"}))
	ex = prompt("over budget", 2)
	failed := gjson.GetBytes(ex, `data.messages.#(type=="assistant")#`).Array()[1]
	if failed.Get("error.status").Int() != 402 || failed.Get("error.message").String() == "" || gjson.GetBytes(ex, "data.info.outcome").String() != "failed" {
		t.Fatalf("over budget: %s", failed.Raw)
	}
	t.Logf("over-budget error: %s", failed.Get("error").Raw)

	// Lifting the budget: the same session answers again.
	must(t, "lift budget", 200, nil)(s.admin(ctx, "PUT", "/agentgate/workspaces/"+tn.Workspace+"/budgets/"+sa.ID,
		map[string]any{"limit_usd": nil, "period": "total"}))
	ex = prompt("again", 3)
	last := gjson.GetBytes(ex, `data.messages.#(type=="assistant")#`).Array()[2]
	if last.Get("content.0.text").String() != fakeprovider.Text || gjson.GetBytes(ex, "data.info.outcome").String() != "succeeded" {
		t.Fatalf("after the budget: %s", ex)
	}
	// The session's cost is the sum of its messages.
	var sum float64
	for _, m := range gjson.GetBytes(ex, `data.messages.#(type=="assistant")#`).Array() {
		sum += m.Get("cost").Float()
	}
	if c := gjson.GetBytes(ex, "data.info.cost").Float(); c < sum-1e-9 || c > sum+1e-9 {
		t.Fatalf("session cost %v, messages %v", c, sum)
	}
	// The key never reaches the log.
	if strings.Contains(s.stderr.String(), key.Key) {
		t.Fatal("the workspace key is in the log")
	}
}

// gatewayInstance is an instance whose provider is a gateway route of the
// same server: a connection to the fake provider p (model gpt-4o, priced),
// a service account's inference key in a file, and an agent_instance site
// of its own on directory, with extra lines in its provider block.
type gwInstance struct {
	base string
	auth http.Header
	sa   idName
	key  struct {
		Key string `json:"key"`
	}
}

// fakeWorkspace starts the binary with a workspace named name and a fake
// provider that holds secret; the provider closes with the test.
func fakeWorkspace(t *testing.T, ctx context.Context, name, secret string) (*server, tenant, *fakeprovider.Provider) {
	t.Helper()
	s := startServer(t, ctx, caddyBinary(t), config{})
	tn := s.bootstrap(t, ctx, name)
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return s, tn, p
}

func (s *server) gatewayInstance(t *testing.T, ctx context.Context, tn tenant, p *fakeprovider.Provider, secret, directory, providerExtra string, instanceExtra ...string) *gwInstance {
	t.Helper()
	gi := &gwInstance{}
	var conn idName
	must(t, "create connection", 201, &conn)(s.admin(ctx, "POST", "/agentgate/workspaces/"+tn.Workspace+"/connections", map[string]any{
		"name": "OpenAI (fake)", "kind": "openai", "base_url": p.URL + "/v1", "credential": secret,
		"models": map[string]any{"gpt-4o": map[string]any{"upstream_id": "gpt-4o-2024-08-06", "pricing": map[string]any{"input": 2.5, "output": 10}}},
	}))
	must(t, "create service account", 201, &gi.sa)(s.admin(ctx, "POST", "/agentgate/workspaces/"+tn.Workspace+"/service-accounts", map[string]any{"name": "instance"}))
	must(t, "create key", 201, &gi.key)(s.admin(ctx, "POST", "/agentgate/workspaces/"+tn.Workspace+"/service-accounts/"+gi.sa.ID+"/keys",
		map[string]any{"name": "instance", "permission": "inference"}))
	keyFile := filepath.Join(s.dir, "instance-key")
	if err := os.WriteFile(keyFile, []byte(gi.key.Key), 0o600); err != nil {
		t.Fatal(err)
	}
	instAddr := freeAddr(t)
	cfg := s.caddyfile(config{}) + fmt.Sprintf("\nhttp://%s {\n\tbind 127.0.0.1\n\tagent_instance {\n\t\tpassword pw-e2e\n\t\tdirectory %q\n"+
		"\t\tprovider {\n\t\t\tbase_url http://%s/custom/%s\n\t\t\tapi_key {file.%s}\n\t\t\tmodel gpt-4o\n%s\t\t}\n%s\t}\n}\n",
		instAddr, directory, s.httpAddr, url.PathEscape(conn.ID), keyFile, providerExtra, strings.Join(instanceExtra, ""))
	st, b, _ := call(ctx, freshClient, "POST", "http://"+s.adminAddr+"/load", http.Header{"Content-Type": {"text/caddyfile"}}, cfg)
	if st != 200 {
		t.Fatalf("load: %d %s", st, b)
	}
	gi.base = "http://" + instAddr
	gi.auth = http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("opencode:pw-e2e"))}}
	waitFor(t, ctx, "instance answers", func() bool {
		st, _, err := call(ctx, freshClient, "GET", gi.base+"/api/info", gi.auth, nil)
		return err == nil && st == 200
	})
	return gi
}
