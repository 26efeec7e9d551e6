package formats

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/store"
)

func TestParseRoute(t *testing.T) {
	ok := []struct {
		path   string
		want   Route
		stream bool
	}{
		{"/custom/conn_a/chat/completions", Route{Connection: "conn_a", Format: Chat}, false},
		{"/custom/conn_a/v1/chat/completions", Route{Connection: "conn_a", Format: Chat}, false},
		{"/custom/conn_a/responses", Route{Connection: "conn_a", Format: Responses}, false},
		{"/custom/conn_a/v1/responses", Route{Connection: "conn_a", Format: Responses}, false},
		{"/custom/conn_a/messages", Route{Connection: "conn_a", Format: Anthropic}, false},
		{"/custom/conn_a/v1/messages", Route{Connection: "conn_a", Format: Anthropic}, false},
		{"/custom/conn_a/models/gemini-2.5-pro:generateContent", Route{Connection: "conn_a", Format: Google, Model: "gemini-2.5-pro", Method: "generateContent"}, false},
		{"/custom/conn_a/v1beta/models/g:streamGenerateContent", Route{Connection: "conn_a", Format: Google, Model: "g", Method: "streamGenerateContent"}, true},
		{"/custom/conn_a/v1/models/g:generateContent", Route{Connection: "conn_a", Format: Google, Model: "g", Method: "generateContent"}, false},
		{"/custom/conn_a/v1/messages/count_tokens", Route{Connection: "conn_a", Format: Anthropic, Op: CountTokens}, false},
		{"/custom/conn_a/messages/count_tokens", Route{Connection: "conn_a", Format: Anthropic, Op: CountTokens}, false},
		{"/custom/conn_a/v1beta/models/g:countTokens", Route{Connection: "conn_a", Format: Google, Op: CountTokens, Model: "g", Method: "countTokens"}, false},
		{"/custom/conn_a/v1/models", Route{Connection: "conn_a", Op: ListModels}, false},
		{"/custom/conn_a/models", Route{Connection: "conn_a", Op: ListModels}, false},
		{"/custom/conn_a/v1beta/models", Route{Connection: "conn_a", Format: Google, Op: ListModels}, false},
		{"/custom/conn_a/v1/models/gpt-4o", Route{Connection: "conn_a", Op: GetModel, Model: "gpt-4o"}, false},
		{"/custom/conn_a/models/meta-llama/Llama-3", Route{Connection: "conn_a", Op: GetModel, Model: "meta-llama/Llama-3"}, false},
		{"/custom/conn_a/v1beta/models/gemini-pro", Route{Connection: "conn_a", Format: Google, Op: GetModel, Model: "gemini-pro"}, false},
	}
	for _, c := range ok {
		got, err := ParseRoute(c.path)
		if err != nil || got != c.want || got.Stream() != c.stream {
			t.Errorf("%s: %+v %+v", c.path, got, err)
		}
	}
	bad := map[string]int{
		"/custom/":                                      404,
		"/custom/conn_a":                                404,
		"/custom/conn_a/":                               400,
		"/custom/conn_a/embeddings":                     404,
		"/custom/conn_a/v2/chat/completions":            404,
		"/custom/conn.a/chat/completions":               404,
		"/custom/conn_a/../b/chat/completions":          400,
		"/custom/conn_a/./chat/completions":             400,
		"/custom/conn_a%2Fx/chat/completions":           400,
		"/custom/conn_a/chat%2fcompletions":             400,
		"/custom/conn_a/models/g%2E%2E:generateContent": 400,
		"/custom/conn_a/models/g\\x:generateContent":    400,
		"/custom/conn_a/models/g:embedContent":          404,
		"/custom/conn_a/messages/batches":               404,
		"/custom/conn_a/models/a%20b":                   400,
		"/custom/conn_a/models/:generateContent":        400,
		"/custom/conn_a/models/a/b:generateContent":     400,
		"/other/conn_a/chat/completions":                404,
	}
	for path, status := range bad {
		if _, err := ParseRoute(path); err == nil || err.Status != status {
			t.Errorf("%s: %+v, want status %d", path, err, status)
		}
	}
}

// The Inference API's paths are the Providers API's without the connection,
// with the version prefix required.
func TestParseInferenceRoute(t *testing.T) {
	ok := map[string]Route{
		"/v1/chat/completions":                 {Inference: true, Format: Chat},
		"/v1/responses":                        {Inference: true, Format: Responses},
		"/v1/messages":                         {Inference: true, Format: Anthropic},
		"/v1/messages/count_tokens":            {Inference: true, Format: Anthropic, Op: CountTokens},
		"/v1beta/models/g-1:generateContent":   {Inference: true, Format: Google, Model: "g-1", Method: "generateContent"},
		"/v1/models/g-1:streamGenerateContent": {Inference: true, Format: Google, Model: "g-1", Method: "streamGenerateContent"},
		"/v1beta/models/g-1:countTokens":       {Inference: true, Format: Google, Op: CountTokens, Model: "g-1", Method: "countTokens"},
		"/v1/models":                           {Inference: true, Op: ListModels},
		"/v1beta/models":                       {Inference: true, Format: Google, Op: ListModels},
		"/v1/models/smart":                     {Inference: true, Op: GetModel, Model: "smart"},
	}
	for path, want := range ok {
		if got, err := ParseRoute(path); err != nil || got != want {
			t.Errorf("%s: %+v %+v, want %+v", path, got, err, want)
		}
		if !IsGatewayPath(path) {
			t.Errorf("%s is not a gateway path", path)
		}
	}
	bad := map[string]int{
		"/v1":                            404,
		"/v1/":                           400,
		"/chat/completions":              404,
		"/v2/chat/completions":           404,
		"/v1/embeddings":                 404,
		"/v1/../custom/x/messages":       400,
		"/v1/chat%2fcompletions":         400,
		"/v1beta/models/a/b:countTokens": 400,
	}
	for path, status := range bad {
		rt, err := ParseRoute(path)
		if err == nil || err.Status != status || rt.Connection != "" {
			t.Errorf("%s: %+v %+v, want status %d", path, rt, err, status)
		}
	}
	for _, p := range []string{"/v1betax/models", "/v10/chat/completions", "/api/v1/models", "/customer/x"} {
		if IsGatewayPath(p) {
			t.Errorf("%s taken as a gateway path", p)
		}
	}
}

// A path that is not a route still tells the connection and the format
// it suggests, for an error answered after the credential is checked.
func TestParseRouteErrorsKeepConnectionAndFormat(t *testing.T) {
	for path, want := range map[string]Format{
		"/custom/conn_a/embeddings":                 0,
		"/custom/conn_a/v1/models/x:embedContent":   Google,
		"/custom/conn_a/v1beta/cachedContents":      Google,
		"/custom/conn_a/v1/messages/batches":        Anthropic,
		"/custom/conn_a/v1/chat/completions/x":      Chat,
		"/custom/conn_a/v1/responses/resp_1":        Responses,
		"/custom/conn_a/v1/messages/./count_tokens": Anthropic,
	} {
		rt, err := ParseRoute(path)
		if err == nil || rt.Connection != "conn_a" || rt.Format != want || err.Format != want {
			t.Errorf("%s: %+v %+v, want format %v", path, rt, err, want)
		}
	}
	if rt, err := ParseRoute("/custom/conn.a/messages"); err == nil || rt.Connection != "" {
		t.Errorf("an invalid connection id was kept: %+v", rt)
	}
}

func TestHTTPMethodOfRoutes(t *testing.T) {
	for _, c := range []struct {
		r    Route
		want string
	}{
		{Route{Format: Chat}, "POST"}, {Route{Format: Anthropic, Op: CountTokens}, "POST"},
		{Route{Op: ListModels}, "GET"}, {Route{Op: GetModel}, "GET"},
	} {
		if got := c.r.HTTPMethod(); got != c.want {
			t.Errorf("%+v: %s", c.r, got)
		}
	}
}

func TestEnvelopeFormats(t *testing.T) {
	for _, c := range []struct {
		kind string
		f    Format
		want Format
	}{
		{"openai", Responses, Responses}, {"openai", 0, Chat}, {"openai", Anthropic, Chat},
		{"openai-compatible", Google, Chat}, {"anthropic", Chat, Anthropic}, {"anthropic", 0, Anthropic},
		{"google", 0, Google}, {"google", Anthropic, Google},
	} {
		if got := OfKind(c.kind, c.f); got != c.want {
			t.Errorf("OfKind(%s, %v) = %v, want %v", c.kind, c.f, got, c.want)
		}
	}
	for _, c := range []struct {
		h     http.Header
		query string
		want  Format
	}{
		{http.Header{}, "", Chat},
		{http.Header{"Authorization": {"Bearer k"}}, "", Chat},
		{http.Header{"Api-Key": {"k"}}, "", Chat},
		{http.Header{"X-Api-Key": {"k"}}, "", Anthropic},
		{http.Header{"X-Goog-Api-Key": {"k"}}, "", Google},
		{http.Header{}, "k", Google},
		{http.Header{"Authorization": {"Bearer k"}, "Anthropic-Version": {"2023-06-01"}}, "", Anthropic},
		{http.Header{"Anthropic-Version": {"2023-06-01"}}, "", Anthropic},
		{http.Header{"Authorization": {"Bearer k"}, "X-Goog-Api-Key": {"k"}}, "", Chat},
	} {
		if got := CredentialFormat(c.h, c.query); got != c.want {
			t.Errorf("CredentialFormat(%v, %q) = %v, want %v", c.h, c.query, got, c.want)
		}
	}
}

func TestModelShapes(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := []ModelInfo{{ID: "a", Name: "A", Created: created}, {ID: "b", Created: created, MaxOutputTokens: 8192}}
	for f, want := range map[Format]string{
		Chat: `{"object":"list","data":[{"id":"a","object":"model","created":1767323045,"owned_by":"openai"},` +
			`{"id":"b","object":"model","created":1767323045,"owned_by":"openai"}]}`,
		Anthropic: `{"data":[{"type":"model","id":"a","display_name":"A","created_at":"2026-01-02T03:04:05Z"},` +
			`{"type":"model","id":"b","display_name":"b","created_at":"2026-01-02T03:04:05Z"}],"has_more":false,"first_id":"a","last_id":"b"}`,
		Google: `{"models":[{"name":"models/a","baseModelId":"a","displayName":"A","supportedGenerationMethods":["generateContent","streamGenerateContent","countTokens"]},` +
			`{"name":"models/b","baseModelId":"b","displayName":"b","outputTokenLimit":8192,"supportedGenerationMethods":["generateContent","streamGenerateContent","countTokens"]}]}`,
	} {
		if got := string(ModelList(f, ms, "openai")); got != want {
			t.Errorf("%v list\n got %s\nwant %s", f, got, want)
		}
	}
	if got := string(ModelList(Anthropic, nil, "")); got != `{"data":[],"has_more":false,"first_id":null,"last_id":null}` {
		t.Errorf("empty anthropic list %s", got)
	}
	if got := string(ModelObject(Chat, ms[0], "openai")); got != `{"id":"a","object":"model","created":1767323045,"owned_by":"openai"}` {
		t.Errorf("openai model %s", got)
	}
}

func TestUpstreamPath(t *testing.T) {
	for _, c := range []struct {
		r     Route
		model string
		want  string
	}{
		{Route{Format: Chat}, "m", "/chat/completions"},
		{Route{Format: Responses}, "m", "/responses"},
		{Route{Format: Anthropic}, "m", "/messages"},
		{Route{Format: Google, Method: "streamGenerateContent"}, "gemini-x", "/models/gemini-x:streamGenerateContent"},
		{Route{Format: Anthropic, Op: CountTokens}, "m", "/messages/count_tokens"},
		{Route{Format: Google, Op: CountTokens, Method: "countTokens"}, "gemini-x", "/models/gemini-x:countTokens"},
	} {
		if got := c.r.UpstreamPath(c.model); got != c.want {
			t.Errorf("%v: %s, want %s", c.r, got, c.want)
		}
	}
}

func TestClientCredentialOrderAndSlots(t *testing.T) {
	// cred is ClientCredential's credential, failing on a conflict: the
	// order of the slots matters only once they agree.
	cred := func(h http.Header, q ...string) string {
		t.Helper()
		c, conflict := ClientCredential(h, q)
		if conflict {
			t.Fatalf("%v %q: conflict", h, q)
		}
		return c
	}
	h := http.Header{}
	if cred(h) != "" {
		t.Fatal("no credential expected")
	}
	if cred(h, "q") != "q" {
		t.Fatal("?key= not read")
	}
	if cred(h, "", "q") != "q" {
		t.Fatal("a blank ?key= must not count")
	}
	h.Set("X-Goog-Api-Key", "g")
	if cred(h) != "g" {
		t.Fatal("x-goog-api-key not read")
	}
	h.Set("Api-Key", "g")
	h.Set("X-Api-Key", " g ")
	if cred(h, "g") != "g" {
		t.Fatal("one credential in every slot")
	}
	h.Set("Authorization", "Basic zzz")
	if cred(h, "g") != "g" {
		t.Fatal("a non-bearer Authorization must not count")
	}
	h.Set("Authorization", "bearer  g ")
	if cred(h, "g", "g") != "g" {
		t.Fatal("bearer not read")
	}
	h.Set("Authorization", "Bearer   ")
	if cred(h) != "g" {
		t.Fatal("a blank bearer must not count")
	}

	for kind, want := range map[string][2]string{
		"openai": {"Authorization", "Bearer s"}, "openai-compatible": {"Authorization", "Bearer s"},
		"anthropic": {"X-Api-Key", "s"}, "google": {"X-Goog-Api-Key", "s"},
	} {
		h := http.Header{}
		SetCredential(h, kind, "s")
		if h.Get(want[0]) != want[1] || len(h) > 2 {
			t.Errorf("%s: %v", kind, h)
		}
		if kind == "anthropic" && h.Get("Anthropic-Version") != DefaultAnthropicVersion {
			t.Error("no default anthropic-version")
		}
	}
	h = http.Header{"Anthropic-Version": {"2099-01-01"}}
	SetCredential(h, "anthropic", "s")
	if h.Get("Anthropic-Version") != "2099-01-01" {
		t.Error("the client's anthropic-version was overwritten")
	}
}

func TestErrorEnvelopes(t *testing.T) {
	decode := func(b []byte) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	o := decode(ErrorBody(Chat, 403, "ModelNotEnabled", "nope", nil))
	if o["_tag"] != "ModelNotEnabled" || o["message"] != "nope" {
		t.Fatalf("%v", o)
	}
	if e := o["error"].(map[string]any); e["message"] != "nope" || e["type"] != "permission_error" || e["code"] != "ModelNotEnabled" {
		t.Fatalf("openai envelope %v", e)
	}
	a := decode(ErrorBody(Anthropic, 402, "BudgetExceeded", "no money", map[string]any{"remaining_usd": 0}))
	if a["type"] != "error" || a["error"].(map[string]any)["type"] != "billing_error" || a["remaining_usd"] != float64(0) {
		t.Fatalf("anthropic envelope %v", a)
	}
	g := decode(ErrorBody(Google, 401, "Unauthorized", "who", nil))
	if e := g["error"].(map[string]any); e["code"] != float64(401) || e["status"] != "UNAUTHENTICATED" || e["message"] != "who" {
		t.Fatalf("google envelope %v", e)
	}
}

func TestSupports(t *testing.T) {
	for _, c := range []struct {
		kind string
		f    Format
		ok   bool
	}{
		{"openai", Chat, true}, {"openai", Responses, true}, {"openai", Anthropic, false},
		{"openai-compatible", Chat, true}, {"anthropic", Anthropic, true}, {"anthropic", Chat, false},
		{"google", Google, true}, {"google", Chat, false}, {"other", Chat, false},
	} {
		if Supports(c.kind, c.f) != c.ok {
			t.Errorf("%s %v", c.kind, c.f)
		}
	}
}

// Two different credentials anywhere in a request's slots are a conflict,
// whichever slots carry them.
func TestClientCredentialConflict(t *testing.T) {
	slots := []struct {
		name string
		set  func(h http.Header, q *[]string, v string)
	}{
		{"Authorization", func(h http.Header, _ *[]string, v string) { h.Add("Authorization", "Bearer "+v) }},
		{"Api-Key", func(h http.Header, _ *[]string, v string) { h.Add("Api-Key", v) }},
		{"X-Api-Key", func(h http.Header, _ *[]string, v string) { h.Add("X-Api-Key", v) }},
		{"X-Goog-Api-Key", func(h http.Header, _ *[]string, v string) { h.Add("X-Goog-Api-Key", v) }},
		{"?key=", func(_ http.Header, q *[]string, v string) { *q = append(*q, v) }},
	}
	for _, a := range slots {
		for _, b := range slots { // a slot with itself: the slot repeated
			h, q := http.Header{}, []string(nil)
			a.set(h, &q, "agk_one")
			b.set(h, &q, "agk_two")
			if _, conflict := ClientCredential(h, q); !conflict {
				t.Errorf("%s + %s: no conflict", a.name, b.name)
			}
			h, q = http.Header{}, nil
			a.set(h, &q, "agk_one")
			b.set(h, &q, "agk_one")
			if c, conflict := ClientCredential(h, q); conflict || c != "agk_one" {
				t.Errorf("%s + %s, the same credential: %q %v", a.name, b.name, c, conflict)
			}
		}
	}
	// A credential and its prefix differ too.
	if _, conflict := ClientCredential(http.Header{"X-Api-Key": {"agk_one"}}, []string{"agk_on"}); !conflict {
		t.Error("a prefix is the same credential")
	}
}

// The common request, one credential, allocates nothing; nor does the same
// credential in two slots.
func TestClientCredentialAllocs(t *testing.T) {
	one := http.Header{"Authorization": {"Bearer agk_0123456789abcdef0123456789abcdef0123456789"}}
	two := http.Header{"Authorization": {"Bearer agk_0123456789abcdef0123456789abcdef0123456789"},
		"X-Api-Key": {"agk_0123456789abcdef0123456789abcdef0123456789"}}
	for name, h := range map[string]http.Header{"one": one, "two": two} {
		if n := testing.AllocsPerRun(100, func() { ClientCredential(h, nil) }); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}

func TestSameCredential(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"", "", true}, {"k", "k", true}, {"k", "K", false}, {"ka", "kb", false}, {"k", "kk", false}} {
		if SameCredential(c.a, c.b) != c.want {
			t.Errorf("SameCredential(%q, %q) != %v", c.a, c.b, c.want)
		}
	}
}

// The credential slot of each connection kind is where the gateway sends
// the provider credential.
func TestCredentialSlot(t *testing.T) {
	for kind, want := range map[string]string{
		store.KindOpenAI:           "Authorization: Bearer",
		store.KindOpenAICompatible: "Authorization: Bearer",
		store.KindSearch:           "Authorization: Bearer",
		store.KindAnthropic:        "X-Api-Key",
		store.KindGoogle:           "X-Goog-Api-Key",
	} {
		if got := CredentialSlot(kind); got != want {
			t.Errorf("CredentialSlot(%s) = %q, want %q", kind, got, want)
		}
	}
}
