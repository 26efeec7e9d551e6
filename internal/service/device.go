package service

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math/big"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// Device flow constants (RFC 8628 and the Console's device sign-in).
const (
	DeviceCodeLifetime = 600 * time.Second
	DeviceInterval     = 5 // seconds
	// pollTolerance forgives polls that arrive a little early (clients
	// tick at a fixed cadence; the network adds jitter).
	pollTolerance = time.Second
	// RefreshTokenTTL bounds a refresh token; FamilyTTL bounds a sign-in.
	RefreshTokenTTL = 30 * 24 * time.Hour
	FamilyTTL       = 90 * 24 * time.Hour
)

// ClaudeCodeClient is the client id of Claude Code's gateway sign-in. The
// released CLI sends no client_id: it starts its device authorization with
// the form parameter surface=claude_code, and polls, refreshes and revokes
// with no client id at all (see SurfaceClient). Its sign-ins are always
// bound to the workspace the person picks when approving.
const ClaudeCodeClient = "claude-code"

// SurfaceClaudeCode is the surface parameter Claude Code's device
// authorization carries.
const SurfaceClaudeCode = "claude_code"

// SurfaceClient is the client id of a device authorization's surface
// parameter, or "" for a surface no client of this Console has.
func SurfaceClient(surface string) string {
	if surface == SurfaceClaudeCode {
		return ClaudeCodeClient
	}
	return ""
}

// clientNames are the names the Console shows for the clients it knows.
var clientNames = map[string]string{
	ClaudeCodeClient: "Claude Code",
	"opencode-cli":   "OpenCode",
	"agentgate-cli":  "agentgate CLI",
	WebClientID:      "Console web",
}

// ClientName is what the Console calls a client id ("" for one it does not
// know: the page then shows the id alone).
func ClientName(clientID string) string { return clientNames[clientID] }

// UserCodeAlphabet is RFC 8628's base-20 set: no vowels, no digits.
const UserCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"

// OAuthError is an RFC 6749 §5.2 / RFC 8628 §3.5 error.
type OAuthError struct {
	Status      int
	Code        string
	Description string
	// Interval is the new polling interval of a slow_down, in seconds.
	Interval int
	// RetryAfter, when positive, is sent as the Retry-After header.
	RetryAfter time.Duration

	unknownCode bool // the device_code names no grant of this client
}

func (e *OAuthError) Error() string { return e.Code + ": " + e.Description }

// IsUnknownDeviceCode reports whether err answers a poll with a device_code
// that names no grant of the polling client: what a guesser gets, and what
// the token endpoint counts per client address.
func IsUnknownDeviceCode(err error) bool {
	var oe *OAuthError
	return errors.As(err, &oe) && oe.unknownCode
}

func oauthErr(code, desc string) *OAuthError {
	return &OAuthError{Status: 400, Code: code, Description: desc}
}

// DeviceStart is the device authorization response.
type DeviceStart struct {
	DeviceCode              string `json:"device_code"`
	UserCode                string `json:"user_code"`
	VerificationURI         string `json:"verification_uri"`
	VerificationURIComplete string `json:"verification_uri_complete"`
	ExpiresIn               int    `json:"expires_in"`
	Interval                int    `json:"interval"`
	// LoginNotice is shown by Claude Code while it waits (at most 500
	// characters); other clients get none.
	LoginNotice string `json:"login_notice,omitempty"`
}

// TokenPair is a token endpoint answer.
type TokenPair struct {
	AccessToken  string  `json:"access_token"`
	TokenType    string  `json:"token_type"`
	ExpiresIn    int     `json:"expires_in"`
	RefreshToken string  `json:"refresh_token"`
	OrgID        *string `json:"org_id"`
	// Email is the signed-in person's, so that the CLI can ask its user to
	// confirm the account before it keeps the tokens.
	Email string `json:"email,omitempty"`
}

func newUserCode() string {
	b := make([]byte, 8)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(UserCodeAlphabet))))
		if err != nil {
			panic(err)
		}
		b[i] = UserCodeAlphabet[n.Int64()]
	}
	return string(b[:4]) + "-" + string(b[4:])
}

// NormalizeUserCode upper-cases a user code and drops dashes and spaces; it
// reports false unless exactly eight characters of the alphabet remain.
func NormalizeUserCode(s string) (string, bool) {
	s = strings.ToUpper(strings.NewReplacer("-", "", " ", "", "\t", "").Replace(s))
	if len(s) != 8 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(UserCodeAlphabet, rune(s[i])) {
			return "", false
		}
	}
	return s, true
}

// FormatUserCode shows a normalised code as XXXX-XXXX.
func FormatUserCode(s string) string {
	if len(s) == 8 {
		return s[:4] + "-" + s[4:]
	}
	return s
}

func (s *Service) macHex(v string) string { return hex.EncodeToString(s.Secrets.MAC(v)) }

// StartDevice begins a device authorization for a configured client.
// verificationPath is the Console path of the verification page.
func (s *Service) StartDevice(ctx context.Context, clientID string, orgScope bool, verificationPath string) (*DeviceStart, error) {
	return s.StartDeviceFor(ctx, DeviceRequest{ClientID: clientID, OrgScope: orgScope, VerificationURI: verificationPath})
}

// DeviceRequest is a device authorization request.
type DeviceRequest struct {
	ClientID string
	// OrgScope makes the person pick a workspace at approval and binds the
	// tokens to it; always so for Claude Code.
	OrgScope bool
	// VerificationURI is the verification page's address.
	VerificationURI string
	// RequestIP is the client address the request came from, shown on the
	// verification page.
	RequestIP string
}

// StartDeviceFor begins a device authorization for a configured client.
func (s *Service) StartDeviceFor(ctx context.Context, in DeviceRequest) (*DeviceStart, error) {
	clientID, orgScope, verificationPath := in.ClientID, in.OrgScope || in.ClientID == ClaudeCodeClient, in.VerificationURI
	now := s.now()
	for attempt := 0; attempt < 3; attempt++ {
		raw := make([]byte, 32)
		rand.Read(raw)
		deviceCode := "ag_dc_" + base64.RawURLEncoding.EncodeToString(raw)
		userCode := newUserCode()
		norm, _ := NormalizeUserCode(userCode)
		g := &store.DeviceGrant{ID: s.macHex(deviceCode), UserCodeMAC: s.macHex("user-code:" + norm), ClientID: clientID,
			OrgScope: orgScope, State: store.DevicePending, Created: now, ExpiresAt: now.Add(DeviceCodeLifetime), Interval: DeviceInterval,
			RequestIP: limitString(in.RequestIP, 64)}
		err := s.Store.Update(ctx, func(tx store.Tx) error { return tx.PutDeviceGrant(g, true) })
		if errors.Is(err, store.ErrExists) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &DeviceStart{DeviceCode: deviceCode, UserCode: userCode, VerificationURI: verificationPath,
			VerificationURIComplete: verificationPath + "?user_code=" + userCode,
			ExpiresIn:               int(DeviceCodeLifetime / time.Second), Interval: DeviceInterval}, nil
	}
	return nil, errors.New("could not make a unique user code")
}

// PollDevice answers a device-code grant poll, in RFC 8628 §3.4/§3.5 order:
// unknown or other client's code → invalid_grant; expired → expired_token;
// too fast → slow_down (interval +5 s, kept); denied → access_denied;
// pending → authorization_pending; approved → the code is consumed and
// tokens issued, in one transaction, after membership is re-checked.
func (s *Service) PollDevice(ctx context.Context, clientID, deviceCode string) (*TokenPair, error) {
	if deviceCode == "" {
		return nil, oauthErr("invalid_request", "device_code is required")
	}
	id := s.macHex(deviceCode)
	now := s.Clock.Now().UTC()
	var out *TokenPair
	var oerr *OAuthError
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		out, oerr = nil, nil
		g, err := tx.DeviceGrant(id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && g.ClientID != clientID) {
			oerr = oauthErr("invalid_grant", "unknown device_code")
			oerr.unknownCode = true
			return nil
		}
		if err != nil {
			return err
		}
		if g.State == store.DeviceConsumed {
			oerr = oauthErr("invalid_grant", "this device_code was already used")
			return nil
		}
		if !now.Before(g.ExpiresAt) {
			oerr = oauthErr("expired_token", "the device_code expired; start again")
			return nil
		}
		if !g.LastPoll.IsZero() && now.Before(g.LastPoll.Add(time.Duration(g.Interval)*time.Second-pollTolerance)) {
			g.Interval += 5
			g.LastPoll = now
			oerr = oauthErr("slow_down", "polling too fast")
			oerr.Interval = g.Interval
			return tx.PutDeviceGrant(g, false)
		}
		g.LastPoll = now
		switch g.State {
		case store.DeviceDenied:
			oerr = oauthErr("access_denied", "the sign-in was denied")
			return tx.PutDeviceGrant(g, false)
		case store.DevicePending:
			oerr = oauthErr("authorization_pending", "waiting for the person to approve")
			return tx.PutDeviceGrant(g, false)
		}
		// Approved: consume and issue.
		g.State = store.DeviceConsumed
		person, err := tx.Person(g.PersonID)
		if err != nil || person.Disabled {
			oerr = oauthErr("invalid_grant", "the approving person can no longer sign in")
			return tx.PutDeviceGrant(g, false)
		}
		if g.Workspace != "" {
			if _, err := workspace(tx, g.Workspace); err != nil {
				oerr = oauthErr("invalid_grant", "the chosen workspace is gone")
				return tx.PutDeviceGrant(g, false)
			}
			if _, err := tx.Member(g.Workspace, g.PersonID); err != nil {
				oerr = oauthErr("invalid_grant", "the person is no longer a member of the chosen workspace")
				return tx.PutDeviceGrant(g, false)
			}
		}
		fam := &store.TokenFamily{ID: secrets.NewID("tfm_"), PersonID: g.PersonID, Workspace: g.Workspace, ClientID: clientID,
			Created: now, ExpiresAt: now.Add(FamilyTTL)}
		if err := tx.PutTokenFamily(fam); err != nil {
			return err
		}
		g.FamilyID = fam.ID
		if out, err = s.issuePair(tx, fam, now); err != nil {
			return err
		}
		out.Email = emailFor(fam, person)
		return tx.PutDeviceGrant(g, false)
	})
	if err != nil {
		return nil, err
	}
	if oerr != nil {
		return nil, oerr
	}
	return out, nil
}

// issuePair issues an access token and a refresh token of a family.
func (s *Service) issuePair(tx store.Tx, fam *store.TokenFamily, now time.Time) (*TokenPair, error) {
	at, atID := secrets.NewToken(secrets.PrefixAccessToken)
	rt, rtID := secrets.NewToken(secrets.PrefixRefreshToken)
	atExp := now.Add(s.AccessTokenTTL)
	if atExp.After(fam.ExpiresAt) {
		atExp = fam.ExpiresAt
	}
	rtExp := now.Add(RefreshTokenTTL)
	if rtExp.After(fam.ExpiresAt) {
		rtExp = fam.ExpiresAt
	}
	if err := tx.PutToken(&store.Token{ID: atID, Kind: store.TokenAccess, FamilyID: fam.ID, MAC: s.Secrets.MAC(at), Created: now, ExpiresAt: atExp}, true); err != nil {
		return nil, err
	}
	if err := tx.PutToken(&store.Token{ID: rtID, Kind: store.TokenRefresh, FamilyID: fam.ID, MAC: s.Secrets.MAC(rt), Created: now, ExpiresAt: rtExp}, true); err != nil {
		return nil, err
	}
	p := &TokenPair{AccessToken: at, TokenType: "Bearer", ExpiresIn: int(atExp.Sub(now) / time.Second), RefreshToken: rt}
	if fam.Workspace != "" {
		ws := fam.Workspace
		p.OrgID = &ws
	}
	return p, nil
}

// emailFor is the email a token answer of fam carries: the person's, for
// Claude Code (which asks its user to confirm the account before keeping
// the tokens); none for other clients, whose answers stay as they were.
func emailFor(fam *store.TokenFamily, person *store.Person) string {
	if fam.ClientID == ClaudeCodeClient {
		return person.Email
	}
	return ""
}

// Refresh rotates a refresh token: a valid, unused one returns a new pair in
// the same family (workspace binding kept) and is spent in the same
// transaction. Presenting a spent refresh token revokes the whole family —
// every access and refresh token of that sign-in — and answers
// invalid_grant. Of two concurrent refreshes with one token, exactly one
// gets the new pair; the other is a reuse, which revokes the family
// (RFC 9700 §4.14.2: a race cannot be told from theft).
func (s *Service) Refresh(ctx context.Context, clientID, refreshToken string) (*TokenPair, error) {
	tok, ok := secrets.ParseToken(refreshToken)
	if !ok || tok.Prefix != secrets.PrefixRefreshToken {
		return nil, oauthErr("invalid_grant", "unknown refresh_token")
	}
	mac := s.Secrets.MAC(tok.Secret)
	now := s.Clock.Now().UTC()
	var out *TokenPair
	var oerr *OAuthError
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		out, oerr = nil, nil
		t, err := tx.Token(tok.ID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (t.Kind != store.TokenRefresh || !secrets.Equal(t.MAC, mac))) {
			oerr = oauthErr("invalid_grant", "unknown refresh_token")
			return nil
		}
		if err != nil {
			return err
		}
		fam, err := tx.TokenFamily(t.FamilyID)
		if err != nil {
			oerr = oauthErr("invalid_grant", "unknown refresh_token")
			return nil
		}
		if fam.ClientID != clientID {
			oerr = oauthErr("invalid_grant", "this refresh_token belongs to another client")
			return nil
		}
		if fam.RevokedAt != nil {
			oerr = oauthErr("invalid_grant", "this sign-in was revoked")
			return nil
		}
		if t.UsedAt != nil {
			fam.RevokedAt = &now
			oerr = oauthErr("invalid_grant", "this refresh_token was already used: the whole sign-in is revoked")
			s.Logger.Warn("refresh token reuse: sign-in revoked", zapFamily(fam.ID))
			return tx.PutTokenFamily(fam)
		}
		if !now.Before(t.ExpiresAt) || !now.Before(fam.ExpiresAt) {
			oerr = oauthErr("invalid_grant", "the refresh_token expired")
			return nil
		}
		person, err := tx.Person(fam.PersonID)
		revoke := err != nil || person.Disabled
		if !revoke && fam.Workspace != "" {
			_, werr := workspace(tx, fam.Workspace)
			_, merr := tx.Member(fam.Workspace, fam.PersonID)
			revoke = werr != nil || merr != nil
		}
		if revoke {
			fam.RevokedAt = &now
			oerr = oauthErr("invalid_grant", "the person can no longer use this sign-in")
			return tx.PutTokenFamily(fam)
		}
		t.UsedAt = &now
		if err := tx.PutToken(t, false); err != nil {
			return err
		}
		if out, err = s.issuePair(tx, fam, now); err != nil {
			return err
		}
		out.Email = emailFor(fam, person)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if oerr != nil {
		return nil, oerr
	}
	return out, nil
}

// DeviceView is what the verification page shows of a pending grant: the
// code, the client that asks (its id and, for a client the Console knows,
// its name), from which address and when the sign-in started.
type DeviceView struct {
	UserCode      string
	ClientID      string
	ClientName    string
	OrgScope      bool
	Expires       time.Time
	Requested     time.Time
	RequestedFrom string // "" when not known (a sign-in started before it was recorded)
}

// errNoSuchCode is the one answer for unknown, expired and finished codes.
var errNoSuchCode = apierr.NotFound("DeviceCodeNotFound", "this code is not valid: check it, or start the sign-in again")

// LookupUserCode finds a pending, unexpired device grant by its user code.
func (s *Service) LookupUserCode(ctx context.Context, userCode string) (*DeviceView, error) {
	norm, ok := NormalizeUserCode(userCode)
	if !ok {
		return nil, errNoSuchCode
	}
	var v *DeviceView
	err := s.Store.View(ctx, func(tx store.Tx) error {
		g, err := tx.DeviceGrantByUserCode(s.macHex("user-code:" + norm))
		if errors.Is(err, store.ErrNotFound) || (err == nil && (g.State != store.DevicePending || !s.Clock.Now().Before(g.ExpiresAt))) {
			return errNoSuchCode
		}
		if err != nil {
			return err
		}
		v = &DeviceView{UserCode: FormatUserCode(norm), ClientID: g.ClientID, ClientName: ClientName(g.ClientID), OrgScope: g.OrgScope,
			Expires: g.ExpiresAt, Requested: g.Created, RequestedFrom: g.RequestIP}
		return nil
	})
	return v, err
}

// DecideDevice approves or denies a pending grant for a signed-in person.
// With org scope, approval binds the chosen workspace, of which the person
// must be a member.
func (s *Service) DecideDevice(ctx context.Context, personID, userCode string, approve bool, workspaceID string) error {
	norm, ok := NormalizeUserCode(userCode)
	if !ok {
		return errNoSuchCode
	}
	now := s.Clock.Now().UTC()
	return s.Store.Update(ctx, func(tx store.Tx) error {
		g, err := tx.DeviceGrantByUserCode(s.macHex("user-code:" + norm))
		if errors.Is(err, store.ErrNotFound) || (err == nil && (g.State != store.DevicePending || !now.Before(g.ExpiresAt))) {
			return errNoSuchCode
		}
		if err != nil {
			return err
		}
		g.PersonID = personID
		g.RequestIP = "" // shown only while the sign-in waits for this decision
		if !approve {
			g.State = store.DeviceDenied
			return tx.PutDeviceGrant(g, false)
		}
		if g.OrgScope {
			if workspaceID == "" {
				return apierr.BadRequest("choose a workspace")
			}
			if _, err := workspace(tx, workspaceID); err != nil {
				return err
			}
			if _, err := tx.Member(workspaceID, personID); err != nil {
				return apierr.Forbidden("you are not a member of this workspace")
			}
			g.Workspace = workspaceID
		}
		g.State = store.DeviceApproved
		return tx.PutDeviceGrant(g, false)
	})
}

// WorkspacesOf lists the live workspaces a person belongs to, with roles.
func (s *Service) WorkspacesOf(ctx context.Context, personID string) ([]WorkspaceRole, error) {
	var out []WorkspaceRole
	err := s.Store.View(ctx, func(tx store.Tx) error {
		ms, err := tx.Memberships(personID)
		if err != nil {
			return err
		}
		for _, m := range ms {
			w, err := workspace(tx, m.Workspace)
			if err != nil {
				continue
			}
			out = append(out, WorkspaceRole{ID: w.ID, Name: w.Name, Role: m.Role})
		}
		return nil
	})
	return out, err
}

// WorkspaceRole is a workspace with the person's role in it.
type WorkspaceRole struct {
	ID, Name, Role string
}

// RevokeToken revokes the sign-in of an access or refresh token issued to
// clientID (RFC 7009): every access and refresh token of that sign-in
// stops working on the very next request, as when the person revokes it on
// the Console. A token that names no live sign-in — malformed, unknown, of
// another kind, or already revoked — is no error: nothing is left to
// revoke. The token of another client's sign-in is refused with
// unauthorized_client, and nothing is revoked.
func (s *Service) RevokeToken(ctx context.Context, clientID, token string) error {
	tok, ok := secrets.ParseToken(token)
	if !ok || (tok.Prefix != secrets.PrefixAccessToken && tok.Prefix != secrets.PrefixRefreshToken) {
		return nil
	}
	kind := store.TokenAccess
	if tok.Prefix == secrets.PrefixRefreshToken {
		kind = store.TokenRefresh
	}
	mac := s.Secrets.MAC(tok.Secret)
	now := s.now()
	return s.Store.Update(ctx, func(tx store.Tx) error {
		t, err := tx.Token(tok.ID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (t.Kind != kind || !secrets.Equal(t.MAC, mac))) {
			return nil
		}
		if err != nil {
			return err
		}
		fam, err := tx.TokenFamily(t.FamilyID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if fam.ClientID != clientID {
			return &OAuthError{Status: 400, Code: "unauthorized_client", Description: "this token was issued to another client"}
		}
		if fam.RevokedAt != nil {
			return nil
		}
		fam.RevokedAt = &now
		return tx.PutTokenFamily(fam)
	})
}

// limitString cuts s to at most n bytes.
func limitString(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
