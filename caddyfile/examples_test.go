package caddyfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestExamplesValidate adapts every example Caddyfile and the root
// Caddyfile with no warnings, and validates them: every module provisions,
// without starting anything or opening a store.
func TestExamplesValidate(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("AGENTGATE_MASTER_KEY", strings.Repeat("ab", 32))
	t.Setenv("OPENAI_API_KEY", "sk-test-openai")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-test")
	files, _ := filepath.Glob("../examples/*.Caddyfile")
	files = append(files, "../Caddyfile")
	if len(files) < 3 {
		t.Fatalf("expected the root Caddyfile and at least two examples, found %v", files)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": file})
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			for _, w := range warnings {
				t.Errorf("warning: %s:%d: %s", w.File, w.Line, w.Message)
			}
			if strings.Contains(string(out), "sk-test-openai") || strings.Contains(string(out), strings.Repeat("ab", 32)) {
				t.Fatal("a secret from the environment was written into the adapted JSON")
			}
			var cfg caddy.Config
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.Admin == nil {
				cfg.Admin = &caddy.AdminConfig{}
			}
			cfg.Admin.Disabled = true
			if err := caddy.Validate(&cfg); err != nil {
				t.Fatalf("validate: %v", err)
			}
		})
	}
}

// TestValidateCatchesBadConfig proves validation is not a rubber stamp: a
// declared connection whose credential placeholder is empty, a bad master
// key, and shared PostgreSQL storage without a master key are refused.
func TestValidateCatchesBadConfig(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	for name, c := range map[string]struct{ caddyfile, want string }{
		"empty credential": {`{
	agentgate {
		connection conn_x {
			workspace Acme
			kind openai
			base_url https://api.openai.com/v1
			credential {env.AGENTGATE_TEST_UNSET_VARIABLE}
		}
	}
}
http://localhost:1 {
	workspace_console
}`, "credential is empty"},
		"bad master key": {`{
	agentgate {
		master_key not-a-key
	}
}
http://localhost:1 {
	workspace_console
}`, "master_key"},
		"postgres without master key": {`{
	agentgate {
		storage postgres postgres://agentgate:literal-secret@db.internal/agentgate
	}
}
http://localhost:1 {
	workspace_console
}`, "master_key is required"},
		"bad inference url": {`http://localhost:1 {
	workspace_console {
		inference_url ftp://x
	}
}`, "inference_url"},
		"bad base url": {`{
	agentgate {
		connection conn_x {
			workspace Acme
			kind openai
			base_url not-a-url
			credential literal-secret
		}
	}
}
http://localhost:1 {
	workspace_console
}`, "base_url"},
	} {
		t.Run(name, func(t *testing.T) {
			out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(c.caddyfile), nil)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			var cfg caddy.Config
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			cfg.Admin = &caddy.AdminConfig{Disabled: true}
			err = caddy.Validate(&cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("validate error = %v, want one containing %q", err, c.want)
			}
			if strings.Contains(fmtErr(err), "literal-secret") {
				t.Fatal("the credential leaked into the error")
			}
		})
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
