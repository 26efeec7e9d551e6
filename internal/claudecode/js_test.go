package claudecode_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/claudecode"
	"github.com/agentgate/agentgate/internal/testenv"
)

// jsChecksum is what the Claude Code CLI does with the settings it holds:
// sort the keys of every object (inserting them into a new object), then
// JSON.stringify and hash. It prints the canonical text, a newline, and
// the checksum.
const jsChecksum = `
const input = require("fs").readFileSync(0, "utf8");
function sortKeys(e) {
  if (Array.isArray(e)) return e.map(sortKeys);
  if (e !== null && typeof e === "object") {
    const o = {};
    for (const k of Object.keys(e).sort()) o[k] = sortKeys(e[k]);
    return o;
  }
  return e;
}
const text = JSON.stringify(sortKeys(JSON.parse(input)));
const sum = "sha256:" + require("crypto").createHash("sha256").update(text).digest("hex");
process.stdout.write(text + "\n" + sum);
`

// canonicalSample has nested keys in every order, keys that are array
// indexes (which a JavaScript object puts first, in numeric order) and
// some that are not, keys that sort differently by UTF-16 units than by
// UTF-8 bytes, unicode, < > & (which Go's encoding/json escapes), U+2028,
// control characters, and numbers JavaScript prints its own way.
const canonicalSample = `{
  "zeta": {"b": 1, "a": [3, {"y": "<script>alert('&amp;')</script>", "x": "naïve ☃ 😀 中文"}]},
  "10": "ten", "9": "nine", "01": "zero-one", "4294967295": "too big for an index", "4294967294": "the largest index",
  "-1": "minus", "1.5": "a fraction",
  "Ω": 1, "😀key": 2, "\uff01bang": 3, "\ue000private": 4, "Zed": 5, "_under": 6,
  "line": "a\u2028b\u2029c", "ctl": "\u0001\u001f\b\t\n\f\r\"\\/\u007f",
  "nums": [0.1, 1e21, 1e-7, -0, 123456789012345678901, 5e-324, 1.7976931348623157e308, 100, 1.5e-6, 0.000001, 2.50, -3.25e3, 1E+2],
  "empty": {}, "arr": [], "null": null, "t": true, "f": false,
  "permissions": {"deny": ["WebFetch", "Bash(curl *)"], "allow": ["Bash(npm run *)"]},
  "env": {"B": "&<>", "A": "é"}
}`

func TestCanonicalMatchesJavaScript(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is not installed")
		}
		t.Skip("node is not installed: the checksum cannot be compared with JavaScript's")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, doc := range []string{canonicalSample, `{}`, `{"a":{"b":{"c":{"d":"e"}}},"A":[{"z":1,"y":[{"x":"<&>"}]}]}`} {
		v, err := claudecode.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		got, err := claudecode.Canonical(v)
		if err != nil {
			t.Fatalf("Canonical: %v", err)
		}
		sum, err := claudecode.Checksum(v)
		if err != nil {
			t.Fatal(err)
		}
		cmd := testenv.Command(t, ctx, "node", "-e", jsChecksum)
		cmd.Stdin = strings.NewReader(doc)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, stderr.String())
		}
		text, jsSum, _ := strings.Cut(string(out), "\n")
		if string(got) != text {
			t.Fatalf("canonical form differs from JavaScript's:\n go: %s\n js: %s", got, text)
		}
		if sum != jsSum {
			t.Fatalf("checksum %s, JavaScript's %s", sum, jsSum)
		}
		// The served bytes read back to the same checksum: what the CLI
		// computes from what it received.
		again, _ := claudecode.Parse(got)
		if s2, _ := claudecode.Checksum(again); s2 != sum {
			t.Fatalf("checksum of the canonical bytes %s, want %s", s2, sum)
		}
	}
}
