package endpoint

import (
	"encoding/json"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// The operations on a workspace that the API surfaces share. The Console
// runs them as the authenticated principal, the operator's admin API as
// service.Operator(workspace). Path parameters: {sa} service account,
// {key} API key, {member} member id, {conn} connection, {model} a connection's model id, {wmodel} a
// workspace model id, {policy} a policy id.

// NameInput is the body of operations that take only a name.
type NameInput struct {
	Name string `json:"name"`
}

// RoleInput is the body of SetRole.
type RoleInput struct {
	Role string `json:"role"`
}

// Service accounts and keys.
var (
	ServiceAccounts = Operation[NoBody, []*store.ServiceAccount]{service.OpManageServiceAccounts,
		func(c *Call, _ NoBody) ([]*store.ServiceAccount, error) { return c.Svc.ServiceAccounts(c.Ctx(), c.P) }}
	CreateServiceAccount = Operation[NameInput, *store.ServiceAccount]{service.OpManageServiceAccounts,
		func(c *Call, in NameInput) (*store.ServiceAccount, error) {
			return c.Svc.CreateServiceAccount(c.Ctx(), c.P, in.Name)
		}}
	ServiceAccount = Operation[NoBody, *store.ServiceAccount]{service.OpManageServiceAccounts,
		func(c *Call, _ NoBody) (*store.ServiceAccount, error) {
			return c.Svc.ServiceAccount(c.Ctx(), c.P, c.Params["sa"])
		}}
	DeleteServiceAccount = Operation[NoBody, NoBody]{service.OpManageServiceAccounts,
		func(c *Call, _ NoBody) (NoBody, error) {
			return NoBody{}, c.Svc.DeleteServiceAccount(c.Ctx(), c.P, c.Params["sa"])
		}}
	Keys = Operation[NoBody, []*store.APIKey]{service.OpManageServiceAccounts,
		func(c *Call, _ NoBody) ([]*store.APIKey, error) { return c.Svc.Keys(c.Ctx(), c.P, c.Params["sa"]) }}
	CreateKey = Operation[service.NewKey, *service.CreatedKey]{service.OpManageServiceAccounts,
		func(c *Call, in service.NewKey) (*service.CreatedKey, error) {
			return c.Svc.CreateKey(c.Ctx(), c.P, c.Params["sa"], in)
		}}
	RevokeKey = Operation[NoBody, NoBody]{service.OpManageServiceAccounts,
		func(c *Call, _ NoBody) (NoBody, error) {
			return NoBody{}, c.Svc.RevokeKey(c.Ctx(), c.P, c.Params["sa"], c.Params["key"])
		}}
)

// Members and roles.
var (
	Members = Operation[NoBody, []service.MemberView]{service.OpManageMembers,
		func(c *Call, _ NoBody) ([]service.MemberView, error) { return c.Svc.Members(c.Ctx(), c.P) }}
	AddMember = Operation[service.NewMember, *service.MemberView]{service.OpManageMembers,
		func(c *Call, in service.NewMember) (*service.MemberView, error) {
			return c.Svc.AddMember(c.Ctx(), c.P, in)
		}}
	SetRole = Operation[RoleInput, *service.MemberView]{service.OpManageMembers,
		func(c *Call, in RoleInput) (*service.MemberView, error) {
			return c.Svc.SetRole(c.Ctx(), c.P, c.Params["member"], in.Role)
		}}
	RemoveMember = Operation[NoBody, NoBody]{service.OpManageMembers,
		func(c *Call, _ NoBody) (NoBody, error) {
			return NoBody{}, c.Svc.RemoveMember(c.Ctx(), c.P, c.Params["member"])
		}}
)

// Connections, models and pricing. Creating a connection with models also
// needs the right to manage models, which the service checks.
var (
	Connections = Operation[NoBody, []*service.ConnectionView]{service.OpManageConnections,
		func(c *Call, _ NoBody) ([]*service.ConnectionView, error) { return c.Svc.Connections(c.Ctx(), c.P) }}
	CreateConnection = Operation[service.ConnectionInput, *service.ConnectionView]{service.OpManageConnections,
		func(c *Call, in service.ConnectionInput) (*service.ConnectionView, error) {
			return c.Svc.CreateConnection(c.Ctx(), c.P, in)
		}}
	Connection = Operation[NoBody, *service.ConnectionView]{service.OpManageConnections,
		func(c *Call, _ NoBody) (*service.ConnectionView, error) {
			return c.Svc.Connection(c.Ctx(), c.P, c.Params["conn"])
		}}
	UpdateConnection = Operation[service.ConnectionPatch, *service.ConnectionView]{service.OpManageConnections,
		func(c *Call, in service.ConnectionPatch) (*service.ConnectionView, error) {
			return c.Svc.UpdateConnection(c.Ctx(), c.P, c.Params["conn"], in)
		}}
	// ConnectionAudit is a connection's audit trail: the accepted changes of
	// where its credential is sent.
	ConnectionAudit = Operation[NoBody, []*service.ConnectionChangeView]{service.OpReadAudit,
		func(c *Call, _ NoBody) ([]*service.ConnectionChangeView, error) {
			return c.Svc.ConnectionAudit(c.Ctx(), c.P, c.Params["conn"])
		}}
	DeleteConnection = Operation[NoBody, NoBody]{service.OpManageConnections,
		func(c *Call, _ NoBody) (NoBody, error) {
			return NoBody{}, c.Svc.DeleteConnection(c.Ctx(), c.P, c.Params["conn"])
		}}
	PutModel = Operation[service.ModelInput, *service.ConnectionView]{service.OpManageModels,
		func(c *Call, in service.ModelInput) (*service.ConnectionView, error) {
			return c.Svc.PutModel(c.Ctx(), c.P, c.Params["conn"], c.Params["model"], in)
		}}
	DeleteModel = Operation[NoBody, *service.ConnectionView]{service.OpManageModels,
		func(c *Call, _ NoBody) (*service.ConnectionView, error) {
			return c.Svc.DeleteModel(c.Ctx(), c.P, c.Params["conn"], c.Params["model"])
		}}
	SetPricing = Operation[store.Pricing, *service.ConnectionView]{service.OpManageConnections,
		func(c *Call, in store.Pricing) (*service.ConnectionView, error) {
			return c.Svc.SetPricing(c.Ctx(), c.P, c.Params["conn"], c.Params["model"], in)
		}}
)

// Workspace models, the ids of the Inference API, and their targets.
var (
	WorkspaceModels = Operation[NoBody, []*service.WorkspaceModelView]{service.OpManageModels,
		func(c *Call, _ NoBody) ([]*service.WorkspaceModelView, error) {
			return c.Svc.WorkspaceModels(c.Ctx(), c.P)
		}}
	CreateWorkspaceModel = Operation[service.WorkspaceModelInput, *service.WorkspaceModelView]{service.OpManageModels,
		func(c *Call, in service.WorkspaceModelInput) (*service.WorkspaceModelView, error) {
			return c.Svc.CreateWorkspaceModel(c.Ctx(), c.P, in)
		}}
	WorkspaceModel = Operation[NoBody, *service.WorkspaceModelView]{service.OpManageModels,
		func(c *Call, _ NoBody) (*service.WorkspaceModelView, error) {
			return c.Svc.WorkspaceModel(c.Ctx(), c.P, c.Params["wmodel"])
		}}
	ReplaceWorkspaceModel = Operation[service.WorkspaceModelInput, *service.WorkspaceModelView]{service.OpManageModels,
		func(c *Call, in service.WorkspaceModelInput) (*service.WorkspaceModelView, error) {
			return c.Svc.ReplaceWorkspaceModel(c.Ctx(), c.P, c.Params["wmodel"], in)
		}}
	DeleteWorkspaceModel = Operation[NoBody, NoBody]{service.OpManageModels,
		func(c *Call, _ NoBody) (NoBody, error) {
			return NoBody{}, c.Svc.DeleteWorkspaceModel(c.Ctx(), c.P, c.Params["wmodel"])
		}}
)

// Workspace policies: allow, deny and limit statements.
var (
	Policies = Operation[NoBody, []*store.Policy]{service.OpManageModels,
		func(c *Call, _ NoBody) ([]*store.Policy, error) { return c.Svc.Policies(c.Ctx(), c.P) }}
	CreatePolicy = Operation[service.PolicyInput, *store.Policy]{service.OpManageModels,
		func(c *Call, in service.PolicyInput) (*store.Policy, error) {
			return c.Svc.CreatePolicy(c.Ctx(), c.P, in)
		}}
	Policy = Operation[NoBody, *store.Policy]{service.OpManageModels,
		func(c *Call, _ NoBody) (*store.Policy, error) { return c.Svc.Policy(c.Ctx(), c.P, c.Params["policy"]) }}
	ReplacePolicy = Operation[service.PolicyInput, *store.Policy]{service.OpManageModels,
		func(c *Call, in service.PolicyInput) (*store.Policy, error) {
			return c.Svc.ReplacePolicy(c.Ctx(), c.P, c.Params["policy"], in)
		}}
	DeletePolicy = Operation[NoBody, NoBody]{service.OpManageModels,
		func(c *Call, _ NoBody) (NoBody, error) {
			return NoBody{}, c.Svc.DeletePolicy(c.Ctx(), c.P, c.Params["policy"])
		}}
)

// Hosted web search: the workspace's setting.
var (
	Websearch = Operation[NoBody, *service.WebsearchView]{service.OpReadConfig,
		func(c *Call, _ NoBody) (*service.WebsearchView, error) { return c.Svc.WebsearchSetting(c.Ctx(), c.P) }}
	SetWebsearch = Operation[service.WebsearchInput, *service.WebsearchView]{service.OpManageConnections,
		func(c *Call, in service.WebsearchInput) (*service.WebsearchView, error) {
			return c.Svc.SetWebsearch(c.Ctx(), c.P, in)
		}}
)

// The workspace's Claude Code settings document: read by every credential
// that reads the config, written and its history read by owners (the
// body is the document itself).
var (
	ClaudeCodeSettings = Operation[NoBody, *service.ClaudeCodeSettingsView]{service.OpReadConfig,
		func(c *Call, _ NoBody) (*service.ClaudeCodeSettingsView, error) {
			return c.Svc.ClaudeCodeSettings(c.Ctx(), c.P)
		}}
	SetClaudeCodeSettings = Operation[json.RawMessage, *service.ClaudeCodeSettingsView]{service.OpManageClaudeCode,
		func(c *Call, in json.RawMessage) (*service.ClaudeCodeSettingsView, error) {
			return c.Svc.SetClaudeCodeSettings(c.Ctx(), c.P, in)
		}}
	ClaudeCodeSettingsHistory = Operation[NoBody, []*service.ClaudeCodeChangeView]{service.OpManageClaudeCode,
		func(c *Call, _ NoBody) ([]*service.ClaudeCodeChangeView, error) {
			return c.Svc.ClaudeCodeSettingsHistory(c.Ctx(), c.P)
		}}
)

// A person's own sign-ins.
var (
	SignIns = Operation[NoBody, []service.SignInView]{service.OpOwnAccount,
		func(c *Call, _ NoBody) ([]service.SignInView, error) { return c.Svc.SignIns(c.Ctx(), c.P) }}
	RevokeSignIn = Operation[NoBody, NoBody]{service.OpOwnAccount,
		func(c *Call, _ NoBody) (NoBody, error) {
			return NoBody{}, c.Svc.RevokeSignIn(c.Ctx(), c.P, c.Params["signin"])
		}}
)

// Budgets. A member (role) reads only their own budget: the service narrows
// the list.
var (
	Budgets = Operation[NoBody, []service.BudgetView]{service.OpReadSpend,
		func(c *Call, _ NoBody) ([]service.BudgetView, error) { return c.Svc.Budgets(c.Ctx(), c.P) }}
	SetBudget = Operation[service.BudgetInput, *service.BudgetView]{service.OpManageConnections,
		func(c *Call, in service.BudgetInput) (*service.BudgetView, error) {
			return c.Svc.SetBudget(c.Ctx(), c.P, c.Params["member"], in)
		}}
)
