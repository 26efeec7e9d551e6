package gateway

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/store"
)

// TestRequestSession: every agent's header is read, in the documented
// precedence, and values that cannot be recorded faithfully are dropped.
func TestRequestSession(t *testing.T) {
	max := strings.Repeat("s", store.MaxSessionLen)
	for _, c := range []struct {
		name string
		hdr  [][2]string // as received: canonical names
		want string
	}{
		{"none", nil, ""},
		{"opencode", [][2]string{{"X-Opencode-Session", "ses_1"}}, "ses_1"},
		{"claude code", [][2]string{{"X-Claude-Code-Session-Id", "cc-1"}}, "cc-1"},
		{"qwen code", [][2]string{{"X-Qwen-Code-Session-Id", "q-1"}}, "q-1"},
		{"kilo code", [][2]string{{"X-Kilocode-Taskid", "k-1"}}, "k-1"},
		{"generic", [][2]string{{"X-Session-Id", "g-1"}}, "g-1"},
		{"codex session_id", [][2]string{{"Session_id", "cx-1"}}, "cx-1"},
		{"codex Session-Id", [][2]string{{"Session-Id", "cx-2"}}, "cx-2"},
		{"both codex casings: underscore first", [][2]string{{"Session-Id", "cx-2"}, {"Session_id", "cx-1"}}, "cx-1"},
		{"precedence", [][2]string{{"Session_id", "cx"}, {"X-Session-Id", "g"}, {"X-Kilocode-Taskid", "k"}, {"X-Qwen-Code-Session-Id", "q"},
			{"X-Claude-Code-Session-Id", "cc"}, {"X-Opencode-Session", "oc"}}, "oc"},
		{"claude code over generic", [][2]string{{"X-Session-Id", "g"}, {"X-Claude-Code-Session-Id", "cc"}}, "cc"},
		{"empty falls through", [][2]string{{"X-Opencode-Session", ""}, {"Session_id", "cx"}}, "cx"},
		{"first value of a repeated header", [][2]string{{"X-Opencode-Session", "a"}, {"X-Opencode-Session", "b"}}, "a"},
		{"printable ASCII kept", [][2]string{{"X-Opencode-Session", " !a~"}}, " !a~"},
		{"longest kept", [][2]string{{"X-Opencode-Session", max}}, max},
		{"too long", [][2]string{{"X-Opencode-Session", max + "s"}}, ""},
		{"too long is not replaced by the next", [][2]string{{"X-Opencode-Session", max + "s"}, {"Session_id", "cx"}}, ""},
		{"tab", [][2]string{{"X-Opencode-Session", "a\tb"}}, ""},
		{"newline", [][2]string{{"X-Opencode-Session", "a\nb"}}, ""},
		{"NUL", [][2]string{{"X-Opencode-Session", "a\x00"}}, ""},
		{"DEL", [][2]string{{"X-Opencode-Session", "a\x7f"}}, ""},
		{"non-ASCII", [][2]string{{"X-Opencode-Session", "sé"}}, ""},
	} {
		h := http.Header{}
		for _, kv := range c.hdr {
			h[kv[0]] = append(h[kv[0]], kv[1])
		}
		if got := requestSession(h); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// The session headers are looked up in the header map as they are: each
// must be the form net/http gives a received header's name, or it would
// never be found.
func TestSessionHeadersCanonical(t *testing.T) {
	for _, name := range sessionHeaders {
		if c := http.CanonicalHeaderKey(strings.ToLower(name)); c != name {
			t.Errorf("%q is received as %q", name, c)
		}
		h := http.Header{}
		h.Set(strings.ToLower(name), "ses_x")
		if got := requestSession(h); got != "ses_x" {
			t.Errorf("%s set in lower case: session %q", name, got)
		}
	}
}

// TestHeaderNamesCanonical: every header name the gateway reads or removes
// with a plain map operation (headerValue, delete, Header["…"]) is written
// in the canonical form the server receives it in; one that is not would
// be silently missed (a client's cookie forwarded, X-Org-Id ignored). The
// names are taken from the package's source, so a new one is checked too.
func TestHeaderNamesCanonical(t *testing.T) {
	use := regexp.MustCompile(`(?:headerValue\([^,]+, |delete\([^,]*[hH]eader[^,]*, |[hH]eader\[)"([^"]+)"`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Clone(clientSecretHeaders[:])
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range use.FindAllSubmatch(src, -1) {
			names = append(names, string(m[1]))
		}
	}
	for _, want := range []string{"X-Org-Id", "Content-Encoding", "Content-Type", "Accept-Encoding", "Transfer-Encoding", "Cookie"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s: not found in the source; the pattern no longer matches how names are used", want)
		}
	}
	for _, name := range names {
		if c := http.CanonicalHeaderKey(strings.ToLower(name)); c != name {
			t.Errorf("%q is received as %q", name, c)
		}
	}
}

// TestClientSecretsStrippedAsReceived: the client's secrets are removed
// whatever case the client spelled them in (the server canonicalises the
// names it receives).
func TestClientSecretsStrippedAsReceived(t *testing.T) {
	raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nauthorization: Bearer k\r\nx-api-key: k\r\ncookie: c=1\r\nx-org-id: org\r\nproxy-authorization: Basic eA==\r\nx-goog-api-key: k\r\napi-key: k\r\nx-keep: 1\r\n\r\n"
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if got := headerValue(r.Header, "X-Org-Id"); got != "org" {
		t.Fatalf("X-Org-Id read as %q", got)
	}
	stripClientSecrets(r, nil)
	if len(r.Header) != 1 || r.Header.Get("X-Keep") != "1" {
		t.Fatalf("left: %v", r.Header)
	}
}
