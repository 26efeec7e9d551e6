package server

import (
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/instance/webapp"
)

// webBackend is what the web app reads of the server.
type webBackend struct{ s *Server }

func (b webBackend) Sessions() *session.Service { return b.s.sessions }

func (b webBackend) Broker() (*permission.Broker, error) { return b.s.broker() }

func (b webBackend) Agents() ([]agents.Agent, error) {
	loc, err := b.s.locations.Get("")
	if err != nil {
		return nil, err
	}
	return loc.Agents, nil
}

func (b webBackend) Models() []webapp.Model {
	_, list := b.s.catalog()
	out := make([]webapp.Model, 0, len(list))
	for _, m := range list {
		out = append(out, webapp.Model{ProviderID: m.ProviderID, ID: m.ID})
	}
	return out
}

func (b webBackend) Unconfined() string {
	switch st := b.s.opts.Sandbox.Status(); st.Mode {
	case "off":
		return "The sandbox is off: the agent's commands and plugins run with the server's privileges."
	case "unavailable":
		return "No sandbox can be made on this host, so the agent's commands and plugins are refused: " + st.Reason
	}
	return ""
}

func (b webBackend) DefaultDirectory() string {
	loc, err := b.s.locations.Get("")
	if err != nil {
		return ""
	}
	return loc.Directory
}

// csrfKey is the key the web app signs its CSRF token with: derived from
// the password, so a password change invalidates open forms; none (a
// random key of the process) when authentication is off.
func (a *Auth) csrfKey() []byte {
	if !a.Enabled() {
		return nil
	}
	return a.key()
}
