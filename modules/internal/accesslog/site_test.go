package accesslog_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/agentgate/agentgate"
	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
	"github.com/agentgate/agentgate/modules/agentgate"
)

const providerSecret = "sk-provider-SECRET-accesslog"

// site is one running Caddy (in this process) with a gateway and Console
// site whose access log is a file, as an operator writes it in a
// Caddyfile: no filter for the key's slots.
type site struct {
	base       string // http://127.0.0.1:port
	port       int
	accessLog  string              // the site's `log`
	consoleLog string              // the Console-only site's `log`
	logNames   map[string][]string // host → its logs' names, as adapted
	defaultLog string              // Caddy's default log, at DEBUG
	key        string              // inference key
	allKey     string
	conn       string // an openai connection to the fake provider
	provider   *fakeprovider.Provider
}

// logFormats are the site's `log { format … }` bodies under test.
var logFormats = map[string]string{
	"json":    "format json",
	"console": "format console",
	"filter": `format filter {
			wrap json
			fields {
				request>headers>User-Agent delete
			}
		}`,
}

func startSite(t *testing.T, format string) *site {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "xdg-data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "xdg-config"))
	prev := caddy.ConfigAutosavePath
	caddy.ConfigAutosavePath = filepath.Join(dir, "autosave.json")
	t.Cleanup(func() { caddy.ConfigAutosavePath = prev })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &site{base: fmt.Sprintf("http://127.0.0.1:%d", port), port: port,
		accessLog: filepath.Join(dir, "access.log"), consoleLog: filepath.Join(dir, "console.log"),
		defaultLog: filepath.Join(dir, "default.log")}

	// The localhost site has no log, so its host goes in the server's
	// skip_hosts. /teapot and /boom are answered by a handler after the
	// gateway that returns an error, which the site's error routes answer
	// (418) or leave to the server (500).
	caddyfile := fmt.Sprintf(`{
	admin off
	persist_config off
	storage file_system %[1]s/caddy-storage
	log {
		output file %[2]s
		level DEBUG
	}
	agentgate {
		storage badger %[1]s/data
	}
}

http://127.0.0.1:%[3]d {
	log {
		output file %[4]s
		%[5]s
	}
	@quiet header X-Quiet 1
	log_skip @quiet
	route {
		llm_gateway
		error /teapot* 418
		error /boom* 500
		workspace_console
	}
	handle_errors 418 {
		respond "short and stout" 418
	}
}

http://localhost:%[3]d {
	llm_gateway
	workspace_console
}

http://console.test:%[3]d {
	log {
		output file %[6]s
		%[5]s
	}
	workspace_console
}
`, dir, s.defaultLog, port, s.accessLog, logFormats[format], s.consoleLog)
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	if len(warnings) > 0 {
		t.Fatalf("adapting: %v", warnings)
	}
	// The adapter lists the unlogged site as "localhost:<port>", which
	// never matches (the server compares hosts without their port); an
	// operator's skip_hosts names the host.
	skipped := fmt.Sprintf(`"skip_hosts":["localhost:%d"]`, port)
	if !bytes.Contains(cfg, []byte(skipped)) {
		t.Fatalf("no %s in %s", skipped, cfg)
	}
	cfg = bytes.Replace(cfg, []byte(skipped), []byte(`"skip_hosts":["localhost"]`), 1)
	var adapted struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Logs struct {
						LoggerNames map[string][]string `json:"logger_names"`
					} `json:"logs"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(cfg, &adapted); err != nil {
		t.Fatal(err)
	}
	for _, srv := range adapted.Apps.HTTP.Servers {
		s.logNames = srv.Logs.LoggerNames
	}
	if len(s.logNames["127.0.0.1"]) != 1 || len(s.logNames["console.test"]) != 1 {
		t.Fatalf("logger names %v", s.logNames)
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading: %v", err)
	}
	t.Cleanup(func() { caddy.Stop() })

	v, err := caddy.ActiveContext().App("agentgate")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	svc, err := v.(*agentgate.App).Service(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := svc.CreateWorkspace(ctx, "Acme")
	op := service.Operator(w.ID)
	sa, _ := svc.CreateServiceAccount(ctx, op, "ci")
	k, err := svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "inf", Permission: store.PermissionInference})
	if err != nil {
		t.Fatal(err)
	}
	ka, _ := svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "all", Permission: store.PermissionAll})
	s.key, s.allKey = k.Key, ka.Key

	p, err := fakeprovider.Start(providerSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	price := store.Pricing{Input: money.Micros(2_500_000), Output: money.Micros(10_000_000)}
	c, err := svc.CreateConnection(ctx, op, service.ConnectionInput{Name: "openai", Kind: store.KindOpenAI, BaseURL: p.URL + "/v1",
		Credential: providerSecret, Models: map[string]service.ModelInput{"gpt-4o": {Pricing: &price}}})
	if err != nil {
		t.Fatal(err)
	}
	s.conn, s.provider = c.ID, p
	return s
}

// call is one request of a test: its id travels in X-Req, which every
// entry's request object shows.
type call struct {
	name    string
	method  string
	path    string // may carry ?key=
	header  []string
	body    string
	host    string // Host header; default the site's
	status  int    // wanted response status
	answer  string // wanted response body, if set
	uri     string // wanted uri in the entry
	metered bool   // the entry carries the gateway's agentgate object
	console bool   // sent to the Console-only site
	logged  bool   // exactly one access-log entry; false: none
}

func (s *site) do(t *testing.T, id string, c call) {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, s.base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Req", id)
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		req.Header.Set(c.header[i], c.header[i+1])
	}
	if c.host != "" {
		req.Host = c.host
	}
	if c.console {
		req.Host = fmt.Sprintf("console.test:%d", s.port)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != c.status || c.answer != "" && string(b) != c.answer {
		t.Fatalf("%s: %d %q, want %d %q", c.name, resp.StatusCode, b, c.status, c.answer)
	}
}

// entry is one log line, whatever the format.
type entry struct {
	level, logger, msg string
	fields             map[string]any
}

// ansi matches the colour codes around the console format's level.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// readEntries parses a log file: JSON lines, or the console format's
// tab-separated time, level, logger and message followed by JSON fields.
func readEntries(t *testing.T, path, format string) []entry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var e entry
		if format == "console" {
			cols := strings.SplitN(line, "\t", 5)
			if len(cols) < 4 {
				t.Fatalf("console line with %d columns: %q", len(cols), line)
			}
			e.level, e.logger, e.msg = strings.ToLower(ansi.ReplaceAllString(cols[1], "")), cols[2], cols[3]
			if len(cols) == 5 {
				if err := json.Unmarshal([]byte(cols[4]), &e.fields); err != nil {
					t.Fatalf("console fields: %v: %q", err, line)
				}
			}
		} else {
			if err := json.Unmarshal([]byte(line), &e.fields); err != nil {
				t.Fatalf("log line is not JSON: %v: %q", err, line)
			}
			e.level, _ = e.fields["level"].(string)
			e.logger, _ = e.fields["logger"].(string)
			e.msg, _ = e.fields["msg"].(string)
		}
		out = append(out, e)
	}
	return out
}

func get(v any, path string) any {
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// byReq are the entries whose request object has X-Req: id.
func byReq(entries []entry, id string) []entry {
	var out []entry
	for _, e := range entries {
		if h, ok := get(e.fields, "request.headers.X-Req").([]any); ok && len(h) == 1 && h[0] == id {
			out = append(out, e)
		}
	}
	return out
}

// TestAccessLogHasNoKey sends requests with a workspace key in every slot
// a client may use (x-api-key, api-key, x-goog-api-key, ?key= and
// Authorization: Bearer) to the gateway and the Console of a site whose
// `log` has no filter, in each log format, and checks that no log file
// holds the key while the access log has exactly one entry per request
// with its status, method, uri (without key) and, for gateway requests,
// the agentgate metering object. The operator's log_skip and a host the
// server does not log (skip_hosts) still write nothing.
func TestAccessLogHasNoKey(t *testing.T) {
	for _, format := range []string{"json", "console", "filter"} {
		t.Run(format, func(t *testing.T) {
			s := startSite(t, format)
			chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
			stream := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			gw := "/custom/" + s.conn + "/chat/completions"
			bad := "ag_sk_000000000000_notAValidKeyButSecretAnyway0123456789"
			calls := []call{
				{name: "x-api-key", method: "POST", path: gw, body: chat, header: []string{"X-Api-Key", s.key}, status: 200, uri: gw, metered: true, logged: true},
				{name: "api-key", method: "POST", path: gw, body: chat, header: []string{"Api-Key", s.key}, status: 200, uri: gw, metered: true, logged: true},
				{name: "x-goog-api-key", method: "POST", path: gw, body: chat, header: []string{"X-Goog-Api-Key", s.key}, status: 200, uri: gw, metered: true, logged: true},
				{name: "x-api-key stream", method: "POST", path: gw, body: stream, header: []string{"X-Api-Key", s.key}, status: 200, uri: gw, metered: true, logged: true},
				{name: "query key", method: "POST", path: gw + "?a=1&key=" + s.key + "&b=2", body: chat, status: 200, uri: gw + "?a=1&b=2", metered: true, logged: true},
				{name: "bearer", method: "POST", path: gw, body: chat, header: []string{"Authorization", "Bearer " + s.key}, status: 200, uri: gw, metered: true, logged: true},
				{name: "invalid x-api-key", method: "POST", path: gw, body: chat, header: []string{"X-Api-Key", bad}, status: 401, uri: gw, logged: true},
				{name: "invalid query key", method: "POST", path: gw + "?key=" + bad, body: chat, status: 401, uri: gw, logged: true},
				{name: "unknown gateway route", method: "POST", path: "/custom/" + s.conn + "/nope?key=" + s.key, body: chat, status: 404, uri: "/custom/" + s.conn + "/nope", logged: true},
				{name: "console x-api-key", method: "GET", path: "/api/v2/config", header: []string{"X-Api-Key", s.allKey, "Authorization", "Bearer " + s.allKey}, status: 200, uri: "/api/v2/config", logged: true},
				{name: "console query key", method: "GET", path: "/api/v2/config?key=" + s.allKey, status: 401, uri: "/api/v2/config", logged: true},
				{name: "console bearer", method: "GET", path: "/api/v2/config", header: []string{"Authorization", "Bearer " + s.allKey}, status: 200, uri: "/api/v2/config", logged: true},
				{name: "later handler's error", method: "GET", path: "/teapot?key=" + s.key, header: []string{"Api-Key", s.key}, status: 418, answer: "short and stout", uri: "/teapot", logged: true},
				{name: "later handler's error, no error route", method: "GET", path: "/boom?a=b&key=" + s.key, status: 500, uri: "/boom?a=b", logged: true},
				{name: "Console site x-api-key", console: true, method: "GET", path: "/api/v2/config?a=1", header: []string{"X-Api-Key", s.allKey, "Authorization", "Bearer " + s.allKey}, status: 200, uri: "/api/v2/config?a=1", logged: true},
				{name: "Console site query key", console: true, method: "GET", path: "/api/v2/config?key=" + s.allKey, status: 401, uri: "/api/v2/config", logged: true},
				{name: "Console site bearer", console: true, method: "GET", path: "/api/v2/config", header: []string{"Authorization", "Bearer " + s.allKey}, status: 200, uri: "/api/v2/config", logged: true},
				{name: "no key", method: "GET", path: "/api/v2/config?x=1", status: 401, uri: "/api/v2/config?x=1", logged: true},
				{name: "log_skip", method: "POST", path: gw + "?key=" + s.key, body: chat, header: []string{"X-Quiet", "1", "X-Api-Key", s.key}, status: 200, logged: false},
				{name: "skipped host", method: "POST", path: gw + "?key=" + s.key, body: chat, host: fmt.Sprintf("localhost:%d", s.port), header: []string{"X-Api-Key", s.key}, status: 200, logged: false},
			}
			for i, c := range calls {
				s.do(t, fmt.Sprint("r", i), c)
			}
			// Usage is settled in the background; the entries are written
			// before the response ends, but give the files a moment.
			time.Sleep(200 * time.Millisecond)

			for _, path := range []string{s.accessLog, s.consoleLog, s.defaultLog} {
				data, _ := os.ReadFile(path)
				for _, k := range []string{s.key, s.allKey, bad} {
					if bytes.Contains(data, []byte(k)) || bytes.Contains(data, []byte(k[len(k)-24:])) {
						t.Errorf("%s holds a key:\n%s", filepath.Base(path), data)
					}
				}
			}
			access := readEntries(t, s.accessLog, format)
			consoleEntries := readEntries(t, s.consoleLog, format)
			defaults := readEntries(t, s.defaultLog, "json")
			for i, c := range calls {
				id := fmt.Sprint("r", i)
				d := byReq(defaults, id)
				for _, e := range d {
					if e.msg == "handled request" {
						t.Errorf("%s: access entry in the default log: %v", c.name, e.fields)
					}
				}
				if c.status == 418 || c.status == 500 {
					// Caddy's error log entry for the later handler's error,
					// with the request as the access entry shows it.
					if len(d) != 1 || d[0].logger != "http.log.error."+s.logNames["127.0.0.1"][0] || d[0].level != "debug" ||
						get(d[0].fields, "status") != float64(c.status) || get(d[0].fields, "request.uri") != c.uri {
						t.Errorf("%s: error log entries %v", c.name, d)
					}
				}
				es, others, host := byReq(access, id), byReq(consoleEntries, id), "127.0.0.1"
				if c.console {
					es, others, host = others, es, "console.test"
				}
				if len(others) != 0 {
					t.Errorf("%s: entry in the other site's log", c.name)
				}
				if !c.logged {
					if len(es) != 0 {
						t.Errorf("%s: %d access entries, want none: %v", c.name, len(es), es[0].fields)
					}
					continue
				}
				if len(es) != 1 {
					t.Errorf("%s: %d access entries, want 1", c.name, len(es))
					continue
				}
				e := es[0]
				if e.msg != "handled request" || e.logger != "http.log.access."+s.logNames[host][0] {
					t.Errorf("%s: message %q logger %q", c.name, e.msg, e.logger)
				}
				wantLevel := "info"
				if c.status >= 500 {
					wantLevel = "error"
				}
				if e.level != wantLevel {
					t.Errorf("%s: level %q, want %q", c.name, e.level, wantLevel)
				}
				if got := get(e.fields, "status"); got != float64(c.status) {
					t.Errorf("%s: status %v, want %d", c.name, got, c.status)
				}
				if got := get(e.fields, "request.method"); got != c.method {
					t.Errorf("%s: method %v", c.name, got)
				}
				if got := get(e.fields, "request.uri"); got != c.uri {
					t.Errorf("%s: uri %v, want %s", c.name, got, c.uri)
				}
				if got := get(e.fields, "request.host"); got != fmt.Sprintf("%s:%d", host, s.port) {
					t.Errorf("%s: host %v", c.name, got)
				}
				for _, h := range []string{"X-Api-Key", "Api-Key", "X-Goog-Api-Key"} {
					if v := get(e.fields, "request.headers."+h); v != nil {
						t.Errorf("%s: %s in the entry: %v", c.name, h, v)
					}
				}
				if v, ok := get(e.fields, "request.headers.Authorization").([]any); ok && (len(v) != 1 || v[0] != "REDACTED") {
					t.Errorf("%s: Authorization %v", c.name, v)
				}
				if format == "filter" && get(e.fields, "request.headers.User-Agent") != nil {
					t.Errorf("%s: the filter's own field stayed", c.name)
				}
				for _, f := range []string{"bytes_read", "user_id", "duration", "size", "resp_headers"} {
					if _, ok := e.fields[f]; !ok {
						t.Errorf("%s: no %s", c.name, f)
					}
				}
				if c.metered && get(e.fields, "bytes_read") != float64(len(c.body)) {
					t.Errorf("%s: bytes_read %v, want %d", c.name, get(e.fields, "bytes_read"), len(c.body))
				}
				if c.status == 200 && c.method == "POST" {
					if size, _ := get(e.fields, "size").(float64); size <= 0 {
						t.Errorf("%s: size %v", c.name, size)
					}
				}
				ag := get(e.fields, "agentgate")
				if c.metered {
					if get(ag, "connection") != s.conn || get(ag, "model") != "gpt-4o" || get(ag, "input_tokens") == float64(0) {
						t.Errorf("%s: agentgate %v", c.name, ag)
					}
				} else if ag != nil {
					t.Errorf("%s: agentgate %v", c.name, ag)
				}
			}

			// Caddy wrote the bearer request's entry (Authorization is
			// redacted by Caddy itself); this package wrote the x-api-key
			// request's: the two have the same fields.
			ours, caddys := byReq(access, "r0"), byReq(access, "r4")
			if len(ours) == 1 && len(caddys) == 1 {
				for _, obj := range []string{"", "request", "agentgate"} {
					a, b := keys(ours[0].fields, obj), keys(caddys[0].fields, obj)
					if a != b {
						t.Errorf("fields of %q: ours %s, Caddy's %s", obj, a, b)
					}
				}
			}
		})
	}
}

// keys lists the members of the object at path ("" for the entry).
func keys(fields map[string]any, path string) string {
	var v any = fields
	if path != "" {
		v = get(fields, path)
	}
	m, _ := v.(map[string]any)
	ks := make([]string, 0, len(m))
	for k := range m {
		if k != "ts" && k != "headers" {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return strings.Join(ks, ",")
}

// TestAccessLogCutStream: a stream the provider cuts is aborted by the
// reverse proxy (the handler does not return normally); its entry is still
// written once, without the key, with the gateway's metering.
func TestAccessLogCutStream(t *testing.T) {
	s := startSite(t, "json")
	s.provider.SetBehavior(fakeprovider.Behavior{CutAfter: 2, Chunks: 5})
	gw := "/custom/" + s.conn + "/chat/completions?key=" + s.key
	req, _ := http.NewRequest("POST", s.base+gw, strings.NewReader(`{"model":"gpt-4o","stream":true,"messages":[]}`))
	req.Header.Set("X-Req", "cut")
	req.Header.Set("X-Api-Key", s.key)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the cut stream ended cleanly")
	}
	resp.Body.Close()
	time.Sleep(200 * time.Millisecond)
	data, _ := os.ReadFile(s.accessLog)
	if bytes.Contains(data, []byte(s.key[len(s.key)-24:])) {
		t.Fatalf("the access log holds the key:\n%s", data)
	}
	es := byReq(readEntries(t, s.accessLog, "json"), "cut")
	if len(es) != 1 {
		t.Fatalf("%d entries, want 1:\n%s", len(es), data)
	}
	e := es[0]
	if get(e.fields, "status") != float64(200) || get(e.fields, "request.uri") != "/custom/"+s.conn+"/chat/completions" ||
		get(e.fields, "agentgate.streamed") != true || get(e.fields, "agentgate.connection") != s.conn {
		t.Errorf("entry %v", e.fields)
	}
}

// TestSitesWriteOnlyTempDirs runs the site tests (Caddy in this process
// with file logs, the store, fake providers) with an empty home and empty
// XDG and temporary directories: all stay empty.
func TestSitesWriteOnlyTempDirs(t *testing.T) {
	testenv.RunIsolated(t, "^(TestAccessLogHasNoKey|TestAccessLogCutStream|TestLogsHoldNoInstanceOrDeviceSecret)$")
}
