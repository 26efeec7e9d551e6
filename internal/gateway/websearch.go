package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/service"
)

// WebsearchPath is the gateway route of the workspace's hosted web search.
const WebsearchPath = "/websearch"

// ServeWebsearch answers POST /websearch {query, max_results}: the
// workspace's hosted web search with the gateway's credentials, metered per
// query against the member's budgets. Errors are JSON with _tag in
// OpenAI's envelope.
func (p *Pipeline) ServeWebsearch(w http.ResponseWriter, r *http.Request) {
	if e := p.websearch(w, r); e != nil {
		writeError(w, formats.Chat, e)
	}
}

func (p *Pipeline) websearch(w http.ResponseWriter, r *http.Request) *apierr.Error {
	q := r.URL.Query()
	cred, conflict := formats.ClientCredential(r.Header, q[formats.QueryKey])
	stripClientSecrets(r, q)
	if conflict {
		return ambiguousCredential()
	}
	svc, err := p.Service(r.Context())
	if err != nil {
		return apierr.As(err)
	}
	if cred == "" {
		return apierr.Unauthorized()
	}
	pr, err := svc.Authenticate(r.Context(), cred, r.Header.Get("X-Org-Id"))
	if err != nil {
		return apierr.As(err)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		return apierr.New(http.StatusMethodNotAllowed, "MethodNotAllowed", "this gateway route takes POST")
	}
	var in service.SearchQuery
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return apierr.BadRequest("the body must be {\"query\": …, \"max_results\": …}")
	}
	ans, err := svc.WebSearch(r.Context(), pr, in)
	if err != nil {
		return apierr.As(err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(ans)
	return nil
}
