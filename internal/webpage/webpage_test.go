package webpage

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func TestNiceCeil(t *testing.T) {
	for v, want := range map[float64]float64{-3: 1, 0: 1, 0.8: 1, 1: 1, 1.2: 2, 2.2: 2.5, 3: 5, 7: 10, 0.000172: 0.0002, 42: 50, 6: 10} {
		if got := NiceCeil(v); got < want*0.999999 || got > want*1.000001 {
			t.Errorf("NiceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}

func TestCommas(t *testing.T) {
	for in, want := range map[string]string{"0": "0", "999": "999", "1000": "1,000", "1234567": "1,234,567", "-123": "-123",
		"-1234": "-1,234", "1234.5678": "1,234.5678", "-1234567.25": "-1,234,567.25"} {
		if got := Commas(in); got != want {
			t.Errorf("Commas(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStaticListsNoDirectory(t *testing.T) {
	fsys := fstest.MapFS{"app.css": {Data: []byte("body{}")}, "sub/x.js": {Data: []byte("1")}}
	h := Static(fsys, "/static/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", 404) })
	for path, want := range map[string]int{"/static/app.css": 200, "/static/sub/x.js": 200, "/static/": 404, "/static/sub/": 404, "/static/none.css": 404} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want {
			t.Errorf("%s: %d, want %d", path, rec.Code, want)
		}
		if want == 200 && rec.Header().Get("Cache-Control") != "public, max-age=3600" {
			t.Errorf("%s: Cache-Control %q", path, rec.Header().Get("Cache-Control"))
		}
	}
}

// TestParsePagesAndRender: every page but the shared ones gets its own
// set with the shared templates; a failing template writes nothing.
func TestParsePagesAndRender(t *testing.T) {
	fsys := fstest.MapFS{
		"templates/layout.html": {Data: []byte(`{{define "layout"}}<main>{{template "content" .}}</main>{{end}}`)},
		"templates/parts.html":  {Data: []byte(`{{define "name"}}<b>{{.}}</b>{{end}}`)},
		"templates/home.html":   {Data: []byte(`{{define "content"}}home {{template "name" .}}{{end}}`)},
		"templates/broken.html": {Data: []byte(`{{define "content"}}{{.Missing.Field}}{{end}}`)},
	}
	pages := ParsePages(fsys, nil, "templates/layout.html", "templates/parts.html")
	if len(pages) != 2 || pages["home"] == nil || pages["broken"] == nil {
		t.Fatalf("pages: %v", pages)
	}
	rec := httptest.NewRecorder()
	if err := Render(rec, pages["home"], "layout", 201, "<x>"); err != nil || rec.Code != 201 ||
		rec.Body.String() != "<main>home <b>&lt;x&gt;</b></main>" || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("home: %v %d %q", err, rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	if err := Render(rec, pages["broken"], "layout", 200, 42); err == nil || rec.Body.Len() != 0 || rec.Header().Get("Content-Type") != "" {
		t.Fatalf("broken: %v %q", err, rec.Body.String())
	}
}

func TestReadForm(t *testing.T) {
	for body, want := range map[string]int{"a=1&b=2": 0, "a=%zz": http.StatusBadRequest, "a=" + strings.Repeat("x", 100): http.StatusRequestEntityTooLarge} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if got := ReadForm(httptest.NewRecorder(), r, 64); got != want {
			t.Errorf("%.20q: %d, want %d", body, got, want)
		}
		if want == 0 && r.PostForm.Get("b") != "2" {
			t.Errorf("the form was not parsed: %v", r.PostForm)
		}
	}
}
