package accesslog_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/modules/agentgate"
)

const instancePassword = "pw-SECRET-instance-0123456789"

// secretFormats are the `log { format … }` bodies of the secrets test: the
// plain encoders and Caddy's filter encoder wrapping each.
var secretFormats = map[string]string{
	"json":    "format json",
	"console": "format console",
	"filter-json": `format filter {
			wrap json
			fields {
				request>headers>User-Agent delete
			}
		}`,
	"filter-console": `format filter {
			wrap console
			fields {
				request>headers>User-Agent delete
			}
		}`,
}

// secretsSite is one running Caddy with an instance site (127.0.0.1) and a
// Console site (console.test), each with its own access log, and Caddy's
// default log at DEBUG.
type secretsSite struct {
	port                       int
	instanceLog, consoleLog    string
	defaultLog                 string
	instanceNames, consoleName string
	svc                        *service.Service
	client                     *http.Client // cookies, no redirects followed, every host dialled at the site
}

func startSecretsSite(t *testing.T, format string) *secretsSite {
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
	s := &secretsSite{port: port, instanceLog: filepath.Join(dir, "instance.log"), consoleLog: filepath.Join(dir, "console.log"),
		defaultLog: filepath.Join(dir, "default.log")}
	project := filepath.Join(dir, "project")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	// Paths the instance does not serve go on, /proxied to an upstream.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("upstream")) }))
	t.Cleanup(upstream.Close)
	// The password is a placeholder, as an operator writes it: Caddy's
	// default log shows the config at DEBUG.
	t.Setenv("AGENTGATE_TEST_INSTANCE_PASSWORD", instancePassword)
	// /boom is answered by a handler after the instance that returns an
	// error, which the server logs with the request.
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
	route {
		agent_instance {
			name %[7]s
			password {env.AGENTGATE_TEST_INSTANCE_PASSWORD}
			directory %[8]s
			sandbox off
		}
		error /boom* 500
		reverse_proxy /proxied* %[9]s
	}
}

http://console.test:%[3]d {
	log {
		output file %[6]s
		%[5]s
	}
	workspace_console
}
`, dir, s.defaultLog, port, s.instanceLog, secretFormats[format], s.consoleLog, strings.ReplaceAll(t.Name(), "/", "-"), project, upstream.Listener.Addr())
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	if len(warnings) > 0 {
		t.Fatalf("adapting: %v", warnings)
	}
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
		if n := srv.Logs.LoggerNames; len(n["127.0.0.1"]) == 1 && len(n["console.test"]) == 1 {
			s.instanceNames, s.consoleName = n["127.0.0.1"][0], n["console.test"][0]
		}
	}
	if s.instanceNames == "" {
		t.Fatalf("logger names in %s", cfg)
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading: %v", err)
	}
	t.Cleanup(func() { caddy.Stop() })
	v, err := caddy.ActiveContext().App("agentgate")
	if err != nil {
		t.Fatal(err)
	}
	if s.svc, err = v.(*agentgate.App).Service(context.Background()); err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.client = &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	return s
}

// secretCall is one request of the secrets test.
type secretCall struct {
	name    string
	method  string
	url     string // absolute: http://127.0.0.1:port/… (instance) or http://console.test:port/… (Console)
	header  []string
	form    url.Values
	status  int
	uri     string // wanted request.uri of the access entry
	stream  bool   // an event stream: read the head, then hang up
	errored bool   // a later handler's error: one error log entry too
}

func (s *secretsSite) do(t *testing.T, id string, c secretCall) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var body io.Reader
	if c.form != nil {
		body = strings.NewReader(c.form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, c.method, c.url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Req", id)
	if c.form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		req.Header.Set(c.header[i], c.header[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	defer resp.Body.Close()
	var b []byte
	if !c.stream {
		b, _ = io.ReadAll(resp.Body)
	}
	if resp.StatusCode != c.status {
		t.Fatalf("%s: %d %q, want %d", c.name, resp.StatusCode, b, c.status)
	}
	return resp, string(b)
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestLogsHoldNoInstanceOrDeviceSecret sends the instance's credentials in
// ?auth_token= (event streams, a wrong token, a later handler's error, a
// Referer), redeems pairing codes (live and not, by a client and a
// browser), and walks the Console's device verification from the
// unsigned-in redirect through sign-in to the decision (GET and POST, a
// right and a wrong code, the static files the page loads), in each log
// format, and checks that no log (the sites' access logs, Caddy's default
// log at DEBUG with its error entries) holds any of the secrets, raw,
// URL-escaped or base64, while every request still has its one access
// entry with the secret shown as REDACTED.
func TestLogsHoldNoInstanceOrDeviceSecret(t *testing.T) {
	for _, format := range []string{"json", "console", "filter-json", "filter-console"} {
		t.Run(format, func(t *testing.T) {
			s := startSecretsSite(t, format)
			inst := fmt.Sprintf("http://127.0.0.1:%d", s.port)
			cons := fmt.Sprintf("http://console.test:%d", s.port)
			good := base64.StdEncoding.EncodeToString([]byte("opencode:" + instancePassword))
			wrongPassword := "pw-SECRET-wrong-9876543210"
			wrong := base64.StdEncoding.EncodeToString([]byte("opencode:" + wrongPassword))
			basic := []string{"Authorization", "Basic " + good}
			secrets := []string{instancePassword, wrongPassword, good, wrong}

			// Pairing codes come from POST /api/pair.
			pair := func() string {
				_, b := s.do(t, "pair", secretCall{name: "pair", method: "POST", url: inst + "/api/pair", header: basic, status: 200})
				var p struct{ Code string }
				if err := json.Unmarshal([]byte(b), &p); err != nil || p.Code == "" {
					t.Fatalf("pair: %q", b)
				}
				secrets = append(secrets, p.Code)
				return p.Code
			}
			codeClient, codeBrowser := pair(), pair()
			deadCode := "deadPairingCodeSECRET0123"
			secrets = append(secrets, deadCode)

			// A person to sign in and a device sign-in to approve.
			if _, err := s.svc.CreatePerson(context.Background(), service.NewPerson{Email: "ada@example.com", Name: "Ada", Password: "correct horse battery"}); err != nil {
				t.Fatal(err)
			}
			start, err := s.svc.StartDevice(context.Background(), "agentgate-cli", false, cons+"/device")
			if err != nil {
				t.Fatal(err)
			}
			userCode, wrongCode := start.UserCode, "ZZZZ-ZZZZ"
			norm, _ := service.NormalizeUserCode(userCode)
			secrets = append(secrets, userCode, norm, wrongCode, "ZZZZZZZZ")
			device := "/device?user_code=" + url.QueryEscape(userCode)
			next := "/signin?next=" + url.QueryEscape(device)

			calls := []secretCall{
				{name: "event stream", method: "GET", url: inst + "/event?auth_token=" + url.QueryEscape(good), stream: true, status: 200, uri: "/event?auth_token=REDACTED"},
				{name: "api event stream", method: "GET", url: inst + "/api/event?a=1&auth_token=" + good, stream: true, status: 200, uri: "/api/event?a=1&auth_token=REDACTED"},
				{name: "wrong token", method: "GET", url: inst + "/event?auth_token=" + url.QueryEscape(wrong), status: 401, uri: "/event?auth_token=REDACTED"},
				{name: "token on a later handler's error", method: "GET", url: inst + "/boom?auth_token=" + url.QueryEscape(good), status: 500, uri: "/boom?auth_token=REDACTED", errored: true},
				{name: "token passed on to a reverse proxy", method: "GET", url: inst + "/proxied?auth_token=" + url.QueryEscape(good), status: 200, uri: "/proxied?auth_token=REDACTED"},
				{name: "referer with a token", method: "GET", url: inst + "/session", header: append([]string{"Referer", inst + "/event?auth_token=" + good}, basic...), status: 200, uri: "/session"},
				{name: "pairing code", method: "GET", url: inst + "/auth/connect/" + codeClient, status: 200, uri: "/auth/connect/REDACTED"},
				{name: "pairing code, browser", method: "GET", url: inst + "/auth/connect/" + codeBrowser, header: []string{"Accept", "text/html"}, status: 302, uri: "/auth/connect/REDACTED"},
				{name: "pairing code used again", method: "GET", url: inst + "/auth/connect/" + codeClient, status: 401, uri: "/auth/connect/REDACTED"},
				{name: "dead pairing code", method: "GET", url: inst + "/auth/connect/" + deadCode, status: 401, uri: "/auth/connect/REDACTED"},

				{name: "verification page, signed out", method: "GET", url: cons + device, status: 303, uri: "/device?user_code=REDACTED"},
				{name: "sign-in page for it", method: "GET", url: cons + next, status: 200, uri: "/signin?next=%2Fdevice%3Fuser_code%3DREDACTED"},
			}
			for i, c := range calls {
				s.do(t, fmt.Sprint("r", i), c)
			}
			// Sign in from that page: the answer sends the browser back to
			// the verification page, code and all.
			_, page := s.do(t, "signin-page", secretCall{name: "sign-in page", method: "GET", url: cons + "/signin", status: 200})
			m := csrfInput.FindStringSubmatch(page)
			if m == nil {
				t.Fatalf("no csrf in %s", page)
			}
			signIn := secretCall{name: "sign in", method: "POST", url: cons + "/signin", header: []string{"Referer", cons + next},
				form: url.Values{"csrf": {m[1]}, "email": {"ada@example.com"}, "password": {"correct horse battery"}, "next": {device}}, status: 303, uri: "/signin"}
			resp, _ := s.do(t, fmt.Sprint("r", len(calls)), signIn)
			if resp.Header.Get("Location") != device {
				t.Fatalf("sign-in went to %q", resp.Header.Get("Location"))
			}
			calls = append(calls, signIn)
			page2 := secretCall{name: "verification page", method: "GET", url: cons + device, header: []string{"Referer", cons + next}, status: 200, uri: "/device?user_code=REDACTED"}
			_, page = s.do(t, fmt.Sprint("r", len(calls)), page2)
			calls = append(calls, page2)
			m = csrfInput.FindStringSubmatch(page)
			if m == nil {
				t.Fatalf("no csrf in %s", page)
			}
			csrf := m[1]
			for _, c := range []secretCall{
				{name: "wrong code", method: "GET", url: cons + "/device?user_code=" + wrongCode, status: 404, uri: "/device?user_code=REDACTED"},
				{name: "a page the verification page links to", method: "GET", url: cons + "/", header: []string{"Referer", cons + device}, status: 200, uri: "/"},
				{name: "wrong code posted", method: "POST", url: cons + "/device", header: []string{"Referer", cons + device},
					form: url.Values{"csrf": {csrf}, "user_code": {wrongCode}, "action": {"approve"}}, status: 404, uri: "/device"},
				{name: "approve", method: "POST", url: cons + "/device", header: []string{"Referer", cons + device},
					form: url.Values{"csrf": {csrf}, "user_code": {userCode}, "action": {"approve"}}, status: 200, uri: "/device"},
			} {
				s.do(t, fmt.Sprint("r", len(calls)), c)
				calls = append(calls, c)
			}
			time.Sleep(300 * time.Millisecond) // hung-up streams end

			var forms []string
			for _, v := range secrets {
				forms = append(forms, v, url.QueryEscape(v), url.PathEscape(v), url.QueryEscape(url.QueryEscape(v)),
					base64.StdEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v)))
			}
			for _, path := range []string{s.instanceLog, s.consoleLog, s.defaultLog} {
				data, _ := os.ReadFile(path)
				for _, f := range forms {
					if strings.Contains(string(data), f) {
						t.Errorf("%s holds %q:\n%s", filepath.Base(path), f, data)
					}
				}
			}

			parse := "json"
			if strings.HasSuffix(format, "console") {
				parse = "console"
			}
			instEntries, consEntries := readEntries(t, s.instanceLog, parse), readEntries(t, s.consoleLog, parse)
			defaults := readEntries(t, s.defaultLog, "json")
			for i, c := range calls {
				id := fmt.Sprint("r", i)
				es, logger := byReq(instEntries, id), "http.log.access."+s.instanceNames
				if strings.HasPrefix(c.url, cons) {
					es, logger = byReq(consEntries, id), "http.log.access."+s.consoleName
				}
				if len(es) != 1 {
					t.Errorf("%s: %d access entries, want 1", c.name, len(es))
					continue
				}
				e := es[0]
				if e.msg != "handled request" || e.logger != logger || get(e.fields, "status") != float64(c.status) {
					t.Errorf("%s: %q %q status %v", c.name, e.msg, e.logger, get(e.fields, "status"))
				}
				if got := get(e.fields, "request.uri"); got != c.uri {
					t.Errorf("%s: uri %v, want %s", c.name, got, c.uri)
				}
				if ref, ok := get(e.fields, "request.headers.Referer").([]any); ok && (len(ref) != 1 || !strings.Contains(ref[0].(string), "REDACTED")) {
					t.Errorf("%s: Referer %v", c.name, ref)
				}
				d := byReq(defaults, id)
				if c.errored {
					if len(d) != 1 || d[0].logger != "http.log.error."+s.instanceNames || get(d[0].fields, "request.uri") != c.uri {
						t.Errorf("%s: error log entries %v", c.name, d)
					}
				}
				for _, e := range d {
					if e.msg == "handled request" {
						t.Errorf("%s: access entry in the default log: %v", c.name, e.fields)
					}
				}
			}
			// The Console's redirects name the verification page: their
			// Location is redacted in the entry.
			for _, i := range []int{10, 12} {
				es := byReq(consEntries, fmt.Sprint("r", i))
				if len(es) == 1 {
					loc, _ := get(es[0].fields, "resp_headers.Location").([]any)
					if len(loc) != 1 || !strings.Contains(loc[0].(string), "user_code") || !strings.Contains(loc[0].(string), "REDACTED") {
						t.Errorf("%s: Location %v", calls[i].name, loc)
					}
				}
			}
		})
	}
}
