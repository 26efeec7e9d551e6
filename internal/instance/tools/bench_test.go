package tools

import (
	"context"
	"encoding/json"
	"testing"
)

// BenchmarkReadTool is one small read call: argument check, path
// confinement, the permission callback and the file read.
func BenchmarkReadTool(b *testing.B) {
	env, _ := project(b, map[string]string{"main.go": "package main\n\nfunc main() {}\n"})
	env.Permit = func(context.Context, Ask) error { return nil }
	args := json.RawMessage(`{"filePath":"main.go"}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Call(ctx, env, "read", args); err != nil {
			b.Fatal(err)
		}
	}
}
