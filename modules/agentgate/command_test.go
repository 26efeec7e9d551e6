package agentgate

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentgate/agentgate/internal/operator"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/testenv"
)

// TestWorkspaceListByName runs `caddy agentgate workspace list` against
// the operator API on a temporary store: --name keeps the workspaces of
// that name, and --field prints one value a line, so a script's
// WRK=$(caddy agentgate workspace list --name default --field id) holds
// exactly the id, or the command fails saying why.
func TestWorkspaceListByName(t *testing.T) {
	te := testenv.New(t, time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(operator.New(func(context.Context) (*service.Service, error) { return te.Service, nil }))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	run := func(args ...string) (string, error) {
		t.Helper()
		root := &cobra.Command{Use: "agentgate", SilenceUsage: true, SilenceErrors: true}
		var out bytes.Buffer
		addCommands(root, &out)
		root.SetArgs(append(args, "--address", addr))
		err := root.Execute()
		return out.String(), err
	}

	ctx := context.Background()
	def, err := te.Service.CreateWorkspace(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	acme, _ := te.Service.CreateWorkspace(ctx, "Acme")

	if out, err := run("workspace", "list", "--name", "default", "--field", "id"); err != nil || out != def.ID+"\n" {
		t.Fatalf("list --name default --field id: %q, %v; want %q", out, err, def.ID+"\n")
	}
	out, err := run("workspace", "list", "--name", "default")
	if err != nil || !strings.Contains(out, def.ID) || strings.Contains(out, acme.ID) {
		t.Fatalf("list --name default: %q, %v", out, err)
	}
	// --field works on every list: one line per item, in the list's order.
	out, err = run("workspace", "list", "--field", "name")
	if err != nil || len(strings.Split(strings.TrimSpace(out), "\n")) != 2 || !strings.Contains(out, "default\n") || !strings.Contains(out, "Acme\n") {
		t.Fatalf("list --field name: %q, %v", out, err)
	}
	// and still on a single record.
	out, err = run("workspace", "create", "--name", "default", "--field", "id")
	if err != nil || !strings.HasPrefix(out, "wrk_") {
		t.Fatalf("create --field id: %q, %v", out, err)
	}
	again := strings.TrimSpace(out)

	// Two workspaces of one name: a single value cannot be picked.
	if out, err := run("workspace", "list", "--name", "default", "--field", "id"); err == nil || out != "" ||
		!strings.Contains(err.Error(), "2 workspaces are named") || !strings.Contains(err.Error(), again) {
		t.Fatalf("two named default: %q, %v", out, err)
	}
	if out, err := run("workspace", "list", "--name", "default"); err != nil || !strings.Contains(out, again) || !strings.Contains(out, def.ID) {
		t.Fatalf("list --name default, two of them: %q, %v", out, err)
	}
	if out, err := run("workspace", "list", "--name", "nope", "--field", "id"); err == nil || out != "" || !strings.Contains(err.Error(), `no workspace is named "nope"`) {
		t.Fatalf("no such name: %q, %v", out, err)
	}
	if _, err := run("workspace", "list", "--field", "nope"); err == nil || !strings.Contains(err.Error(), `no field "nope"`) {
		t.Fatalf("an unknown field: %v", err)
	}
}

// TestClaudeCodeCommands runs `caddy agentgate claude-code` against the
// operator API: set from a file, get it back, and read the history.
func TestClaudeCodeCommands(t *testing.T) {
	te := testenv.New(t, time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(operator.New(func(context.Context) (*service.Service, error) { return te.Service, nil }))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	run := func(args ...string) (string, error) {
		t.Helper()
		root := &cobra.Command{Use: "agentgate", SilenceUsage: true, SilenceErrors: true}
		var out bytes.Buffer
		addCommands(root, &out)
		root.SetArgs(append(args, "--address", addr))
		err := root.Execute()
		return out.String(), err
	}
	ws, err := te.Service.CreateWorkspace(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "claude-code.json")
	if err := os.WriteFile(file, []byte(`{"permissions": {"deny": ["WebFetch"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run("claude-code", "set", "--workspace", ws.ID, "--file", file, "--field", "version"); err != nil || out != "1\n" {
		t.Fatalf("set: %q %v", out, err)
	}
	if out, err := run("claude-code", "get", "--workspace", ws.ID, "--field", "settings"); err != nil || out != `{"permissions":{"deny":["WebFetch"]}}`+"\n" {
		t.Fatalf("get: %q %v", out, err)
	}
	if out, err := run("claude-code", "history", "--workspace", ws.ID, "--field", "actor_kind"); err != nil || out != "operator\n" {
		t.Fatalf("history: %q %v", out, err)
	}
	// A refused document: the command fails naming the key; nothing changes.
	if err := os.WriteFile(file, []byte(`{"hooks": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run("claude-code", "set", "--workspace", ws.ID, "--file", file); err == nil || !strings.Contains(err.Error(), "hooks (runs commands)") {
		t.Fatalf("a refused document: %q %v", out, err)
	}
	if out, _ := run("claude-code", "history", "--workspace", ws.ID, "--field", "version"); out != "1\n" {
		t.Fatalf("history after a refusal: %q", out)
	}
}
