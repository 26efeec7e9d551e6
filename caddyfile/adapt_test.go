// Package caddyfile holds the golden Caddyfile → JSON adapt tests of every
// agentgate directive and global option, and the check that every example
// config adapts and validates.
package caddyfile

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/agentgate/agentgate"
)

var update = flag.Bool("update", false, "rewrite the golden JSON of the adapt tests")

// TestAdapt adapts each testdata/*.caddyfiletest: a Caddyfile, a line of
// ten dashes, then the expected JSON — or "error: <substring>" for a
// Caddyfile that must be rejected.
func TestAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, expected, ok := strings.Cut(string(data), "\n----------\n")
			if !ok {
				t.Fatalf("%s: no ---------- separator", file)
			}
			expected = strings.TrimSpace(expected)
			got, adaptErr := adapt(input)
			if strings.HasPrefix(expected, "error:") {
				want := strings.TrimSpace(strings.TrimPrefix(expected, "error:"))
				if adaptErr == nil {
					t.Fatalf("adapting succeeded, want an error containing %q:\n%s", want, got)
				}
				if !strings.Contains(adaptErr.Error(), want) {
					t.Fatalf("error %q does not contain %q", adaptErr, want)
				}
				return
			}
			if adaptErr != nil {
				t.Fatalf("adapting: %v", adaptErr)
			}
			if *update {
				if err := os.WriteFile(file, []byte(strings.TrimRight(input, "\n")+"\n----------\n"+got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != expected {
				t.Errorf("adapted JSON differs from the golden one (run with -update to accept):\n--- got\n%s\n--- want\n%s", got, expected)
			}
		})
	}
}

func adapt(caddyfile string) (string, error) {
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "\t"); err != nil {
		return "", err
	}
	return buf.String(), nil
}
