package pluginhost

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"
)

// The plugins' client reaches the server over its process's stdio: the
// process has no network. host.mjs gives the client a fetch that sends each
// request as a marked line
//
//	{"rpc":"http","id":N,"req":{"method":"GET","url":"/session?directory=…","headers":{…},"body":"<base64>"}}
//
// and the server answers on stdin with
//
//	{"rpc":"http","id":N,"res":{"status":200,"headers":{…},"body":"<base64>"}}
//
// The request is served in-process by Options.Handler, its context marked
// with the location of the process that sent it (RequestLocation): what a
// plugin's client may do is the server's decision for that location.
// Malformed requests are answered 400, never trusted; sizes and the
// requests served at once are bounded.
const (
	// maxRPCs is the client requests of one process served at once; more
	// are answered 503.
	maxRPCs = 16
	// maxRPCBody bounds a request's and a response's body.
	maxRPCBody = 4 << 20
	// rpcTimeout bounds serving one request.
	rpcTimeout = 2 * time.Minute
)

type locationKey struct{}

// RequestLocation reports whether a request came from a plugin host's
// client, and the directory of the location whose process sent it. Only
// the plugin host sets it: no request from the network carries it.
func RequestLocation(ctx context.Context) (string, bool) {
	dir, ok := ctx.Value(locationKey{}).(string)
	return dir, ok
}

type rpcRequest struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

type rpcResponse struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// serveRPC answers one request of the process, in its own goroutine; the
// reader never waits for it: a client request ("http"), a tool's
// permission request ("ask", see ask.go) or a tool's metadata update
// ("meta", not answered).
func (p *proc) serveRPC(h *Host, id int64, kind string, raw json.RawMessage) {
	switch {
	case id <= 0:
		return
	case kind == "meta":
		p.serveMeta(h, raw)
		return
	case kind == "ask":
		p.serveAsk(h, id, raw)
		return
	case kind != "http":
		return
	}
	select {
	case p.rpcs <- struct{}{}:
	default:
		p.answerRPC(id, errorResponse(http.StatusServiceUnavailable, "too many requests from the plugins' client at once"))
		return
	}
	go func() {
		defer func() { <-p.rpcs }()
		p.answerRPC(id, h.doRPC(p.dir, raw, p.done))
	}()
}

func (p *proc) answerRPC(id int64, res rpcResponse) {
	p.answer("http", id, res)
}

func (p *proc) answer(kind string, id int64, res any) {
	b, err := json.Marshal(map[string]any{"rpc": kind, "id": id, "res": res})
	if err == nil {
		p.write(b)
	}
}

func errorResponse(status int, msg string) rpcResponse {
	b, _ := json.Marshal(map[string]any{"name": http.StatusText(status), "data": map[string]string{"message": msg}})
	return rpcResponse{Status: status, Headers: map[string]string{"content-type": "application/json"},
		Body: base64.StdEncoding.EncodeToString(b)}
}

// doRPC serves one request with the handler; done ends it early when the
// process exits.
func (h *Host) doRPC(dir string, raw json.RawMessage, done <-chan struct{}) rpcResponse {
	var in rpcRequest
	if json.Unmarshal(raw, &in) != nil {
		return errorResponse(http.StatusBadRequest, "malformed request")
	}
	if !validMethod(in.Method) || !strings.HasPrefix(in.URL, "/") || strings.HasPrefix(in.URL, "//") {
		return errorResponse(http.StatusBadRequest, "malformed request line")
	}
	u, err := url.ParseRequestURI(in.URL)
	if err != nil || u.Host != "" || u.Scheme != "" {
		return errorResponse(http.StatusBadRequest, "malformed request URL")
	}
	if base64.StdEncoding.DecodedLen(len(in.Body)) > maxRPCBody {
		return errorResponse(http.StatusRequestEntityTooLarge, "request body too large")
	}
	body, err := base64.StdEncoding.DecodeString(in.Body)
	if err != nil {
		return errorResponse(http.StatusBadRequest, "malformed request body")
	}
	if h.opts.Handler == nil {
		return errorResponse(http.StatusServiceUnavailable, "the plugins' client has no server to talk to")
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), locationKey{}, dir), rpcTimeout)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	r, err := http.NewRequestWithContext(ctx, in.Method, ClientURL+u.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return errorResponse(http.StatusBadRequest, "malformed request")
	}
	for k, v := range in.Headers {
		if len(k) > 256 || len(v) > 8192 || strings.EqualFold(k, "host") || strings.EqualFold(k, "content-length") {
			continue
		}
		r.Header.Set(k, v)
	}
	r.ContentLength = int64(len(body))
	r.RemoteAddr = "plugin:0"
	w := &recorder{header: http.Header{}}
	h.opts.Handler.ServeHTTP(w, r)
	if w.over {
		return errorResponse(http.StatusBadGateway, "the response is too large for the plugins' client")
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	// Which routes the plugins' client calls, and how they answered.
	h.log.Debug("plugin client request", zap.String("method", in.Method), zap.String("path", u.Path), zap.Int("status", w.status),
		zap.String("location", dir))
	res := rpcResponse{Status: w.status, Headers: map[string]string{}, Body: base64.StdEncoding.EncodeToString(w.body.Bytes())}
	for k, v := range w.header {
		if len(v) > 0 {
			res.Headers[strings.ToLower(k)] = strings.Join(v, ", ")
		}
	}
	return res
}

func validMethod(m string) bool {
	if m == "" || len(m) > 16 {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// recorder is a response writer that keeps up to maxRPCBody bytes.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	over   bool
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body.Len()+len(b) > maxRPCBody {
		w.over = true
		return 0, errTooLarge
	}
	return w.body.Write(b)
}

func (w *recorder) Flush() {}

var errTooLarge = errors.New("the response is too large for the plugins' client")
