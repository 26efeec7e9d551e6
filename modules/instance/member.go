package instance

import (
	"context"
	"net/http"

	"github.com/agentgate/agentgate/internal/gateway"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/modules/agentgate"
)

// memberWorkspace is the workspace of an instance that names one: its
// models and the in-process client of the config's gateway, both through
// the member the app resolved at start.
type memberWorkspace struct {
	app    *agentgate.App
	name   string
	client *http.Client
}

func newMemberWorkspace(app *agentgate.App, name string) *memberWorkspace {
	w := &memberWorkspace{app: app, name: name}
	w.client = &http.Client{Transport: &gateway.LocalTransport{
		Member: func(ctx context.Context) (gateway.Member, error) {
			m, _, err := app.InstanceMember(ctx, name)
			return m, err
		},
		Serve: func(rw http.ResponseWriter, r *http.Request) {
			_, g, err := app.InstanceMember(r.Context(), name)
			if err != nil {
				http.Error(rw, err.Error(), http.StatusServiceUnavailable)
				return
			}
			g.ServeLocal(rw, r)
		},
	}}
	return w
}

// Models lists the workspace's models for the instance's member.
func (w *memberWorkspace) Models(ctx context.Context) ([]loop.WorkspaceModel, error) {
	m, _, err := w.app.InstanceMember(ctx, w.name)
	if err != nil {
		return nil, err
	}
	svc, err := w.app.Service(ctx)
	if err != nil {
		return nil, err
	}
	list, err := svc.InstanceModels(ctx, m.Workspace, m.ServiceAccount, m.Instance)
	if err != nil {
		return nil, err
	}
	out := make([]loop.WorkspaceModel, len(list))
	for i, x := range list {
		out[i] = loop.WorkspaceModel{ID: x.ID, Name: x.Name, Format: x.Format,
			Limits:  loop.ModelLimits{Context: x.Limit.Context, Output: x.Limit.Output},
			Pricing: x.Pricing, ToolCall: x.ToolCall, Reasoning: x.Reasoning, Attachment: x.Attachment, Temp: x.Temperature,
			InputModalities: x.Modalities.Input, OutputModalities: x.Modalities.Output, Denied: x.Denied}
	}
	return out, nil
}

// Client sends in-process requests as the instance's member.
func (w *memberWorkspace) Client() *http.Client { return w.client }
