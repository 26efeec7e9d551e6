package service_test

import (
	"net/http"
	"testing"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func bp(b bool) *bool                                     { return &b }
func ip(n int64) *int64                                   { return &n }
func targets(ts ...store.ModelTarget) []store.ModelTarget { return ts }

func TestWorkspaceModels(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	admin := e.principal(f.adminTok, "")
	oa, err := e.svc.CreateConnection(ctx, admin, connInput(store.KindOpenAI, map[string]service.ModelInput{"gpt-4o": {}, "gpt-old": {Enabled: bp(false)}}))
	noErr(t, "CreateConnection openai", err)
	an, err := e.svc.CreateConnection(ctx, admin, connInput(store.KindAnthropic, map[string]service.ModelInput{"claude": {}}))
	noErr(t, "CreateConnection anthropic", err)
	other := e.fixture("other")
	foreign, err := e.svc.CreateConnection(ctx, e.principal(other.adminTok, ""), connInput(store.KindOpenAI, map[string]service.ModelInput{"gpt-4o": {}}))
	noErr(t, "CreateConnection other workspace", err)

	v, err := e.svc.CreateWorkspaceModel(ctx, admin, service.WorkspaceModelInput{ID: "smart", Name: "Smart",
		Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o", Order: 2}, store.ModelTarget{Connection: an.ID, Model: "claude", Order: 1})})
	noErr(t, "CreateWorkspaceModel", err)
	if len(v.Targets) != 2 || !v.Targets[0].Enabled || v.Targets[1].Kind != store.KindAnthropic || len(v.Formats) != 3 {
		t.Fatalf("view %+v", v)
	}

	// Bad input, each refused with what is wrong.
	for _, c := range []struct {
		what   string
		in     service.WorkspaceModelInput
		status int
		tag    string
	}{
		{"duplicate id", service.WorkspaceModelInput{ID: "smart", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o"})}, http.StatusConflict, "Conflict"},
		{"another workspace's connection", service.WorkspaceModelInput{ID: "x", Targets: targets(store.ModelTarget{Connection: foreign.ID, Model: "gpt-4o"})}, http.StatusBadRequest, "InvalidRequest"},
		{"unknown connection model", service.WorkspaceModelInput{ID: "x", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "nope"})}, http.StatusBadRequest, "InvalidRequest"},
		{"no targets", service.WorkspaceModelInput{ID: "x"}, http.StatusBadRequest, "InvalidRequest"},
		{"uppercase id", service.WorkspaceModelInput{ID: "Smart", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o"})}, http.StatusBadRequest, "InvalidRequest"},
		{"slash in id", service.WorkspaceModelInput{ID: "a/b", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o"})}, http.StatusBadRequest, "InvalidRequest"},
		{"mixed order and weight", service.WorkspaceModelInput{ID: "x", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o", Weight: 2}, store.ModelTarget{Connection: an.ID, Model: "claude"})}, http.StatusBadRequest, "InvalidRequest"},
		{"negative weight", service.WorkspaceModelInput{ID: "x", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o", Weight: -1})}, http.StatusBadRequest, "InvalidRequest"},
		{"same target twice", service.WorkspaceModelInput{ID: "x", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o"}, store.ModelTarget{Connection: oa.ID, Model: "gpt-4o", Order: 1})}, http.StatusBadRequest, "InvalidRequest"},
	} {
		_, err := e.svc.CreateWorkspaceModel(ctx, admin, c.in)
		wantErr(t, c.what, err, c.status, c.tag)
	}
	// Managing models needs an owner or admin.
	_, err = e.svc.CreateWorkspaceModel(ctx, e.principal(f.memberTok, ""), service.WorkspaceModelInput{ID: "y", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o"})})
	wantErr(t, "member creates", err, http.StatusForbidden, "Forbidden")
	_, err = e.svc.WorkspaceModels(ctx, e.principal(f.all.Key, ""))
	wantErr(t, "All key lists", err, http.StatusForbidden, "Forbidden")

	// The route: enabled targets by order; anyone with inference may look it up.
	key := e.principal(f.inference.Key, "")
	r, err := e.svc.LookupModel(ctx, key, "smart")
	noErr(t, "LookupModel", err)
	if len(r.Targets) != 2 || r.Targets[0].Conn.ID != an.ID || r.Targets[1].Conn.ID != oa.ID || r.Weighted {
		t.Fatalf("route targets %+v", r.Targets)
	}
	if got := r.Serves(formats.Anthropic); len(got) != 1 || got[0].ModelID != "claude" {
		t.Fatalf("anthropic targets %+v", got)
	}
	if got := r.Serves(formats.Responses); len(got) != 1 || got[0].ModelID != "gpt-4o" {
		t.Fatalf("responses targets %+v", got)
	}
	if got := r.Formats(); len(got) != 3 || got[0] != "anthropic" {
		t.Fatalf("formats %v", got)
	}
	_, err = e.svc.LookupModel(ctx, key, "nope")
	wantErr(t, "unknown model", err, http.StatusNotFound, "ModelNotFound")
	_, err = e.svc.LookupModel(ctx, e.principal(other.inference.Key, ""), "smart")
	wantErr(t, "another workspace's model", err, http.StatusNotFound, "ModelNotFound")

	// Disabling a connection's model disables the target at once (the cached
	// route is dropped by the write).
	_, err = e.svc.PutModel(ctx, admin, an.ID, "claude", service.ModelInput{Enabled: bp(false)})
	noErr(t, "disable claude", err)
	r, err = e.svc.LookupModel(ctx, key, "smart")
	noErr(t, "LookupModel after disable", err)
	if len(r.Targets) != 1 || r.Disabled != 1 {
		t.Fatalf("after disabling: %+v", r)
	}

	// Replace: weighted targets; the id cannot change.
	v, err = e.svc.ReplaceWorkspaceModel(ctx, admin, "smart", service.WorkspaceModelInput{Targets: targets(
		store.ModelTarget{Connection: oa.ID, Model: "gpt-4o", Weight: 1}, store.ModelTarget{Connection: oa.ID, Model: "gpt-old", Weight: 3})})
	noErr(t, "Replace", err)
	if v.Name != "smart" || v.Targets[1].Enabled {
		t.Fatalf("replaced %+v", v)
	}
	_, err = e.svc.ReplaceWorkspaceModel(ctx, admin, "smart", service.WorkspaceModelInput{ID: "other", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o"})})
	wantErr(t, "rename by replace", err, http.StatusBadRequest, "InvalidRequest")
	_, err = e.svc.ReplaceWorkspaceModel(ctx, admin, "ghost", service.WorkspaceModelInput{Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o"})})
	wantErr(t, "replace unknown", err, http.StatusNotFound, "ModelNotFound")

	list, err := e.svc.WorkspaceModels(ctx, admin)
	noErr(t, "WorkspaceModels", err)
	if len(list) != 1 || list[0].ID != "smart" {
		t.Fatalf("list %+v", list)
	}
	noErr(t, "Delete", e.svc.DeleteWorkspaceModel(ctx, admin, "smart"))
	wantErr(t, "delete twice", e.svc.DeleteWorkspaceModel(ctx, admin, "smart"), http.StatusNotFound, "ModelNotFound")
	_, err = e.svc.LookupModel(ctx, key, "smart")
	wantErr(t, "deleted model", err, http.StatusNotFound, "ModelNotFound")
}

func TestWeightedTargetsDrawByWeight(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	admin := e.principal(f.adminTok, "")
	a, _ := e.svc.CreateConnection(ctx, admin, connInput(store.KindOpenAI, map[string]service.ModelInput{"m": {}}))
	b, _ := e.svc.CreateConnection(ctx, admin, connInput(store.KindOpenAI, map[string]service.ModelInput{"m": {}}))
	_, err := e.svc.CreateWorkspaceModel(ctx, admin, service.WorkspaceModelInput{ID: "w", Targets: targets(
		store.ModelTarget{Connection: a.ID, Model: "m", Weight: 1}, store.ModelTarget{Connection: b.ID, Model: "m", Weight: 9})})
	noErr(t, "create", err)
	r, err := e.svc.LookupModel(ctx, e.principal(f.inference.Key, ""), "w")
	noErr(t, "lookup", err)
	first := map[string]int{}
	for range 2000 {
		ts := r.Serves(formats.Chat)
		if len(ts) != 2 || ts[0].Conn.ID == ts[1].Conn.ID {
			t.Fatalf("targets %+v", ts)
		}
		first[ts[0].Conn.ID]++
	}
	// 9:1 by weight; a uniform draw (1000 each) or a fixed order fails.
	if first[b.ID] < 1600 || first[a.ID] < 100 {
		t.Fatalf("first picks %v", first)
	}
}

func TestModelLimitsAndCapabilities(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	admin := e.principal(f.adminTok, "")
	cv, err := e.svc.CreateConnection(ctx, admin, connInput(store.KindAnthropic, map[string]service.ModelInput{"claude": {}}))
	noErr(t, "create", err)
	m := cv.Models["claude"]
	if c, o := m.Limits(); c != store.DefaultContextWindow || o != store.DefaultOutputLimit || !m.Caps().ToolCall || m.Caps().Reasoning {
		t.Fatalf("defaults: %d %d %+v", c, o, m.Caps())
	}
	cv, err = e.svc.PutModel(ctx, admin, cv.ID, "claude", service.ModelInput{Limit: &service.LimitInput{Context: ip(200000), Output: ip(64000)},
		Reasoning: bp(true), Attachment: bp(true), Modalities: &service.Modalities{Input: []string{"text", "image", "pdf"}, Output: []string{"text"}}})
	noErr(t, "PutModel limits", err)
	m = cv.Models["claude"]
	if c, o := m.Limits(); c != 200000 || o != 64000 || m.MaxOutputTokens != 64000 {
		t.Fatalf("limits %d %d", c, o)
	}
	if caps := m.Caps(); !caps.Reasoning || !caps.Attachment || !caps.ToolCall || len(caps.Input) != 3 {
		t.Fatalf("caps %+v", caps)
	}
	// A later update that names one capability keeps the others.
	cv, err = e.svc.PutModel(ctx, admin, cv.ID, "claude", service.ModelInput{Temperature: bp(false)})
	noErr(t, "PutModel temperature", err)
	if caps := cv.Models["claude"].Caps(); caps.Temperature || !caps.Reasoning || len(caps.Input) != 3 {
		t.Fatalf("caps after partial update %+v", caps)
	}
	for _, c := range []struct {
		what string
		in   service.ModelInput
	}{
		{"negative context", service.ModelInput{Limit: &service.LimitInput{Context: ip(-1)}}},
		{"absurd context", service.ModelInput{Limit: &service.LimitInput{Context: ip(1 << 40)}}},
		{"zero output", service.ModelInput{Limit: &service.LimitInput{Output: ip(0)}}},
		{"output over context", service.ModelInput{Limit: &service.LimitInput{Context: ip(1000), Output: ip(2000)}}},
		{"two different outputs", service.ModelInput{MaxOutputTokens: ip(10), Limit: &service.LimitInput{Output: ip(20)}}},
		{"unknown modality", service.ModelInput{Modalities: &service.Modalities{Input: []string{"smell"}, Output: []string{"text"}}}},
		{"empty modality", service.ModelInput{Modalities: &service.Modalities{Input: []string{"text"}}}},
		{"repeated modality", service.ModelInput{Modalities: &service.Modalities{Input: []string{"text", "text"}, Output: []string{"text"}}}},
	} {
		_, err := e.svc.PutModel(ctx, admin, cv.ID, "claude", c.in)
		wantErr(t, c.what, err, http.StatusBadRequest, "InvalidRequest")
	}
}
