package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentgate/agentgate/modules/agentgate"
)

// runSandboxBench builds the binary (unless bin is given), runs its
// sandbox bench reps times and writes bench/results/<stamp>-sandbox.md.
func runSandboxBench(ctx context.Context, root, bin, out, stamp string, calls, reps int) (string, error) {
	if bin == "" {
		work, err := os.MkdirTemp("", "agentgate-bench-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(work)
		bin = filepath.Join(work, "caddy")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/caddy")
		build.Dir = root
		if b, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, b)
		}
	}
	status, err := exec.CommandContext(ctx, bin, "agentgate", "sandbox", "status").Output()
	if err != nil {
		return "", fmt.Errorf("sandbox status: %v", err)
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# The sandbox's cost per bash call, %s\n\n", time.Now().Format("2006-01-02"))
	fmt.Fprintf(&md, "`%s agentgate sandbox bench -n %d`, %d times: `bash -c true` started and waited for as the bash tool does, "+
		"in a new sandbox and plainly (its own process group), in turn, from the server's own binary (so the helper's start-up "+
		"is the Caddy binary's). Milliseconds; the first calls of each run are not counted.\n\n", filepath.Base(bin), calls, reps)
	md.WriteString("| run | sandboxed p50 | sandboxed p90 | plain p50 | plain p90 | added p50 |\n|---|---|---|---|---|---|\n")
	var added []float64
	for i := 0; i < reps; i++ {
		b, err := exec.CommandContext(ctx, bin, "agentgate", "sandbox", "bench", "-n", fmt.Sprint(calls)).Output()
		if err != nil {
			return "", fmt.Errorf("sandbox bench: %v", err)
		}
		var f agentgate.SandboxBench
		if err := json.Unmarshal(b, &f); err != nil {
			return "", fmt.Errorf("sandbox bench printed %q: %v", b, err)
		}
		fmt.Fprintf(&md, "| %d | %.1f | %.1f | %.1f | %.1f | %.1f |\n", i+1, f.SandboxedP50, f.SandboxedP90, f.PlainP50, f.PlainP90, f.AddedP50)
		added = append(added, f.AddedP50)
	}
	fmt.Fprintf(&md, "\nMedian of the runs' added p50: **%.1f ms** (target: at most 20 ms).\n\nThe sandbox on this host:\n\n```json\n%s\n```\n",
		median(added), strings.TrimSpace(string(status)))
	if out == "" {
		fmt.Print(md.String())
		return "", nil
	}
	path := filepath.Join(out, stamp+"-sandbox.md")
	return path, os.WriteFile(path, []byte(md.String()), 0o644)
}
