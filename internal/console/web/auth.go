package web

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// Cookie names. On HTTPS the __Host- prefix pins the cookie to this host,
// path / and Secure; plain HTTP (a local Console) cannot use the prefix.
const (
	SessionCookieTLS   = service.SessionCookieTLS
	SessionCookiePlain = service.SessionCookiePlain
	signInCookieTLS    = "__Host-ag_signin"
	signInCookiePlain  = "ag_signin"
)

func sessionCookie(r *http.Request) string {
	if r.TLS != nil {
		return SessionCookieTLS
	}
	return SessionCookiePlain
}

func signInCookie(r *http.Request) string {
	if r.TLS != nil {
		return signInCookieTLS
	}
	return signInCookiePlain
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
}

func clearCookie(w http.ResponseWriter, r *http.Request, name string) { setCookie(w, r, name, "", -1) }

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
func urlPathEscape(s string) string  { return url.PathEscape(s) }

// safeNext returns next when it is a path on this Console, else "/": never
// another host ("//evil", "/\evil", "https://…").
func safeNext(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.ContainsAny(next, "\\\x00\r\n\t") || len(next) > 2048 {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	return u.RequestURI()
}

// signInToken is the anti-forgery token of the sign-in form: an HMAC of a
// random per-browser nonce held in a cookie (so that another site cannot
// sign a browser in to an account of its choosing).
func signInToken(svc *service.Service, nonce string) string {
	return hex.EncodeToString(svc.Secrets.MAC("signin-csrf:" + nonce))[:40]
}

func validNonce(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

type signInData struct {
	Email, Next string
	ForDevice   bool
}

func (h *Web) signInPage(w http.ResponseWriter, r *http.Request) {
	svc := h.service(w, r)
	if svc == nil {
		return
	}
	next := safeNext(r.URL.Query().Get("next"))
	if q := h.optionalSession(r); q != nil && q.sess != nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	h.renderSignIn(w, r, svc, http.StatusOK, signInData{Next: next}, "")
}

func (h *Web) renderSignIn(w http.ResponseWriter, r *http.Request, svc *service.Service, status int, sd signInData, msg string) {
	nonce := ""
	if c, err := r.Cookie(signInCookie(r)); err == nil && validNonce(c.Value) {
		nonce = c.Value
	} else {
		b := make([]byte, 16)
		rand.Read(b)
		nonce = hex.EncodeToString(b)
		setCookie(w, r, signInCookie(r), nonce, 3600)
	}
	sd.ForDevice = strings.HasPrefix(sd.Next, "/device")
	d := &pageData{Title: "Sign in", CSRF: signInToken(svc, nonce), Error: msg, Data: sd, Minimal: true}
	h.render(w, status, "signin", d)
}

func (h *Web) signIn(w http.ResponseWriter, r *http.Request) {
	svc := h.service(w, r)
	if svc == nil {
		return
	}
	if !h.parseForm(w, r, nil) {
		return
	}
	c, err := r.Cookie(signInCookie(r))
	token := r.PostForm.Get("csrf")
	if err != nil || !validNonce(c.Value) || !hmac.Equal([]byte(token), []byte(signInToken(svc, c.Value))) || crossSite(r) {
		h.fail(w, nil, apierr.Forbidden("the sign-in form is out of date or did not come from this Console (CSRF check failed): reload the page and try again"))
		return
	}
	email := store.FoldEmail(strings.TrimSpace(r.PostForm.Get("email")))
	password := r.PostForm.Get("password")
	sd := signInData{Email: email, Next: safeNext(r.PostForm.Get("next"))}
	ip := h.opts.ClientIP(r)
	if wait := h.signInDelay.wait(email, ip); wait > 0 {
		secs := int64((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		h.renderSignIn(w, r, svc, http.StatusTooManyRequests, sd,
			fmt.Sprintf("Too many failed sign-ins. Try again in %s.", waitText(secs)))
		return
	}
	if email == "" || password == "" {
		h.renderSignIn(w, r, svc, http.StatusBadRequest, sd, "Enter your email and password.")
		return
	}
	sess, err := svc.SignIn(r.Context(), email, password)
	if err != nil {
		if apierr.As(err).Status == http.StatusUnauthorized {
			h.signInDelay.failed(email, ip)
			h.renderSignIn(w, r, svc, http.StatusUnauthorized, sd, "The email or password is not correct.")
			return
		}
		h.fail(w, nil, err)
		return
	}
	h.signInDelay.succeeded(email, ip)
	setCookie(w, r, sessionCookie(r), sess.Token, int(service.SessionTTL.Seconds()))
	clearCookie(w, r, signInCookie(r))
	http.Redirect(w, r, sd.Next, http.StatusSeeOther)
}

// waitText says a wait of whole seconds in words.
func waitText(secs int64) string {
	switch {
	case secs == 1:
		return "1 second"
	case secs < 120:
		return strconv.FormatInt(secs, 10) + " seconds"
	}
	return strconv.FormatInt((secs+59)/60, 10) + " minutes"
}

func (h *Web) signOut(w http.ResponseWriter, r *http.Request, q *req) {
	if err := q.svc.SignOut(r.Context(), q.sess); err != nil {
		h.fail(w, q, err)
		return
	}
	clearCookie(w, r, sessionCookie(r))
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

type homeData struct {
	Workspaces []service.WorkspaceRole
	SignIns    []service.SignInView
}

// self is the signed-in person as a principal of no workspace: what their
// own sign-ins are listed and revoked as.
func (q *req) self() *service.Principal {
	return &service.Principal{Kind: service.KindPerson, PersonID: q.sess.Person.ID, FamilyID: q.sess.FamilyID}
}

func (h *Web) home(w http.ResponseWriter, r *http.Request) {
	q, ok := h.signedIn(w, r)
	if !ok {
		return
	}
	wss, err := q.svc.WorkspacesOf(r.Context(), q.sess.Person.ID)
	var sis []service.SignInView
	if err == nil {
		sis, err = q.svc.SignIns(r.Context(), q.self())
	}
	if err != nil {
		h.fail(w, q, err)
		return
	}
	d := q.data("Your workspaces")
	d.Flash = flash(r)
	d.Data = homeData{Workspaces: wss, SignIns: sis}
	h.render(w, http.StatusOK, "home", d)
}

// revokeSignIn revokes one of the person's own sign-ins; its tokens stop
// working at once.
func (h *Web) revokeSignIn(w http.ResponseWriter, r *http.Request, q *req) {
	if err := q.svc.RevokeSignIn(r.Context(), q.self(), r.PathValue("signin")); err != nil {
		h.fail(w, q, err)
		return
	}
	redirectDone(w, r, "/", "signin-revoked")
}
