package service_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

const credential = "sk-live-UPSTREAM-CREDENTIAL-0123456789abcdef"

func connInput(kind string, models map[string]service.ModelInput) service.ConnectionInput {
	return service.ConnectionInput{Name: "Upstream", Kind: kind, BaseURL: "https://api.example.com/v1/", Credential: credential, Models: models}
}

func price(in, out int64) *store.Pricing {
	return &store.Pricing{Input: money.Micros(in * money.Scale), Output: money.Micros(out * money.Scale)}
}

func TestConnectionCredentialIsEncrypted(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	admin := e.principal(f.adminTok, "")
	cv, err := e.svc.CreateConnection(ctx, admin, connInput(store.KindOpenAI, map[string]service.ModelInput{"gpt-4o": {Pricing: price(2, 8)}}))
	noErr(t, "CreateConnection", err)
	if cv.BaseURL != "https://api.example.com/v1" || !strings.HasPrefix(cv.ID, "conn_") || cv.Declared || cv.Workspace != f.ws {
		t.Fatalf("connection view %+v", cv)
	}
	if m := cv.Models["gpt-4o"]; !m.Enabled || m.Name != "gpt-4o" || m.Pricing.Input != 2*money.Scale {
		t.Fatalf("model defaults: %+v", m)
	}

	var rec *store.Connection
	e.view(func(tx store.Tx) (err error) { rec, err = tx.Connection(cv.ID); return err })
	if bytes.Contains(rec.Credential, []byte(credential)) || len(rec.Credential) == 0 {
		t.Fatalf("stored credential is not sealed: %q", rec.Credential)
	}
	got, err := e.svc.Credential(rec)
	noErr(t, "Credential", err)
	if got != credential {
		t.Fatalf("Credential = %q", got)
	}
	// Sealed to its record: moved to another connection id it does not open.
	moved := *rec
	moved.ID = "conn_other"
	if _, err := e.svc.Credential(&moved); err == nil {
		t.Fatal("a credential moved to another connection id still opens")
	}

	// Rotating it through UpdateConnection keeps it sealed.
	rotated := "sk-rotated-NEW-CREDENTIAL-fedcba9876543210"
	_, err = e.svc.UpdateConnection(ctx, admin, cv.ID, service.ConnectionPatch{Credential: &rotated})
	noErr(t, "UpdateConnection credential", err)
	e.view(func(tx store.Tx) (err error) { rec, err = tx.Connection(cv.ID); return err })
	if got, _ := e.svc.Credential(rec); got != rotated {
		t.Fatalf("rotated credential = %q", got)
	}

	raw := e.rawStore()
	if !bytes.Contains(raw, []byte(cv.ID)) || !bytes.Contains(raw, []byte("https://api.example.com/v1")) {
		t.Fatal("the raw scan does not find the connection record: the scan is broken")
	}
	for _, secret := range []string{credential, rotated, "UPSTREAM-CREDENTIAL", "NEW-CREDENTIAL"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Fatalf("the store holds the credential %q in clear", secret)
		}
	}
}

func TestConnectionPermissions(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	inf := e.principal(f.inference.Key, "")
	all := e.principal(f.all.Key, "")
	member := e.principal(f.memberTok, "")
	admin := e.principal(f.adminTok, "")
	withModels := connInput(store.KindOpenAI, map[string]service.ModelInput{"gpt-4o": {}})

	_, err := e.svc.CreateConnection(ctx, all, withModels)
	wantErr(t, "All key creates a connection with models", err, 403, "Forbidden")
	for name, p := range map[string]*service.Principal{"inference key": inf, "member": member} {
		_, err := e.svc.CreateConnection(ctx, p, connInput(store.KindOpenAI, nil))
		wantErr(t, name+" creates a connection", err, 403, "Forbidden")
		_, err = e.svc.Connections(ctx, p)
		wantErr(t, name+" lists connections", err, 403, "Forbidden")
	}
	cs, err := e.svc.Connections(ctx, admin)
	noErr(t, "Connections", err)
	if len(cs) != 0 {
		t.Fatalf("refused creations left %d connections", len(cs))
	}

	cv, err := e.svc.CreateConnection(ctx, all, connInput(store.KindOpenAI, nil))
	noErr(t, "All key creates a connection without models", err)

	_, err = e.svc.PutModel(ctx, all, cv.ID, "gpt-4o", service.ModelInput{})
	wantErr(t, "All key puts a model", err, 403, "Forbidden")
	_, err = e.svc.PutModel(ctx, member, cv.ID, "gpt-4o", service.ModelInput{})
	wantErr(t, "member puts a model", err, 403, "Forbidden")
	_, err = e.svc.PutModel(ctx, admin, cv.ID, "gpt-4o", service.ModelInput{Pricing: price(1, 2)})
	noErr(t, "admin puts a model", err)
	_, err = e.svc.DeleteModel(ctx, all, cv.ID, "gpt-4o")
	wantErr(t, "All key deletes a model", err, 403, "Forbidden")

	after, err := e.svc.SetPricing(ctx, all, cv.ID, "gpt-4o", *price(3, 15))
	noErr(t, "All key sets pricing", err)
	if m := after.Models["gpt-4o"]; m.Pricing.Input != 3*money.Scale || m.Pricing.Output != 15*money.Scale || !m.Enabled {
		t.Fatalf("after SetPricing: %+v", m)
	}
	_, err = e.svc.SetPricing(ctx, inf, cv.ID, "gpt-4o", *price(3, 15))
	wantErr(t, "inference key sets pricing", err, 403, "Forbidden")
	_, err = e.svc.SetPricing(ctx, member, cv.ID, "gpt-4o", *price(3, 15))
	wantErr(t, "member sets pricing", err, 403, "Forbidden")
	_, err = e.svc.SetPricing(ctx, all, cv.ID, "nope", *price(3, 15))
	wantErr(t, "pricing of an unknown model", err, 404, "ModelNotFound")

	name := "renamed"
	_, err = e.svc.UpdateConnection(ctx, all, cv.ID, service.ConnectionPatch{Name: &name})
	noErr(t, "All key renames", err)
	noErr(t, "All key deletes", e.svc.DeleteConnection(ctx, all, cv.ID))
	_, err = e.svc.Connection(ctx, admin, cv.ID)
	wantErr(t, "deleted connection", err, 404, "ConnectionNotFound")
}

func TestConnectionValidation(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	admin := e.principal(f.adminTok, "")
	all := e.principal(f.all.Key, "")
	over := money.MaxPrice + 1
	neg := money.Micros(-1)

	for name, in := range map[string]service.ConnectionInput{
		"ftp base_url":          {Name: "x", Kind: store.KindOpenAI, BaseURL: "ftp://x", Credential: "c"},
		"relative base_url":     {Name: "x", Kind: store.KindOpenAI, BaseURL: "/v1", Credential: "c"},
		"base_url with user":    {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://u:p@x.example", Credential: "c"},
		"base_url with query":   {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://x.example/?a=1", Credential: "c"},
		"no host":               {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://", Credential: "c"},
		"unknown kind":          {Name: "x", Kind: "azure", BaseURL: "https://x.example", Credential: "c"},
		"no credential":         {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://x.example", Credential: " "},
		"no name":               {Kind: store.KindOpenAI, BaseURL: "https://x.example", Credential: "c"},
		"reserved header":       {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://x.example", Credential: "c", Headers: map[string]string{"host": "evil"}},
		"header CRLF":           {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://x.example", Credential: "c", Headers: map[string]string{"X-A": "a\r\nB: c"}},
		"negative price":        {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://x.example", Credential: "c", Models: map[string]service.ModelInput{"m": {Pricing: &store.Pricing{Input: -1}}}},
		"absurd price":          {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://x.example", Credential: "c", Models: map[string]service.ModelInput{"m": {Pricing: &store.Pricing{Output: over}}}},
		"model id ..":           {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://x.example", Credential: "c", Models: map[string]service.ModelInput{"..": {}}},
		"google model with /":   {Name: "x", Kind: store.KindGoogle, BaseURL: "https://x.example", Credential: "c", Models: map[string]service.ModelInput{"models/gemini": {}}},
		"google upstream_id /":  {Name: "x", Kind: store.KindGoogle, BaseURL: "https://x.example", Credential: "c", Models: map[string]service.ModelInput{"gemini": {UpstreamID: "a/b"}}},
		"model id with a space": {Name: "x", Kind: store.KindOpenAI, BaseURL: "https://x.example", Credential: "c", Models: map[string]service.ModelInput{"a b": {}}},
	} {
		_, err := e.svc.CreateConnection(ctx, admin, in)
		wantErr(t, name, err, 400, "InvalidRequest")
	}
	cs, _ := e.svc.Connections(ctx, admin)
	if len(cs) != 0 {
		t.Fatalf("refused creations left %d connections", len(cs))
	}

	google, err := e.svc.CreateConnection(ctx, admin, connInput(store.KindGoogle, map[string]service.ModelInput{"gemini-2.5-pro": {}}))
	noErr(t, "google connection", err)
	compat, err := e.svc.CreateConnection(ctx, admin, connInput(store.KindOpenAICompatible, nil))
	noErr(t, "compatible connection", err)

	for _, id := range []string{"models/gemini", "a/b", "gemini:pro"} {
		_, err := e.svc.PutModel(ctx, admin, google.ID, id, service.ModelInput{})
		wantErr(t, "google model id "+id, err, 400, "InvalidRequest")
	}
	for _, id := range []string{"..", ".", "../x", "a/../b", "/abs", "a/..", "a?b", "a#b", "a%2Fb", "a\\b", "", strings.Repeat("m", 257), "é"} {
		_, err := e.svc.PutModel(ctx, admin, compat.ID, id, service.ModelInput{})
		wantErr(t, "model id "+id, err, 400, "InvalidRequest")
	}
	cv, err := e.svc.PutModel(ctx, admin, compat.ID, "meta-llama/Llama-3", service.ModelInput{UpstreamID: "meta-llama/Meta-Llama-3-70B"})
	noErr(t, "compatible model id with /", err)
	if m := cv.Models["meta-llama/Llama-3"]; m.UpstreamID != "meta-llama/Meta-Llama-3-70B" || len(cv.Models) != 1 {
		t.Fatalf("models %+v", cv.Models)
	}

	for name, pr := range map[string]store.Pricing{
		"negative input":       {Input: neg},
		"negative output":      {Output: neg},
		"negative cache_read":  {CacheRead: &neg},
		"negative cache_write": {CacheWrite: &neg},
		"negative reasoning":   {Reasoning: &neg},
		"absurd input":         {Input: over},
		"absurd output":        {Output: over},
		"absurd reasoning":     {Reasoning: &over},
	} {
		_, err := e.svc.SetPricing(ctx, all, google.ID, "gemini-2.5-pro", pr)
		wantErr(t, "SetPricing "+name, err, 400, "InvalidRequest")
		_, err = e.svc.PutModel(ctx, admin, google.ID, "gemini-2.5-pro", service.ModelInput{Pricing: &pr})
		wantErr(t, "PutModel "+name, err, 400, "InvalidRequest")
	}
	cv, err = e.svc.SetPricing(ctx, all, google.ID, "gemini-2.5-pro", store.Pricing{Input: money.MaxPrice, Output: 0})
	noErr(t, "the largest accepted price", err)
	if cv.Models["gemini-2.5-pro"].Pricing.Input != money.MaxPrice {
		t.Fatalf("pricing %+v", cv.Models["gemini-2.5-pro"].Pricing)
	}

	bad := "ftp://x"
	_, err = e.svc.UpdateConnection(ctx, admin, compat.ID, service.ConnectionPatch{BaseURL: &bad})
	wantErr(t, "UpdateConnection ftp base_url", err, 400, "InvalidRequest")
	empty := ""
	_, err = e.svc.UpdateConnection(ctx, admin, compat.ID, service.ConnectionPatch{Credential: &empty})
	wantErr(t, "UpdateConnection empty credential", err, 400, "InvalidRequest")
	got, err := e.svc.Connection(ctx, admin, compat.ID)
	noErr(t, "Connection", err)
	if got.BaseURL != "https://api.example.com/v1" {
		t.Fatalf("a refused update changed base_url: %q", got.BaseURL)
	}
}

func TestConnectionsOfAnotherWorkspace(t *testing.T) {
	e := newEnv(t)
	a := e.fixture("A")
	b := e.fixture("B")
	bOwner := e.principal(b.ownTok, "")
	theirs, err := e.svc.CreateConnection(ctx, bOwner, connInput(store.KindOpenAI, map[string]service.ModelInput{"gpt-4o": {}}))
	noErr(t, "B's connection", err)

	admin := e.principal(a.adminTok, "")
	all := e.principal(a.all.Key, "")
	name := "mine now"
	checks := map[string]func() error{
		"Connection":       func() error { _, err := e.svc.Connection(ctx, admin, theirs.ID); return err },
		"LookupConnection": func() error { _, err := e.svc.LookupConnection(ctx, all, theirs.ID); return err },
		"UpdateConnection": func() error {
			_, err := e.svc.UpdateConnection(ctx, admin, theirs.ID, service.ConnectionPatch{Name: &name})
			return err
		},
		"DeleteConnection": func() error { return e.svc.DeleteConnection(ctx, admin, theirs.ID) },
		"PutModel":         func() error { _, err := e.svc.PutModel(ctx, admin, theirs.ID, "x", service.ModelInput{}); return err },
		"DeleteModel":      func() error { _, err := e.svc.DeleteModel(ctx, admin, theirs.ID, "gpt-4o"); return err },
		"SetPricing":       func() error { _, err := e.svc.SetPricing(ctx, all, theirs.ID, "gpt-4o", *price(1, 1)); return err },
	}
	for name, fn := range checks {
		wantErr(t, name+" of another workspace's connection", fn(), 404, "ConnectionNotFound")
	}
	cs, err := e.svc.Connections(ctx, admin)
	noErr(t, "Connections", err)
	if len(cs) != 0 {
		t.Fatalf("A sees %d connections", len(cs))
	}
	got, err := e.svc.Connection(ctx, bOwner, theirs.ID)
	noErr(t, "B still has it", err)
	if got.Name != "Upstream" || len(got.Models) != 1 {
		t.Fatalf("B's connection changed: %+v", got)
	}
	c, err := e.svc.LookupConnection(ctx, e.principal(b.inference.Key, ""), theirs.ID)
	noErr(t, "LookupConnection by an inference key of B", err)
	if c.ID != theirs.ID {
		t.Fatal("LookupConnection returned another connection")
	}
}

func TestDeclaredConnections(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	in := connInput(store.KindAnthropic, map[string]service.ModelInput{"claude-sonnet-4": {Pricing: price(3, 15)}})
	in.ID = "conn_declared"

	changed, err := e.svc.Reconcile(ctx, f.ws, in)
	noErr(t, "Reconcile", err)
	if !changed {
		t.Fatal("first Reconcile reported no change")
	}
	var before *store.Connection
	e.view(func(tx store.Tx) (err error) { before, err = tx.Connection(in.ID); return err })
	if !before.Declared || before.Workspace != f.ws {
		t.Fatalf("declared record %+v", before)
	}

	e.clk.Advance(time.Second)
	for i := 0; i < 2; i++ {
		changed, err = e.svc.Reconcile(ctx, f.ws, in)
		noErr(t, "Reconcile again", err)
		if changed {
			t.Fatalf("Reconcile #%d with the same input reported a change", i+2)
		}
	}
	var after *store.Connection
	e.view(func(tx store.Tx) (err error) { after, err = tx.Connection(in.ID); return err })
	if !bytes.Equal(before.Credential, after.Credential) || !after.Updated.Equal(before.Updated) {
		t.Fatal("an unchanged Reconcile rewrote the record (credential re-sealed or updated moved)")
	}

	in.Models = map[string]service.ModelInput{"claude-sonnet-4": {Pricing: price(4, 15)}}
	changed, err = e.svc.Reconcile(ctx, f.ws, in)
	noErr(t, "Reconcile new pricing", err)
	if !changed {
		t.Fatal("a pricing change was not reported")
	}
	e.view(func(tx store.Tx) (err error) { after, err = tx.Connection(in.ID); return err })
	if after.Models["claude-sonnet-4"].Pricing.Input != 4*money.Scale || !after.Created.Equal(before.Created) || after.Updated.Equal(before.Updated) {
		t.Fatalf("after a pricing change: %+v", after)
	}
	in.Credential = "sk-ant-rotated"
	changed, err = e.svc.Reconcile(ctx, f.ws, in)
	noErr(t, "Reconcile new credential", err)
	e.view(func(tx store.Tx) (err error) { after, err = tx.Connection(in.ID); return err })
	if cred, _ := e.svc.Credential(after); !changed || cred != "sk-ant-rotated" {
		t.Fatalf("credential rotation: changed %v, credential %q", changed, cred)
	}
	changed, err = e.svc.Reconcile(ctx, f.ws, in)
	noErr(t, "Reconcile", err)
	if changed {
		t.Fatal("Reconcile after the rotation reported a change")
	}

	// People and keys cannot edit or delete it; the operator can.
	owner := e.principal(f.ownTok, "")
	all := e.principal(f.all.Key, "")
	name := "edited"
	_, err = e.svc.UpdateConnection(ctx, owner, in.ID, service.ConnectionPatch{Name: &name})
	wantErr(t, "owner edits a declared connection", err, 409, "Conflict")
	wantErr(t, "owner deletes a declared connection", e.svc.DeleteConnection(ctx, owner, in.ID), 409, "Conflict")
	_, err = e.svc.PutModel(ctx, owner, in.ID, "claude-opus-4", service.ModelInput{})
	wantErr(t, "owner adds a model to a declared connection", err, 409, "Conflict")
	_, err = e.svc.DeleteModel(ctx, owner, in.ID, "claude-sonnet-4")
	wantErr(t, "owner deletes a model of a declared connection", err, 409, "Conflict")
	_, err = e.svc.SetPricing(ctx, all, in.ID, "claude-sonnet-4", *price(1, 1))
	wantErr(t, "All key prices a declared connection", err, 409, "Conflict")
	e.view(func(tx store.Tx) (err error) { after, err = tx.Connection(in.ID); return err })
	if after.Name != "Upstream" || len(after.Models) != 1 || after.Models["claude-sonnet-4"].Pricing.Input != 4*money.Scale {
		t.Fatalf("refused edits changed the declared connection: %+v", after)
	}
	cv, err := e.svc.Connection(ctx, owner, in.ID)
	noErr(t, "owner reads it", err)
	if !cv.Declared {
		t.Fatal("view does not say declared")
	}
	_, err = e.svc.UpdateConnection(ctx, service.Operator(f.ws), in.ID, service.ConnectionPatch{Name: &name})
	noErr(t, "operator edits a declared connection", err)

	// A bad declared id is refused.
	bad := in
	bad.ID = "conn_../x"
	_, err = e.svc.Reconcile(ctx, f.ws, bad)
	wantErr(t, "bad declared id", err, 400, "InvalidRequest")
	_, err = e.svc.Reconcile(ctx, "wrk_doesnotexist", in)
	if err == nil {
		t.Fatal("Reconcile into an unknown workspace id succeeded")
	}
}

func TestReconcileWorkspaceByName(t *testing.T) {
	e := newEnv(t)
	in1 := connInput(store.KindOpenAI, map[string]service.ModelInput{"gpt-4o": {}})
	in1.ID = "conn_one"
	in2 := connInput(store.KindAnthropic, map[string]service.ModelInput{"claude": {}})
	in2.ID = "conn_two"
	for _, in := range []service.ConnectionInput{in1, in2, in1} {
		_, err := e.svc.Reconcile(ctx, "Acme Corp", in)
		noErr(t, "Reconcile by name", err)
	}
	wss, err := e.svc.Workspaces(ctx)
	noErr(t, "Workspaces", err)
	if len(wss) != 1 || wss[0].Name != "Acme Corp" {
		t.Fatalf("workspaces %+v, want exactly one named Acme Corp", wss)
	}
	cs, err := e.svc.Connections(ctx, service.Operator(wss[0].ID))
	noErr(t, "Connections", err)
	if len(cs) != 2 || cs[0].ID != "conn_one" || cs[1].ID != "conn_two" {
		t.Fatalf("connections %+v", cs)
	}
	// By id it goes to the same workspace; a deleted workspace's name makes a new one.
	in3 := connInput(store.KindGoogle, nil)
	in3.ID = "conn_three"
	_, err = e.svc.Reconcile(ctx, wss[0].ID, in3)
	noErr(t, "Reconcile by id", err)
	noErr(t, "DeleteWorkspace", e.svc.DeleteWorkspace(ctx, wss[0].ID))
	in4 := connInput(store.KindGoogle, nil)
	in4.ID = "conn_four"
	_, err = e.svc.Reconcile(ctx, "Acme Corp", in4)
	noErr(t, "Reconcile by the name of a deleted workspace", err)
	wss2, _ := e.svc.Workspaces(ctx)
	if len(wss2) != 1 || wss2[0].ID == wss[0].ID {
		t.Fatalf("after deleting: %+v", wss2)
	}
}
