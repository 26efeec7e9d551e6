package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/secrets"
)

// cliData decodes the {"data": …} a `caddy agentgate` command printed.
func cliData(t *testing.T, what string, stdout []byte, out any) {
	t.Helper()
	decodeData(t, "caddy agentgate "+what, stdout, out)
}

// TestBootstrapWithCommands bootstraps a workspace the way an operator does,
// with the real `caddy agentgate` commands against the admin API, then works
// over the Console API as the owner and with service-account keys. Its
// subtest checks that the server's log, captured across all of it, holds
// none of the secrets that went through the server.
func TestBootstrapWithCommands(t *testing.T) {
	bin := caddyBinary(t)
	ctx := testContext(t, 3*time.Minute)
	// debug and an access log: the most the server ever logs.
	s := startServer(t, ctx, bin, config{DataDir: filepath.Join(t.TempDir(), "data"), Debug: true, AccessLog: true})

	type secret struct{ what, value string }
	var secretsUsed []secret

	// The operator creates a workspace, its owner and the owner's token.
	var ws idName
	cliData(t, "workspace create", s.cli(t, ctx, "workspace", "create", "--name", "Acme"), &ws)
	if !strings.HasPrefix(ws.ID, "wrk_") || ws.Name != "Acme" {
		t.Fatalf("workspace create answered %+v", ws)
	}

	password := "pw-" + randomHex(16)
	secretsUsed = append(secretsUsed, secret{"password", password})
	pwFile := filepath.Join(t.TempDir(), "ann.pw")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := s.cli(t, ctx, "person", "create", "--email", "ann@example.com", "--name", "Ann",
		"--password-file", pwFile, "--workspace", ws.ID, "--role", "owner")
	if strings.Contains(string(out), password) {
		t.Errorf("person create printed the password: %s", out)
	}
	var person struct {
		ID    string `json:"id"`
		Email string `json:"email"`
	}
	cliData(t, "person create", out, &person)
	if !strings.HasPrefix(person.ID, "usr_") || person.Email != "ann@example.com" {
		t.Fatalf("person create answered %s", out)
	}

	var tok struct {
		AccessToken string  `json:"access_token"`
		TokenType   string  `json:"token_type"`
		OrgID       *string `json:"org_id"`
	}
	cliData(t, "token", s.cli(t, ctx, "token", "--person", person.ID, "--workspace", ws.ID), &tok)
	if !strings.HasPrefix(tok.AccessToken, secrets.PrefixAccessToken) || tok.OrgID == nil || *tok.OrgID != ws.ID {
		t.Fatalf("token answered %+v", tok)
	}
	secretsUsed = append(secretsUsed, secret{"access token", tok.AccessToken})

	// The owner creates a service account and an Inference only key over
	// the Console API.
	var sa idName
	must(t, "create service account", 201, &sa)(s.console(ctx, "POST", "/api/v1/service-accounts", tok.AccessToken,
		map[string]any{"name": "ci"}))
	if !strings.HasPrefix(sa.ID, "sa_") || sa.Name != "ci" {
		t.Fatalf("create service account answered %+v", sa)
	}
	var key struct {
		ID         string `json:"id"`
		Key        string `json:"key"`
		Permission string `json:"permission"`
	}
	must(t, "create key", 201, &key)(s.console(ctx, "POST", "/api/v1/service-accounts/"+sa.ID+"/keys", tok.AccessToken,
		map[string]any{"name": "ci-key", "permission": "inference"}))
	if !strings.HasPrefix(key.Key, secrets.PrefixServiceKey) || key.Permission != "inference" {
		t.Fatalf("create key answered %+v", key)
	}
	secretsUsed = append(secretsUsed, secret{"console-created key", key.Key})

	// The key reads the config but cannot manage service accounts.
	st, body, err := s.console(ctx, "GET", "/api/v2/config", key.Key, nil)
	must(t, "GET /api/v2/config with the inference key", 200, nil)(st, body, err)
	if !json.Valid(body) {
		t.Errorf("GET /api/v2/config answered invalid JSON: %s", body)
	}
	must(t, "GET /api/v1/service-accounts with the inference key", 403, nil)(s.console(ctx, "GET", "/api/v1/service-accounts", key.Key, nil))
	listed := s.consoleServiceAccounts(t, ctx, tok.AccessToken)
	if _, ok := listed[sa.ID]; !ok {
		t.Errorf("the owner's list of service accounts lacks %s: %v", sa.ID, listed)
	}

	// A key made with `caddy agentgate key create` works, and `key revoke`
	// stops it on the very next request.
	var cliKey struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	cliData(t, "key create", s.cli(t, ctx, "key", "create", "--workspace", ws.ID, "--service-account", sa.ID,
		"--name", "cli-key", "--permission", "inference"), &cliKey)
	if !strings.HasPrefix(cliKey.Key, secrets.PrefixServiceKey) || cliKey.ID == "" {
		t.Fatalf("key create answered %+v", cliKey)
	}
	secretsUsed = append(secretsUsed, secret{"CLI-created key", cliKey.Key})
	must(t, "GET /api/v2/config with the CLI key", 200, nil)(s.console(ctx, "GET", "/api/v2/config", cliKey.Key, nil))
	if out := s.cli(t, ctx, "key", "revoke", "--workspace", ws.ID, "--service-account", sa.ID, "--id", cliKey.ID); len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("key revoke printed %q, want nothing (204)", out)
	}
	must(t, "GET /api/v2/config with the revoked CLI key", 401, nil)(s.console(ctx, "GET", "/api/v2/config", cliKey.Key, nil))
	must(t, "GET /api/v2/config with the other key after the revocation", 200, nil)(s.console(ctx, "GET", "/api/v2/config", key.Key, nil))

	// A credential in a query string or a bad bearer must not be logged
	// either (the access log records URIs).
	must(t, "GET /api/v2/config with the revoked key again", 401, nil)(s.console(ctx, "GET", "/api/v2/config?probe=1", cliKey.Key, nil))

	if mk, err := os.ReadFile(filepath.Join(s.dataDir(), "master.key")); err == nil && len(strings.TrimSpace(string(mk))) > 0 {
		secretsUsed = append(secretsUsed, secret{"master key", strings.TrimSpace(string(mk))})
	} else {
		t.Errorf("reading the generated master key: %v", err)
	}

	// Stop the server so that its log is complete.
	s.stop()

	t.Run("LogsNeverContainSecrets", func(t *testing.T) {
		logs := s.stderr.String() + s.stdout.String()
		// The capture works: the log has the store's start and the access log.
		for _, want := range []string{"store ready", "/api/v2/config", "/agentgate/people"} {
			if !strings.Contains(logs, want) {
				t.Fatalf("the captured log lacks %q; is the log captured? log:\n%s", want, tail(logs, 4000))
			}
		}
		for _, sec := range secretsUsed {
			needles := []string{sec.value}
			// The random part of a token on its own, in case it is logged
			// cut up or re-encoded around its prefix and id.
			if tk, ok := secrets.ParseToken(sec.value); ok {
				needles = append(needles, sec.value[len(tk.Prefix)+secrets.IDLen+1:len(sec.value)-secrets.CRCLen])
			}
			for _, n := range needles {
				if i := strings.Index(logs, n); i >= 0 {
					lo, hi := max(0, i-300), min(len(logs), i+len(n)+100)
					t.Errorf("the server log contains the %s:\n…%s…", sec.what, logs[lo:hi])
				}
			}
		}
		t.Logf("checked %d secrets against %d bytes of log", len(secretsUsed), len(logs))
	})
}
