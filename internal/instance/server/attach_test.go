package server

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file: attachment that names a link in the project to a file outside
// the roots is refused as an unreadable file, and nothing of that file
// reaches the provider; a file of the project (through a link in it too)
// is attached.
func TestAttachmentThroughALinkOutIsRefused(t *testing.T) {
	sc := &script{}
	h := newAgentHarness(t, "chat", sc)
	outside := canonicalTempDir(t)
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("OUTSIDE-SECRET-42"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(h.dir, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(h.dir, "leakdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "notes.txt"), []byte("INSIDE-NOTES-7"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("notes.txt", filepath.Join(h.dir, "notes-link.txt")); err != nil {
		t.Fatal(err)
	}
	h.send("POST", "/api/session", map[string]any{"id": "ses_att", "agent": "build"})
	for _, p := range []string{filepath.Join(h.dir, "leak.txt"), filepath.Join(h.dir, "leakdir", "secret.txt"), secret} {
		uri := "file://" + p
		r := h.send("POST", "/api/session/ses_att/prompt", map[string]any{"text": "look", "files": []map[string]any{{"uri": uri}}})
		m := wantError(t, r, 400, "InvalidRequestError", nil)
		if msg, _ := m["message"].(string); !strings.Contains(msg, "File is not readable: "+uri) {
			t.Fatalf("%s: %s", uri, r.body)
		}
	}
	h.prompt("ses_att", "look", map[string]any{"files": []map[string]any{
		{"uri": "file://" + filepath.Join(h.dir, "notes.txt")}, {"uri": "file://" + filepath.Join(h.dir, "notes-link.txt")}}})
	h.waitIdle("ses_att", 1)
	bodies := strings.Join(sc.seen(), "\n")
	if bodies == "" {
		t.Fatal("the provider was not called")
	}
	for _, leak := range []string{"OUTSIDE-SECRET-42", base64.StdEncoding.EncodeToString([]byte("OUTSIDE-SECRET-42"))} {
		if strings.Contains(bodies, leak) {
			t.Fatalf("the outside file reached the provider: %s", bodies)
		}
	}
	if !strings.Contains(bodies, "INSIDE-NOTES-7") && !strings.Contains(bodies, base64.StdEncoding.EncodeToString([]byte("INSIDE-NOTES-7"))) {
		t.Fatalf("the project's file did not reach the provider: %s", bodies)
	}
}

// With allowed roots, a link in the project may lead anywhere in the
// roots, not out of them.
func TestAttachmentStaysInTheAllowedRoots(t *testing.T) {
	base := canonicalTempDir(t)
	root := filepath.Join(base, "root")
	proj := filepath.Join(root, "proj")
	other := filepath.Join(root, "other")
	for _, d := range []string{proj, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(other, "ok.txt"), []byte("in the roots"), 0o644)
	os.WriteFile(filepath.Join(base, "secret.txt"), []byte("outside the roots"), 0o644)
	os.Symlink(filepath.Join(other, "ok.txt"), filepath.Join(proj, "ok-link.txt"))
	os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(proj, "leak.txt"))
	h := newSessHarness(t, func(o *Options) { o.AllowedRoots = []string{root}; o.DefaultDirectory = proj })
	s := h.createSession(nil)
	r := h.send("POST", "/api/session/"+s.ID+"/prompt", map[string]any{"text": "x", "files": []map[string]any{{"uri": "file://" + filepath.Join(proj, "ok-link.txt")}}})
	if r.status != 200 || !strings.Contains(string(r.body), base64.StdEncoding.EncodeToString([]byte("in the roots"))) {
		t.Fatalf("a link inside the roots: %d %s", r.status, r.body)
	}
	uri := "file://" + filepath.Join(proj, "leak.txt")
	r = h.send("POST", "/api/session/"+s.ID+"/prompt", map[string]any{"text": "x", "files": []map[string]any{{"uri": uri}}})
	m := wantError(t, r, 400, "InvalidRequestError", nil)
	if msg, _ := m["message"].(string); !strings.Contains(msg, "File is not readable: "+uri) || strings.Contains(string(r.body), "outside the roots") {
		t.Fatalf("a link out of the roots: %s", r.body)
	}
}
