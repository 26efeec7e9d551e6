// Package webpage holds what the server-rendered web pages share (the
// Console's and the instance's web app): parsing and rendering their
// embedded templates, serving their static files, and the number formats
// of their tables and charts.
package webpage

import (
	"bytes"
	"errors"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"path"
	"slices"
	"strings"
)

// Static serves the files of fsys under prefix (a path ending in "/"),
// cacheable for an hour; a directory is answered by notFound, never
// listed.
func Static(fsys fs.FS, prefix string, notFound http.HandlerFunc) http.Handler {
	files := http.StripPrefix(prefix, http.FileServerFS(fsys))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			notFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// Commas groups the integer part of a decimal number by thousands
// ("-1234567.5" → "-1,234,567.5").
func Commas(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	intPart, frac, hasDot := strings.Cut(s, ".")
	var b strings.Builder
	b.WriteString(sign)
	for i, r := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if hasDot {
		b.WriteString("." + frac)
	}
	return b.String()
}

// NiceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for 0 or
// less): the top of a chart's axis.
func NiceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// ParsePages parses every templates/*.html page of fsys with the shared
// templates (the layout and parts every page uses), one template set per
// page, keyed by the page's file name without .html.
func ParsePages(fsys fs.FS, funcs template.FuncMap, shared ...string) map[string]*template.Template {
	names, err := fs.Glob(fsys, "templates/*.html")
	if err != nil {
		panic(err)
	}
	base := template.Must(template.New("").Funcs(funcs).ParseFS(fsys, shared...))
	out := map[string]*template.Template{}
	for _, n := range names {
		if slices.Contains(shared, n) {
			continue
		}
		out[strings.TrimSuffix(path.Base(n), ".html")] = template.Must(template.Must(base.Clone()).ParseFS(fsys, n))
	}
	return out
}

// Render executes the named template of t into a buffer and writes it
// with status. When the template fails nothing is written and its error
// is returned: the caller logs it and answers 500.
func Render(w http.ResponseWriter, t *template.Template, name string, status int, data any) error {
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes()) // a client gone away is no error of the page
	return nil
}

// ReadForm parses a POSTed form of at most max bytes; on failure it
// returns the status to answer (413 for a form too large, else 400), 0
// when the form was read.
func ReadForm(w http.ResponseWriter, r *http.Request, max int64) int {
	r.Body = http.MaxBytesReader(w, r.Body, max)
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return http.StatusRequestEntityTooLarge
		}
		return http.StatusBadRequest
	}
	return 0
}
