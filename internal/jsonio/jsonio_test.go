package jsonio

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
)

type input struct {
	Name    string            `json:"name"`
	Count   int               `json:"count"`
	On      *bool             `json:"on,omitempty"`
	Tags    []string          `json:"tags,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Nested  *struct {
		A int `json:"a"`
	} `json:"nested,omitempty"`
	When *time.Time `json:"when,omitempty"`
}

type noLen struct{ r io.Reader }

func (n noLen) Read(p []byte) (int, error) { return n.r.Read(p) }

func decode(body io.Reader, contentLength int64, ct string, limit int64) (input, error) {
	r := httptest.NewRequest("POST", "/", body)
	r.ContentLength = contentLength
	if ct != "" {
		r.Header.Set("Content-Type", ct)
	}
	var v input
	err := Decode(httptest.NewRecorder(), r, limit, &v)
	return v, err
}

func wantErr(t *testing.T, what string, err error, status int, tag, mention string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %d %s", what, status, tag)
	}
	e := apierr.As(err)
	if e.Status != status || e.Tag != tag {
		t.Fatalf("%s: %d %s (%s), want %d %s", what, e.Status, e.Tag, e.Message, status, tag)
	}
	if mention != "" && !strings.Contains(e.Message, mention) {
		t.Fatalf("%s: message %q does not mention %q", what, e.Message, mention)
	}
}

func TestDecodeAccepts(t *testing.T) {
	for name, c := range map[string]struct{ body, ct string }{
		"plain":             {`{"name": "x", "count": 2}`, "application/json"},
		"no content type":   {`{"name": "x", "count": 2}`, ""},
		"charset":           {`{"name": "x", "count": 2}`, "application/json; charset=utf-8"},
		"upper-case type":   {`{"name": "x", "count": 2}`, "Application/JSON"},
		"+json":             {`{"name": "x", "count": 2}`, "application/merge-patch+json"},
		"surrounding space": {"\n\t {\"name\": \"x\", \"count\": 2} \r\n ", "application/json"},
	} {
		v, err := decode(strings.NewReader(c.body), int64(len(c.body)), c.ct, 0)
		if err != nil || v.Name != "x" || v.Count != 2 {
			t.Fatalf("%s: %+v %v", name, v, err)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, c := range map[string]struct{ body, mention string }{
		"empty":              {"", "empty"},
		"spaces":             {"   ", "empty"},
		"truncated":          {`{"name": "x"`, ""},
		"syntax":             {`{"name" "x"}`, "malformed"},
		"trailing comma":     {`{"name": "x",}`, ""},
		"wrong type":         {`{"name": 5}`, `"name"`},
		"wrong type count":   {`{"count": "5"}`, `"count"`},
		"fraction for int":   {`{"count": 1.5}`, `"count"`},
		"wrong nested type":  {`{"nested": {"a": "x"}}`, "a"},
		"array for object":   {`{"headers": ["a"]}`, "headers"},
		"unknown field":      {`{"name": "x", "evil": 1}`, `"evil"`},
		"unknown nested":     {`{"nested": {"a": 1, "b": 2}}`, `"b"`},
		"array body":         {`[1, 2]`, "object"},
		"number body":        {`42`, ""},
		"trailing garbage":   {`{"name": "x"} x`, "after"},
		"second value":       {`{"name": "x"} {"name": "y"}`, "after"},
		"trailing brace":     {`{"name": "x"}}`, ""},
		"trailing bracket":   {`{"name": "x"}]`, ""},
		"bad time":           {`{"when": "yesterday"}`, ""},
		"invalid utf-8 only": {"\xff", ""},
	} {
		_, err := decode(strings.NewReader(c.body), int64(len(c.body)), "application/json", 0)
		wantErr(t, name, err, 400, "InvalidRequest", c.mention)
	}
}

func TestDecodeContentType(t *testing.T) {
	for _, ct := range []string{"text/plain", "text/json", "application/x-www-form-urlencoded", "application/jsonp", ";;;", "application/json;;"} {
		_, err := decode(strings.NewReader(`{"name": "x"}`), 13, ct, 0)
		wantErr(t, "Content-Type "+ct, err, 415, "UnsupportedMediaType", "")
	}
}

func TestDecodeLimit(t *testing.T) {
	const limit = 64
	exact := `{"name": "x"}` + strings.Repeat(" ", limit-len(`{"name": "x"}`))
	over := exact + " "
	if _, err := decode(strings.NewReader(exact), limit, "", limit); err != nil {
		t.Fatalf("exactly the limit: %v", err)
	}
	if _, err := decode(noLen{strings.NewReader(exact)}, -1, "", limit); err != nil {
		t.Fatalf("exactly the limit, unknown length: %v", err)
	}
	_, err := decode(strings.NewReader(over), int64(len(over)), "", limit)
	wantErr(t, "declared length over the limit", err, 413, "PayloadTooLarge", "64")
	_, err = decode(noLen{strings.NewReader(over)}, -1, "", limit)
	wantErr(t, "unknown length over the limit", err, 413, "PayloadTooLarge", "")
	// A Content-Length that lies low: the reader still stops at the limit.
	_, err = decode(noLen{strings.NewReader(over + strings.Repeat(" ", 1000))}, 10, "", limit)
	wantErr(t, "lying Content-Length", err, 413, "PayloadTooLarge", "")
	// Huge declared length is refused before reading.
	_, err = decode(noLen{failReader{t}}, 1<<40, "", limit)
	wantErr(t, "huge declared length", err, 413, "PayloadTooLarge", "")
	// Default limit.
	big := `{"name": "` + strings.Repeat("a", DefaultLimit) + `"}`
	_, err = decode(noLen{strings.NewReader(big)}, -1, "", 0)
	wantErr(t, "over the default limit", err, 413, "PayloadTooLarge", "")
	if e := TooLarge(5); e.Status != http.StatusRequestEntityTooLarge || e.Tag != "PayloadTooLarge" {
		t.Fatalf("TooLarge: %+v", e)
	}
}

type failReader struct{ t *testing.T }

func (f failReader) Read([]byte) (int, error) {
	f.t.Error("the body was read although its declared length is over the limit")
	return 0, io.EOF
}

func TestWrite(t *testing.T) {
	w := httptest.NewRecorder()
	Write(w, http.StatusCreated, map[string]int{"a": 1})
	if w.Code != 201 || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("Write: %d %v", w.Code, w.Header())
	}
	var m map[string]map[string]int
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil || m["data"]["a"] != 1 {
		t.Fatalf("Write body %q", w.Body)
	}
	w = httptest.NewRecorder()
	WriteRaw(w, http.StatusOK, []int{1})
	if strings.TrimSpace(w.Body.String()) != "[1]" {
		t.Fatalf("WriteRaw body %q", w.Body)
	}
	// A value that cannot be marshalled becomes a JSON 500.
	w = httptest.NewRecorder()
	WriteRaw(w, http.StatusOK, map[string]any{"f": func() {}})
	var e map[string]any
	if w.Code != 500 || json.Unmarshal(w.Body.Bytes(), &e) != nil || e["_tag"] != "InternalError" {
		t.Fatalf("unmarshallable value: %d %q", w.Code, w.Body)
	}
}
