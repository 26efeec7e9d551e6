package caddyfile

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/agentgate/agentgate/internal/testenv"
)

// TestExamplesValidate adapts every example Caddyfile (examples/*.Caddyfile
// and those of the example directories, examples/*/Caddyfile and
// examples/*/*.Caddyfile) and the root Caddyfile with no warnings, and
// validates them: every module provisions, without starting anything or
// opening a store. The PostgreSQL DSN points at a listener that must see
// no connection.
func TestExamplesValidate(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("AGENTGATE_MASTER_KEY", strings.Repeat("ab", 32))
	t.Setenv("OPENAI_API_KEY", "sk-test-openai")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-test")
	t.Setenv("AGENT_INSTANCE_PASSWORD", "example-instance-secret")
	db, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var dialed atomic.Int32
	go func() {
		for {
			conn, err := db.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			conn.Close()
		}
	}()
	t.Setenv("AGENTGATE_POSTGRES_DSN", "postgres://agentgate:example-db-secret@"+db.Addr().String()+"/agentgate")
	files, _ := filepath.Glob("../examples/*.Caddyfile")
	for _, pattern := range []string{"../examples/*/Caddyfile", "../examples/*/*.Caddyfile"} {
		more, _ := filepath.Glob(pattern)
		files = append(files, more...)
	}
	files = append(files, "../Caddyfile")
	for _, want := range []string{"../examples/multi-node/Caddyfile", "../examples/multi-node/lb.Caddyfile"} {
		if !slices.Contains(files, want) {
			t.Fatalf("%s is not among the examples found: %v", want, files)
		}
	}
	if len(files) < 5 {
		t.Fatalf("expected the root Caddyfile and at least four examples, found %v", files)
	}
	defer func() {
		if n := dialed.Load(); n != 0 {
			t.Errorf("validating the examples connected to the PostgreSQL DSN %d times", n)
		}
	}()
	for _, file := range files {
		name := strings.TrimPrefix(filepath.ToSlash(file), "../")
		t.Run(name, func(t *testing.T) {
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
			if strings.Contains(string(out), "sk-test-openai") || strings.Contains(string(out), strings.Repeat("ab", 32)) ||
				strings.Contains(string(out), "example-db-secret") || strings.Contains(string(out), "example-instance-secret") {
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
			logsIntoTempDir(t, &cfg)
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

// logsIntoTempDir points every log file of a config (an example writes its
// access logs under /var/log/caddy) into the test's temporary directory:
// validating opens the writers, so the files would be created.
func logsIntoTempDir(t *testing.T, cfg *caddy.Config) {
	t.Helper()
	if cfg.Logging == nil {
		return
	}
	dir := t.TempDir()
	for _, l := range cfg.Logging.Logs {
		var w map[string]any
		if len(l.WriterRaw) == 0 || json.Unmarshal(l.WriterRaw, &w) != nil || w["output"] != "file" {
			continue
		}
		name, _ := w["filename"].(string)
		w["filename"] = filepath.Join(dir, filepath.Base(name))
		raw, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		l.WriterRaw = raw
	}
}

// TestExamplesWriteOnlyTempDirs validates every example with an empty home
// and empty XDG and temporary directories: nothing is written there, nor
// under /var/log (an example's access logs).
func TestExamplesWriteOnlyTempDirs(t *testing.T) {
	const logDir = "/var/log/caddy"
	_, before := os.Stat(logDir)
	testenv.RunIsolated(t, "^(TestExamplesValidate|TestValidateCatchesBadConfig)$")
	if _, after := os.Stat(logDir); os.IsNotExist(before) && after == nil {
		t.Errorf("validating the examples created %s", logDir)
	}
}
