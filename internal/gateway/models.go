package gateway

import (
	"net/http"
	"sort"
	"strings"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/store"
)

// listModels answers GET /models and GET /models/<id> from the store: the
// connection's enabled models under the names clients send, sorted, in the
// list shape of the connection's kind. No provider call, no usage record.
func listModels(w http.ResponseWriter, conn *store.Connection, route formats.Route) *apierr.Error {
	f := formats.OfKind(conn.Kind, 0)
	info := func(id string, m store.Model) formats.ModelInfo {
		return formats.ModelInfo{ID: id, Name: m.Name, Created: conn.Created, MaxOutputTokens: m.MaxOutputTokens}
	}
	var body []byte
	if route.Op == formats.GetModel {
		id := strings.TrimPrefix(route.Model, "models/")
		m, ok := conn.Models[id]
		if !ok || !m.Enabled {
			return apierr.NotFound("ModelNotFound", "model %q is not enabled on this connection", id)
		}
		body = formats.ModelObject(f, info(id, m), conn.Kind)
	} else {
		ids := make([]string, 0, len(conn.Models))
		for id, m := range conn.Models {
			if m.Enabled {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		list := make([]formats.ModelInfo, len(ids))
		for i, id := range ids {
			list[i] = info(id, conn.Models[id])
		}
		body = formats.ModelList(f, list, conn.Kind)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
	return nil
}
