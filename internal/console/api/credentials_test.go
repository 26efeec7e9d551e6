package api_test

import (
	"net/http"
	"testing"

	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// session starts a Console web session for a person straight in the store
// (signing in hashes a password, slow under -race) and returns its cookie
// value.
func (e *env) session(personID string) string {
	e.t.Helper()
	now := e.clk.Now()
	fam := &store.TokenFamily{ID: secrets.NewID("tfm_"), PersonID: personID, ClientID: service.WebClientID, Created: now, ExpiresAt: now.Add(service.SessionTTL)}
	tok, id := secrets.NewToken(secrets.PrefixWebSession)
	err := e.st.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutTokenFamily(fam); err != nil {
			return err
		}
		return tx.PutToken(&store.Token{ID: id, Kind: store.TokenSession, FamilyID: fam.ID, MAC: e.svc.Secrets.MAC(tok), Created: now, ExpiresAt: fam.ExpiresAt}, true)
	})
	if err != nil {
		e.t.Fatalf("session: %v", err)
	}
	return tok
}

// A bearer credential plus the session cookie of another principal is
// refused with 400 AmbiguousCredential; plus the cookie of the same person
// it goes through, as does a stale cookie. Two different bearer tokens are
// refused the same way.
func TestAmbiguousConsoleCredential(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	owner, admin := e.session(f.owner), e.session(f.admin)
	cookie := func(name, value string) http.Header {
		return http.Header{"Cookie": {(&http.Cookie{Name: name, Value: value}).String()}}
	}
	for _, path := range []string{"/api/v1/workspace", "/api/user"} {
		for _, name := range []string{service.SessionCookiePlain, service.SessionCookieTLS} {
			for _, c := range []struct {
				what, cred, cookie string
				status             int
				tag                string
			}{
				{"owner's token, admin's cookie", f.ownTok, admin, 400, "AmbiguousCredential"},
				{"admin's token, owner's cookie", f.adminTok, owner, 400, "AmbiguousCredential"},
				{"a key, a person's cookie", f.all, owner, 400, "AmbiguousCredential"},
				{"owner's token, owner's cookie", f.ownTok, owner, 200, ""},
				{"owner's unbound token, owner's cookie", f.unbTok, owner, 0, ""},
				{"owner's token, a stale cookie", f.ownTok, "ag_ws_forged", 200, ""},
			} {
				status := c.status
				if status == 0 { // an unbound token reads the account routes only
					status = 200
					if path != "/api/user" {
						continue
					}
				}
				if c.cred == f.all && path == "/api/user" {
					continue // a key has no account
				}
				r := e.do(req{method: "GET", path: path, cred: c.cred, header: cookie(name, c.cookie)})
				wantStatus(t, path+" "+name+": "+c.what, r, status, c.tag)
			}
		}
	}
	// Both cookie names, one of them another person's.
	h := http.Header{"Cookie": {service.SessionCookiePlain + "=" + owner + "; " + service.SessionCookieTLS + "=" + admin}}
	wantStatus(t, "two cookies", e.do(req{method: "GET", path: "/api/v1/workspace", cred: f.ownTok, header: h}), 400, "AmbiguousCredential")

	// Two Authorization headers.
	two := http.Header{"Authorization": {"Bearer " + f.ownTok, "Bearer " + f.adminTok}}
	wantStatus(t, "two bearers", e.do(req{method: "GET", path: "/api/v1/workspace", header: two}), 400, "AmbiguousCredential")
	wrong := http.Header{"Authorization": {"Bearer " + f.ownTok, "Bearer agt_notatoken0123456789"}}
	wantStatus(t, "a bearer and a wrong one", e.do(req{method: "GET", path: "/api/v1/workspace", header: wrong}), 400, "AmbiguousCredential")
	same := http.Header{"Authorization": {"Bearer " + f.ownTok, "Bearer " + f.ownTok}}
	wantStatus(t, "the same bearer twice", e.do(req{method: "GET", path: "/api/v1/workspace", header: same}), 200, "")
}
