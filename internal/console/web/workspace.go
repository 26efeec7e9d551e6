package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/claudecode"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// workspaceHome sends a person to the first page they can use.
func (h *Web) workspaceHome(w http.ResponseWriter, r *http.Request, q *req) {
	to := "budgets"
	if canOf(q.p).ServiceAccounts {
		to = "service-accounts"
	}
	http.Redirect(w, r, wsPath(q.ws.ID, to), http.StatusSeeOther)
}

// ---- Service accounts and keys ----

type saRow struct {
	*store.ServiceAccount
	Keys []keyRow
}

type keyRow struct {
	*store.APIKey
	Status string // active, revoked, expired
}

type saData struct {
	Accounts []saRow
	Now      time.Time
	MinDate  string // the earliest expiry date the form accepts
	Name     string // the create form's name, after an error
}

func (h *Web) serviceAccountsPage(w http.ResponseWriter, r *http.Request, q *req) {
	h.renderServiceAccounts(w, r, q, http.StatusOK, "", flash(r))
}

func (h *Web) renderServiceAccounts(w http.ResponseWriter, r *http.Request, q *req, status int, msg, fl string) {
	d := q.data("Service accounts and keys")
	d.Nav, d.Flash = "service-accounts", fl
	now := q.svc.Clock.Now().UTC()
	sd := saData{Now: now, MinDate: now.AddDate(0, 0, 1).Format(time.DateOnly)}
	sas, err := q.svc.ServiceAccounts(r.Context(), q.p)
	if err != nil {
		if !h.shown(w, q, err, d, &msg, &status) {
			return
		}
		sas = nil
	}
	sort.Slice(sas, func(i, j int) bool { return sas[i].Created.Before(sas[j].Created) })
	for _, sa := range sas {
		keys, err := q.svc.Keys(r.Context(), q.p, sa.ID)
		if err != nil {
			h.fail(w, q, err)
			return
		}
		row := saRow{ServiceAccount: sa}
		for _, k := range keys {
			st := "active"
			switch {
			case k.RevokedAt != nil:
				st = "revoked"
			case !k.Usable(now):
				st = "expired"
			}
			row.Keys = append(row.Keys, keyRow{APIKey: k, Status: st})
		}
		sd.Accounts = append(sd.Accounts, row)
	}
	d.Error = msg
	d.Data = sd
	h.render(w, status, "service-accounts", d)
}

// refused handles an error of a page's listing: a 4xx (403 for a role
// that may not see it) is shown on the page and reported true; anything
// else is an error page, reported false.
func (h *Web) refused(w http.ResponseWriter, q *req, err error, d *pageData) bool {
	e := apierr.As(err)
	if e.Status >= 400 && e.Status < 500 {
		d.Error = e.Message
		return true
	}
	h.fail(w, q, err)
	return false
}

// shown puts a refused listing on the page being rendered: the page keeps
// an earlier message and answers the higher status. It reports false when
// an error page was written instead.
func (h *Web) shown(w http.ResponseWriter, q *req, err error, d *pageData, msg *string, status *int) bool {
	if !h.refused(w, q, err, d) {
		return false
	}
	if *msg == "" {
		*msg = d.Error
	}
	*status = maxStatus(*status, apierr.As(err).Status)
	return true
}

func maxStatus(a, b int) int {
	if b > a {
		return b
	}
	return a
}

func (h *Web) createServiceAccount(w http.ResponseWriter, r *http.Request, q *req) {
	_, err := q.svc.CreateServiceAccount(r.Context(), q.p, r.PostForm.Get("name"))
	h.formDone(w, r, q, err, h.renderServiceAccounts, "service-accounts", "sa-created")
}

func (h *Web) deleteServiceAccount(w http.ResponseWriter, r *http.Request, q *req) {
	err := q.svc.DeleteServiceAccount(r.Context(), q.p, r.PathValue("sa"))
	h.formDone(w, r, q, err, h.renderServiceAccounts, "service-accounts", "sa-deleted")
}

// keyCreated is the page that shows a new key's value, once.
type keyCreated struct {
	Account *store.ServiceAccount
	Key     *service.CreatedKey
}

func (h *Web) createKey(w http.ResponseWriter, r *http.Request, q *req) {
	in := service.NewKey{Name: r.PostForm.Get("name"), Permission: r.PostForm.Get("permission")}
	if v := strings.TrimSpace(r.PostForm.Get("expires")); v != "" {
		day, err := time.Parse(time.DateOnly, v)
		if err != nil {
			h.formFailed(w, r, q, apierr.BadRequest("the expiry date must look like 2030-12-31"), h.renderServiceAccounts)
			return
		}
		end := day.AddDate(0, 0, 1) // the key works until the end of that day (UTC)
		in.ExpiresAt = &end
	}
	saID := r.PathValue("sa")
	sa, err := q.svc.ServiceAccount(r.Context(), q.p, saID)
	if err != nil {
		h.formFailed(w, r, q, err, h.renderServiceAccounts)
		return
	}
	k, err := q.svc.CreateKey(r.Context(), q.p, saID, in)
	if err != nil {
		h.formFailed(w, r, q, err, h.renderServiceAccounts)
		return
	}
	d := q.data("New key " + k.Name)
	d.Nav = "service-accounts"
	d.Data = keyCreated{Account: sa, Key: k}
	h.render(w, http.StatusCreated, "key-created", d)
}

func (h *Web) revokeKey(w http.ResponseWriter, r *http.Request, q *req) {
	if err := q.svc.RevokeKey(r.Context(), q.p, r.PathValue("sa"), r.PathValue("key")); err != nil {
		h.formFailed(w, r, q, err, h.renderServiceAccounts)
		return
	}
	redirectDone(w, r, wsPath(q.ws.ID, "service-accounts"), "key-revoked")
}

// formFailed shows the page again with the service's message and status
// (403 for a role that may not do this, 400 for bad input, 409 …).
func (h *Web) formFailed(w http.ResponseWriter, r *http.Request, q *req, err error,
	render func(http.ResponseWriter, *http.Request, *req, int, string, string)) {
	e := apierr.As(err)
	if e.Status >= 500 {
		h.fail(w, q, err)
		return
	}
	render(w, r, q, e.Status, e.Message, "")
}

// formDone ends a form: the page again with the error, or a redirect to
// the workspace page with a done message.
func (h *Web) formDone(w http.ResponseWriter, r *http.Request, q *req, err error,
	render func(http.ResponseWriter, *http.Request, *req, int, string, string), page, done string) {
	if err != nil {
		h.formFailed(w, r, q, err, render)
		return
	}
	redirectDone(w, r, wsPath(q.ws.ID, page), done)
}

// ---- Connections and models ----

type connRow struct {
	*service.ConnectionView
	Gateway string
	Models  []modelRow
	// Edit holds the edit form's fields: the connection's, or what was
	// sent when the edit was refused (never the credential).
	Edit    service.ConnectionInput
	Editing bool // the edit form was refused: show it open
	Audit   []*service.ConnectionChangeView
}

type modelRow struct {
	ID string
	store.Model
	Context, Output int64  // the limits clients are configured with, defaults filled in
	CapsText        string // the capabilities, in words
}

func newModelRow(id string, m store.Model) modelRow {
	ctx, out := m.Limits()
	c := m.Caps()
	var words []string
	for _, f := range []struct {
		on   bool
		word string
	}{{c.ToolCall, "tools"}, {c.Reasoning, "reasoning"}, {c.Attachment, "attachments"}, {c.Temperature, "temperature"}} {
		if f.on {
			words = append(words, f.word)
		}
	}
	words = append(words, "in: "+strings.Join(c.Input, ", "))
	return modelRow{ID: id, Model: m, Context: ctx, Output: out, CapsText: strings.Join(words, " · ")}
}

type connData struct {
	Connections []connRow
	Kinds       []string
	Form        service.ConnectionInput // the add form's fields, after an error (never the credential)
}

// modelFormData fills the form that adds or edits a model.
type modelFormData struct {
	Page   *pageData
	Conn   string
	Row    modelRow
	Caps   []checkBox
	Inputs []checkBox
}

type checkBox struct {
	Name, Label string
	On          bool
}

// modelForm is the template function behind the model forms: row is a
// modelRow to edit, or nil for a new model (with the defaults).
func modelForm(page *pageData, conn string, row any) modelFormData {
	d := modelFormData{Page: page, Conn: conn}
	if r, ok := row.(modelRow); ok {
		d.Row = r
	} else {
		d.Row = newModelRow("", store.Model{})
	}
	c := d.Row.Caps()
	d.Caps = []checkBox{{"tool_call", "Tool calls", c.ToolCall}, {"reasoning", "Reasoning", c.Reasoning},
		{"attachment", "Attachments", c.Attachment}, {"temperature", "Temperature", c.Temperature}}
	for _, m := range store.Modalities {
		d.Inputs = append(d.Inputs, checkBox{Name: m, On: slices.Contains(c.Input, m)})
	}
	return d
}

func (h *Web) inferenceBase(r *http.Request) string {
	if h.opts.InferenceURL != "" {
		return strings.TrimRight(h.opts.InferenceURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (h *Web) connectionsPage(w http.ResponseWriter, r *http.Request, q *req) {
	h.renderConnections(w, r, q, http.StatusOK, "", flash(r))
}

func (h *Web) renderConnections(w http.ResponseWriter, r *http.Request, q *req, status int, msg, fl string) {
	d := q.data("Connections and models")
	d.Nav, d.Flash = "connections", fl
	cd := connData{Kinds: []string{store.KindOpenAI, store.KindAnthropic, store.KindGoogle, store.KindOpenAICompatible, store.KindSearch}}
	if r.Method == http.MethodPost && r.URL.Path == wsPath(q.ws.ID, "connections") {
		cd.Form = service.ConnectionInput{Name: r.PostForm.Get("name"), Kind: r.PostForm.Get("kind"), BaseURL: r.PostForm.Get("base_url")}
	}
	cs, err := q.svc.Connections(r.Context(), q.p)
	if err != nil {
		if !h.shown(w, q, err, d, &msg, &status) {
			return
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	base := h.inferenceBase(r)
	for _, c := range cs {
		row := connRow{ConnectionView: c, Gateway: base + "/custom/" + urlPathEscape(c.ID),
			Edit: service.ConnectionInput{Name: c.Name, Kind: c.Kind, BaseURL: c.BaseURL}}
		if r.Method == http.MethodPost && r.URL.Path == wsPath(q.ws.ID, "connections", c.ID) {
			row.Editing = true
			row.Edit = service.ConnectionInput{Name: r.PostForm.Get("name"), Kind: r.PostForm.Get("kind"), BaseURL: r.PostForm.Get("base_url")}
		}
		if d.Can.Audit {
			if row.Audit, err = q.svc.ConnectionAudit(r.Context(), q.p, c.ID); err != nil {
				if !h.shown(w, q, err, d, &msg, &status) {
					return
				}
			}
		}
		for id, m := range c.Models {
			row.Models = append(row.Models, newModelRow(id, m))
		}
		sort.Slice(row.Models, func(i, j int) bool { return row.Models[i].ID < row.Models[j].ID })
		cd.Connections = append(cd.Connections, row)
	}
	d.Error = msg
	d.Data = cd
	h.render(w, status, "connections", d)
}

// setModel enables or disables a model: fields model and enabled=true|false.
func (h *Web) setModel(w http.ResponseWriter, r *http.Request, q *req) {
	var on bool
	switch r.PostForm.Get("enabled") {
	case "true":
		on = true
	case "false":
	default:
		h.formFailed(w, r, q, apierr.BadRequest("enabled must be true or false"), h.renderConnections)
		return
	}
	model := r.PostForm.Get("model")
	conn := r.PathValue("conn")
	// Only an existing model may be switched (PutModel would add a new one),
	// so look it up first; the permission of the change itself comes first.
	err := service.Require(q.p, service.OpManageModels)
	var cv *service.ConnectionView
	if err == nil {
		cv, err = q.svc.Connection(r.Context(), q.p, conn)
	}
	if err == nil {
		if _, ok := cv.Models[model]; !ok {
			err = apierr.NotFound("ModelNotFound", "model %s not found on this connection", model)
		}
	}
	if err == nil {
		_, err = q.svc.PutModel(r.Context(), q.p, conn, model, service.ModelInput{Enabled: &on})
	}
	if err != nil {
		h.formFailed(w, r, q, err, h.renderConnections)
		return
	}
	done := "model-disabled"
	if on {
		done = "model-enabled"
	}
	redirectDone(w, r, wsPath(q.ws.ID, "connections"), done)
}

// createConnection adds a connection: fields name, kind, base_url and
// credential.
func (h *Web) createConnection(w http.ResponseWriter, r *http.Request, q *req) {
	in := service.ConnectionInput{Name: r.PostForm.Get("name"), Kind: r.PostForm.Get("kind"),
		BaseURL: r.PostForm.Get("base_url"), Credential: r.PostForm.Get("credential")}
	_, err := q.svc.CreateConnection(r.Context(), q.p, in)
	h.formDone(w, r, q, err, h.renderConnections, "connections", "connection-created")
}

// editConnection changes a connection from its edit form: fields name,
// kind, base_url and credential (empty: keep the stored one). A change of
// the base URL's origin or of the kind's credential header needs a new
// credential: the refusal is shown on the form.
func (h *Web) editConnection(w http.ResponseWriter, r *http.Request, q *req) {
	var in service.ConnectionPatch
	for _, f := range []struct {
		name string
		dst  **string
	}{{"name", &in.Name}, {"kind", &in.Kind}, {"base_url", &in.BaseURL}, {"credential", &in.Credential}} {
		if v := r.PostForm.Get(f.name); v != "" {
			*f.dst = &v
		}
	}
	_, err := q.svc.UpdateConnection(r.Context(), q.p, r.PathValue("conn"), in)
	h.formDone(w, r, q, err, h.renderConnections, "connections", "connection-saved")
}

// saveModel adds or changes a model of a connection from the model form:
// model, name, upstream_id, the prices (USD per million tokens), the
// limits, the capability check boxes and the input modalities. Empty
// fields keep their value (the defaults for a new model).
func (h *Web) saveModel(w http.ResponseWriter, r *http.Request, q *req) {
	var old *store.Pricing
	err := service.Require(q.p, service.OpManageModels)
	if err == nil {
		var cv *service.ConnectionView
		if cv, err = q.svc.Connection(r.Context(), q.p, r.PathValue("conn")); err == nil {
			if m, ok := cv.Models[r.PostForm.Get("model")]; ok {
				old = &m.Pricing
			}
		}
	}
	var in service.ModelInput
	if err == nil {
		in, err = modelInput(r, old)
	}
	if err == nil {
		_, err = q.svc.PutModel(r.Context(), q.p, r.PathValue("conn"), r.PostForm.Get("model"), in)
	}
	h.formDone(w, r, q, err, h.renderConnections, "connections", "model-saved")
}

// modelInput reads the model form; prices not given keep old's.
func modelInput(r *http.Request, old *store.Pricing) (service.ModelInput, error) {
	f := r.PostForm
	in := service.ModelInput{Name: strings.TrimSpace(f.Get("name")), UpstreamID: strings.TrimSpace(f.Get("upstream_id"))}
	usd := func(name string) (*money.Micros, error) {
		v := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(f.Get(name)), "$"))
		if v == "" {
			return nil, nil
		}
		m, err := money.Parse(v)
		if err != nil {
			return nil, apierr.BadRequest("%s must be an amount of dollars such as 2.5", strings.ReplaceAll(strings.TrimPrefix(name, "price_"), "_", " "))
		}
		return &m, nil
	}
	var pr store.Pricing
	if old != nil {
		pr = *old
	}
	priced := false
	for _, p := range []struct {
		name string
		set  func(*money.Micros)
	}{
		{"price_input", func(m *money.Micros) { pr.Input = *m }},
		{"price_output", func(m *money.Micros) { pr.Output = *m }},
		{"price_cache_read", func(m *money.Micros) { pr.CacheRead = m }},
		{"price_cache_write", func(m *money.Micros) { pr.CacheWrite = m }},
	} {
		m, err := usd(p.name)
		if err != nil {
			return in, err
		}
		if m != nil {
			p.set(m)
			priced = true
		}
	}
	if priced {
		in.Pricing = &pr
	}
	tokens := func(name string) (*int64, error) {
		v := strings.ReplaceAll(strings.TrimSpace(f.Get(name)), ",", "")
		if v == "" {
			return nil, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, apierr.BadRequest("%s must be a whole number of tokens", strings.ReplaceAll(name, "_", " "))
		}
		return &n, nil
	}
	ctx, err := tokens("limit_context")
	if err != nil {
		return in, err
	}
	out, err := tokens("limit_output")
	if err != nil {
		return in, err
	}
	if ctx != nil || out != nil {
		in.Limit = &service.LimitInput{Context: ctx, Output: out}
	}
	if f.Get("capabilities") != "" {
		on := func(name string) *bool { b := f.Get(name) == "true"; return &b }
		in.ToolCall, in.Reasoning, in.Attachment, in.Temperature = on("tool_call"), on("reasoning"), on("attachment"), on("temperature")
		in.Modalities = &service.Modalities{Input: f["input"], Output: []string{"text"}}
	}
	return in, nil
}

// ---- Policies ----

type policiesData struct {
	Policies             []*store.Policy
	Effects, Roles, Pers []string
	Form                 service.PolicyInput // after an error
	Models, SAs, Keys    string
}

func (h *Web) policiesPage(w http.ResponseWriter, r *http.Request, q *req) {
	h.renderPolicies(w, r, q, http.StatusOK, "", flash(r))
}

func (h *Web) renderPolicies(w http.ResponseWriter, r *http.Request, q *req, status int, msg, fl string) {
	d := q.data("Policies")
	d.Nav, d.Flash = "policies", fl
	pd := policiesData{Effects: []string{store.EffectDeny, store.EffectAllow, store.EffectLimit},
		Roles: []string{store.RoleMember, store.RoleAdmin, store.RoleOwner}, Pers: []string{store.PerKey, store.PerMember, store.PerWorkspace}}
	if r.Method == http.MethodPost {
		pd.Form = policyInput(r)
		pd.Models, pd.SAs, pd.Keys = r.PostForm.Get("models"), r.PostForm.Get("service_accounts"), r.PostForm.Get("keys")
	}
	list, err := q.svc.Policies(r.Context(), q.p)
	if err != nil && !h.shown(w, q, err, d, &msg, &status) {
		return
	}
	pd.Policies = list
	d.Error = msg
	d.Data = pd
	h.render(w, status, "policies", d)
}

// policyInput reads the policy form; lists are separated by spaces or
// commas, numbers that do not parse are left for the service to refuse.
func policyInput(r *http.Request) service.PolicyInput {
	f := r.PostForm
	words := func(name string) []string {
		return strings.FieldsFunc(f.Get(name), func(c rune) bool { return c == ' ' || c == ',' || c == '\n' || c == '\t' })
	}
	num := func(name string) int64 {
		v := strings.ReplaceAll(strings.TrimSpace(f.Get(name)), ",", "")
		if v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	return service.PolicyInput{Name: f.Get("name"), Effect: f.Get("effect"), Models: words("models"), Roles: f["roles"],
		ServiceAccounts: words("service_accounts"), Keys: words("keys"), Per: f.Get("per"),
		RequestsPerMinute: num("requests_per_minute"), TokensPerMinute: num("tokens_per_minute")}
}

func (h *Web) createPolicy(w http.ResponseWriter, r *http.Request, q *req) {
	_, err := q.svc.CreatePolicy(r.Context(), q.p, policyInput(r))
	h.formDone(w, r, q, err, h.renderPolicies, "policies", "policy-created")
}

func (h *Web) deletePolicy(w http.ResponseWriter, r *http.Request, q *req) {
	err := q.svc.DeletePolicy(r.Context(), q.p, r.PathValue("policy"))
	h.formDone(w, r, q, err, h.renderPolicies, "policies", "policy-deleted")
}

// ---- Claude Code settings ----

type claudeCodeData struct {
	View     *service.ClaudeCodeSettingsView
	Document string // the document, indented, or the text sent when it was refused
	OpenCode string // the OpenCode permission, indented
	History  []*service.ClaudeCodeChangeView
	Keys     []string // what a document may hold
	EnvKeys  []string
}

func (h *Web) claudeCodePage(w http.ResponseWriter, r *http.Request, q *req) {
	h.renderClaudeCode(w, r, q, http.StatusOK, "", flash(r))
}

func (h *Web) renderClaudeCode(w http.ResponseWriter, r *http.Request, q *req, status int, msg, fl string) {
	d := q.data("Claude Code")
	d.Nav, d.Flash = "claude-code", fl
	v, err := q.svc.ClaudeCodeSettings(r.Context(), q.p)
	if err != nil && !h.shown(w, q, err, d, &msg, &status) {
		return
	}
	cd := claudeCodeData{View: v, Keys: claudecode.Keys, EnvKeys: claudecode.EnvKeys}
	if v != nil {
		cd.Document = indentJSON(v.Settings)
		b, _ := json.Marshal(v.OpenCode.Permission)
		cd.OpenCode = indentJSON(b)
	}
	if r.Method == http.MethodPost {
		cd.Document = r.PostForm.Get("settings")
	}
	if d.Can.ClaudeCode {
		if cd.History, err = q.svc.ClaudeCodeSettingsHistory(r.Context(), q.p); err != nil && !h.shown(w, q, err, d, &msg, &status) {
			return
		}
		slices.Reverse(cd.History) // newest first
	}
	d.Error = msg
	d.Data = cd
	h.render(w, status, "claude-code", d)
}

// indentJSON lays a JSON value out on lines for reading, its bytes
// otherwise as they are.
func indentJSON(b []byte) string {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		return string(b)
	}
	return out.String()
}

func (h *Web) saveClaudeCode(w http.ResponseWriter, r *http.Request, q *req) {
	_, err := q.svc.SetClaudeCodeSettings(r.Context(), q.p, []byte(r.PostForm.Get("settings")))
	h.formDone(w, r, q, err, h.renderClaudeCode, "claude-code", "claude-code-saved")
}

// ---- Members and roles ----

type membersData struct {
	Members []service.MemberView
	Roles   []string
	You     string
	Email   string // the add form's email, after an error
}

func (h *Web) membersPage(w http.ResponseWriter, r *http.Request, q *req) {
	h.renderMembers(w, r, q, http.StatusOK, "", flash(r))
}

func (h *Web) renderMembers(w http.ResponseWriter, r *http.Request, q *req, status int, msg, fl string) {
	d := q.data("Members and roles")
	d.Nav, d.Flash = "members", fl
	md := membersData{Roles: []string{store.RoleMember, store.RoleAdmin, store.RoleOwner}, You: q.sess.Person.ID}
	if r.Method == http.MethodPost {
		md.Email = r.PostForm.Get("email")
	}
	ms, err := q.svc.Members(r.Context(), q.p)
	if err != nil {
		if !h.shown(w, q, err, d, &msg, &status) {
			return
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Email < ms[j].Email })
	md.Members = ms
	d.Error = msg
	d.Data = md
	h.render(w, status, "members", d)
}

func (h *Web) addMember(w http.ResponseWriter, r *http.Request, q *req) {
	email := store.FoldEmail(strings.TrimSpace(r.PostForm.Get("email")))
	if email == "" {
		h.formFailed(w, r, q, apierr.BadRequest("enter the email of the person to add"), h.renderMembers)
		return
	}
	_, err := q.svc.AddMember(r.Context(), q.p, service.NewMember{Email: email, Role: r.PostForm.Get("role")})
	if err != nil {
		if apierr.As(err).Tag == "PersonNotFound" {
			err = apierr.NotFound("PersonNotFound", "no person with this email has an account: the operator creates accounts")
		}
		h.formFailed(w, r, q, err, h.renderMembers)
		return
	}
	redirectDone(w, r, wsPath(q.ws.ID, "members"), "member-added")
}

func (h *Web) setRole(w http.ResponseWriter, r *http.Request, q *req) {
	if _, err := q.svc.SetRole(r.Context(), q.p, r.PathValue("member"), r.PostForm.Get("role")); err != nil {
		h.formFailed(w, r, q, err, h.renderMembers)
		return
	}
	redirectDone(w, r, wsPath(q.ws.ID, "members"), "role-changed")
}

func (h *Web) removeMember(w http.ResponseWriter, r *http.Request, q *req) {
	if err := q.svc.RemoveMember(r.Context(), q.p, r.PathValue("member")); err != nil {
		h.formFailed(w, r, q, err, h.renderMembers)
		return
	}
	if r.PathValue("member") == q.sess.Person.ID {
		http.Redirect(w, r, "/", http.StatusSeeOther) // you left the workspace
		return
	}
	redirectDone(w, r, wsPath(q.ws.ID, "members"), "member-removed")
}

// ---- Budgets and usage ----

type budgetsData struct {
	Budgets []service.BudgetView
	Periods []string
	Chart   chart
	OwnOnly bool
	// Session is the agent session the page is filtered by ("": all).
	Session string
	// Sessions are the agent sessions with the most spend over the chart's
	// days, dearest first; SessionCount is how many there were in all.
	Sessions     []sessionSpend
	SessionCount int
}

// sessionSpend is what one agent session cost over the shown days.
type sessionSpend struct {
	Session  string
	Requests int64
	Tokens   int64
	Cost     money.Pico
	LastSeen time.Time
}

func (h *Web) budgetsPage(w http.ResponseWriter, r *http.Request, q *req) {
	h.renderBudgets(w, r, q, http.StatusOK, "", flash(r))
}

func (h *Web) renderBudgets(w http.ResponseWriter, r *http.Request, q *req, status int, msg, fl string) {
	d := q.data("Budgets and usage")
	d.Nav, d.Flash = "budgets", fl
	bd := budgetsData{Periods: []string{store.PeriodMonthly, store.PeriodWeekly, store.PeriodDaily, store.PeriodTotal},
		OwnOnly: service.Check(q.p, service.OpReadSpend) == service.OwnOnly, Session: r.URL.Query().Get("session")}
	bs, err := q.svc.Budgets(r.Context(), q.p)
	if err != nil {
		if !h.shown(w, q, err, d, &msg, &status) {
			return
		}
	}
	sort.SliceStable(bs, func(i, j int) bool {
		if bs[i].Kind != bs[j].Kind {
			return bs[i].Kind == store.MemberPerson
		}
		return strings.ToLower(bs[i].Name) < strings.ToLower(bs[j].Name)
	})
	bd.Budgets = bs
	if err == nil {
		days, sessions, truncated, err := h.spendSummary(r, q, bd.Session)
		if err != nil {
			if !h.refused(w, q, err, d) {
				return
			}
			msg = d.Error
		}
		bd.Chart = buildChart(days, truncated)
		bd.SessionCount = len(sessions)
		bd.Sessions = sessions[:min(len(sessions), maxSessionRows)]
	}
	d.Error = msg
	d.Data = bd
	h.render(w, status, "budgets", d)
}

// chartDays is the span of the spend chart.
const chartDays = 30

// maxUsagePages bounds the usage read for the chart (1000 records a page).
const maxUsagePages = 100

// maxSessionRows bounds the table of spend per agent session.
const maxSessionRows = 25

// spendSummary reads the workspace's usage (a member's own, for the member
// role; one agent session's, when session is set) over the last chartDays
// days, today included, in one pass: the spend per UTC day, and the spend
// per agent session, dearest first (requests without a session are in the
// days only).
func (h *Web) spendSummary(r *http.Request, q *req, session string) ([]daySpend, []sessionSpend, bool, error) {
	today := q.svc.Clock.Now().UTC().Truncate(24 * time.Hour)
	from := today.AddDate(0, 0, -(chartDays - 1))
	days := make([]daySpend, chartDays)
	for i := range days {
		days[i].Day = from.AddDate(0, 0, i)
	}
	bySession := map[string]*sessionSpend{}
	truncated := true
	cursor := ""
	for page := 0; page < maxUsagePages; page++ {
		recs, next, err := q.svc.Usage(r.Context(), q.p, service.UsageQuery{Session: session, From: from, Cursor: cursor, Limit: 1000})
		if err != nil {
			return nil, nil, false, err
		}
		for _, u := range recs {
			i := int(u.Time.UTC().Sub(from) / (24 * time.Hour))
			if i < 0 || i >= chartDays {
				continue
			}
			days[i].Cost += u.Cost
			if u.Session == "" {
				continue
			}
			ss := bySession[u.Session]
			if ss == nil {
				ss = &sessionSpend{Session: u.Session}
				bySession[u.Session] = ss
			}
			ss.Requests++
			ss.Tokens += u.Tokens.Total()
			ss.Cost += u.Cost
			if u.Time.After(ss.LastSeen) {
				ss.LastSeen = u.Time
			}
		}
		if next == "" {
			truncated = false
			break
		}
		cursor = next
	}
	sessions := make([]sessionSpend, 0, len(bySession))
	for _, ss := range bySession {
		sessions = append(sessions, *ss)
	}
	sort.Slice(sessions, func(i, j int) bool {
		a, b := sessions[i], sessions[j]
		if a.Cost != b.Cost {
			return a.Cost > b.Cost
		}
		if !a.LastSeen.Equal(b.LastSeen) {
			return a.LastSeen.After(b.LastSeen)
		}
		return a.Session < b.Session
	})
	return days, sessions, truncated, nil
}

// setBudget is POST /w/{wrk}/budgets/{member}: limit_usd (empty removes
// the budget) and period.
func (h *Web) setBudget(w http.ResponseWriter, r *http.Request, q *req) {
	in := service.BudgetInput{Period: r.PostForm.Get("period")}
	done := "budget-removed"
	if v := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(r.PostForm.Get("limit_usd")), "$")); v != "" {
		m, err := money.Parse(strings.ReplaceAll(v, ",", ""))
		if err != nil {
			h.formFailed(w, r, q, apierr.BadRequest("the limit must be an amount of dollars such as 25 or 12.50"), h.renderBudgets)
			return
		}
		in.LimitUSD, done = &m, "budget-set"
	}
	if _, err := q.svc.SetBudget(r.Context(), q.p, r.PathValue("member"), in); err != nil {
		h.formFailed(w, r, q, err, h.renderBudgets)
		return
	}
	redirectDone(w, r, wsPath(q.ws.ID, "budgets"), done)
}
