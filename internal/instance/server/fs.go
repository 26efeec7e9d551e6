package server

import (
	"io"
	"mime"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/tools"
	"github.com/agentgate/agentgate/internal/router"
)

// fsRoutes are the released SDK's file routes over the request's
// location: list a directory, find files by name, read a file. Paths are
// relative to the location and may not leave it (symlinks included).
// The pending permission requests and forms of the location are listed
// here too.
func (s *Server) fsRoutes(rt *router.Router) {
	rt.Handle("GET", "/api/fs/list", s.fsList)
	rt.Handle("GET", "/api/fs/find", s.fsFind)
	rt.Handle("GET", "/api/permission/request", s.pendingPermissions)
	rt.Handle("GET", "/api/question/request", s.pendingForms)
	rt.Handle("GET", "/api/permission/saved", staticJSON(map[string]any{"data": []any{}}))
	rt.Handle("DELETE", "/api/permission/saved/{id}", func(w http.ResponseWriter, _ *http.Request, _ router.Params) error {
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// fsReadPrefix is the route of file reads; the rest of the path names the
// file.
const fsReadPrefix = "/api/fs/read/"

func (s *Server) fsList(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	return s.inLocation(w, r, func(_, dir string) (any, error) {
		list, err := tools.ListDir(dir, r.URL.Query().Get("path"))
		if err != nil {
			return nil, errs.InvalidRequest("query", err.Error())
		}
		return list, nil
	})
}

func (s *Server) fsFind(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	q := r.URL.Query()
	query, typ := q.Get("query"), q.Get("type")
	if query == "" {
		return errs.InvalidRequest("query", "query is required")
	}
	if typ != "" && typ != "file" && typ != "directory" {
		return errs.InvalidRequest("query", `type must be "file" or "directory"`)
	}
	limit, err := limitParam(q.Get("limit"), 50, 200)
	if err != nil {
		return err
	}
	return s.inLocation(w, r, func(_, dir string) (any, error) {
		list, err := tools.Find(r.Context(), dir, query, typ, limit)
		if err != nil {
			return nil, errs.InvalidRequest("query", err.Error())
		}
		return list, nil
	})
}

// fsRead answers a file's bytes.
func (s *Server) fsRead(w http.ResponseWriter, r *http.Request) {
	loc, err := s.location(r)
	if err != nil {
		errs.Write(w, err)
		return
	}
	rel, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), fsReadPrefix))
	if err != nil || rel == "" {
		errs.Write(w, errs.InvalidRequest("path", "name a file after "+fsReadPrefix))
		return
	}
	f, fi, err := tools.OpenFile(loc.Canonical, rel)
	if err != nil {
		errs.Write(w, errs.InvalidRequest("path", err.Error()))
		return
	}
	defer f.Close()
	ct := mime.TypeByExtension(filepath.Ext(rel))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	io.Copy(w, f)
}

func (s *Server) pendingPermissions(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	b, err := s.broker()
	if err != nil {
		return err
	}
	return s.inLocation(w, r, func(string, string) (any, error) {
		out := []map[string]any{}
		for _, req := range b.Permissions("") {
			out = append(out, permissionV2(req))
		}
		return out, nil
	})
}

func (s *Server) pendingForms(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	b, err := s.broker()
	if err != nil {
		return err
	}
	return s.inLocation(w, r, func(string, string) (any, error) { return b.Forms(""), nil })
}
