package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/html"
)

// The webfetch limits.
const (
	defaultFetchTimeout = 30 * time.Second
	maxFetchTimeout     = 120 * time.Second
	maxFetchBytes       = 5 << 20
)

var _ = register(&Tool{
	Name: "webfetch",
	Description: "Fetch a URL (http or https) and return its content as text, markdown or html (at most 5 MB; " +
		"timeout in seconds, default 30, at most 120). Private and loopback addresses are refused.",
	Schema: json.RawMessage(`{"type":"object","properties":{` +
		`"url":{"type":"string","description":"The URL to fetch content from"},` +
		`"format":{"type":"string","enum":["text","markdown","html"],"description":"The format to return the content in (text, markdown, or html). Defaults to markdown."},` +
		`"timeout":{"type":"number","description":"Optional timeout in seconds (max 120)"}},` +
		`"required":["url"]}`),
	Required: []string{"url"},
	Run:      runWebfetch,
})

// ErrPrivateAddress is a fetch to an address webfetch may not reach.
var ErrPrivateAddress = errors.New("private, loopback and link-local addresses are refused")

func runWebfetch(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		URL     string  `json:"url"`
		Format  string  `json:"format"`
		Timeout float64 `json:"timeout"`
	}
	if err := decode("webfetch", args, &in); err != nil {
		return Result{}, err
	}
	u, err := url.Parse(in.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Result{}, &ArgumentError{Tool: "webfetch", Reason: "url must be an http:// or https:// URL"}
	}
	switch in.Format {
	case "":
		in.Format = "markdown"
	case "text", "markdown", "html":
	default:
		return Result{}, &ArgumentError{Tool: "webfetch", Reason: "format must be text, markdown or html"}
	}
	if in.Timeout < 0 {
		return Result{}, &ArgumentError{Tool: "webfetch", Reason: "timeout must not be negative"}
	}
	timeout := defaultFetchTimeout
	if in.Timeout > 0 {
		timeout = min(time.Duration(in.Timeout*float64(time.Second)), maxFetchTimeout)
	}
	if err := env.permit(ctx, Ask{Permission: "webfetch", Patterns: []string{in.URL}, Always: []string{"*"},
		Metadata: map[string]any{"url": in.URL, "format": in.Format, "timeout": timeout.Seconds()}}); err != nil {
		return Result{}, err
	}
	client := env.Fetch.Client
	if client == nil {
		client = fetchClient(env.Fetch.AllowPrivate)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Result{}, err
	}
	req.Header.Set("User-Agent", "agentgate-webfetch")
	req.Header.Set("Accept", "text/html, text/markdown, text/plain, application/json;q=0.9, */*;q=0.8")
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, ErrPrivateAddress) {
			return Result{}, fmt.Errorf("Cannot fetch %s: %w (the instance's webfetch_private setting allows them)", u.Host, ErrPrivateAddress)
		}
		if ctx.Err() == context.DeadlineExceeded {
			return Result{}, fmt.Errorf("Request timed out after %v", timeout)
		}
		return Result{}, fmt.Errorf("Request failed: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Result{}, fmt.Errorf("Request failed with status code: %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFetchBytes+1))
	if err != nil {
		return Result{}, fmt.Errorf("Reading the response failed: %v", err)
	}
	if len(body) > maxFetchBytes {
		return Result{}, errors.New("Response too large (exceeds 5MB limit)")
	}
	ctype := resp.Header.Get("Content-Type")
	text := strings.ToValidUTF8(string(body), "\uFFFD")
	if strings.Contains(ctype, "html") && in.Format != "html" {
		text = htmlText(text, in.Format == "markdown")
	}
	return Result{Title: fmt.Sprintf("%s (%s)", in.URL, ctype), Output: text, Metadata: map[string]any{"status": resp.StatusCode, "contentType": ctype, "bytes": len(body)}}, nil
}

// fetchClient is an HTTP client whose dialer refuses private, loopback,
// link-local and unspecified addresses (unless allowed) after name
// resolution, so that a name resolving to such an address is refused too.
func fetchClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if !allowPrivate {
		d.Control = func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return err
			}
			if !Public(ip) {
				return ErrPrivateAddress
			}
			return nil
		}
	}
	tr := &http.Transport{DialContext: d.DialContext, Proxy: nil, TLSHandshakeTimeout: 10 * time.Second, MaxIdleConns: 4}
	return &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		return nil
	}}
}

// Public reports whether ip is a public unicast address.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsValid() && !ip.IsLoopback() && !ip.IsPrivate() && !ip.IsLinkLocalUnicast() && !ip.IsLinkLocalMulticast() &&
		!ip.IsUnspecified() && !ip.IsMulticast() && !ip.IsInterfaceLocalMulticast() && !cgnat.Contains(ip)
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// htmlText extracts the readable text of an HTML page: scripts, styles
// and head left out, block elements on lines of their own; as markdown,
// headings get #s, links their targets and list items a dash.
func htmlText(src string, markdown bool) string {
	doc, err := html.Parse(strings.NewReader(src))
	if err != nil {
		return src
	}
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "script", "style", "head", "noscript", "template", "svg":
				return
			case "p", "div", "section", "article", "br", "tr", "pre", "blockquote", "table", "ul", "ol":
				b.WriteString("\n")
			case "h1", "h2", "h3", "h4", "h5", "h6":
				b.WriteString("\n")
				if markdown {
					b.WriteString(strings.Repeat("#", int(n.Data[1]-'0')) + " ")
				}
			case "li":
				b.WriteString("\n")
				if markdown {
					b.WriteString("- ")
				}
			}
		}
		if n.Type == html.TextNode {
			t := strings.Join(strings.Fields(n.Data), " ")
			if t != "" {
				b.WriteString(t + " ")
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
		if n.Type == html.ElementNode && markdown && n.Data == "a" {
			for _, a := range n.Attr {
				if a.Key == "href" && strings.HasPrefix(a.Val, "http") {
					b.WriteString("(" + a.Val + ") ")
				}
			}
		}
		if n.Type == html.ElementNode && strings.HasPrefix(n.Data, "h") && len(n.Data) == 2 {
			b.WriteString("\n")
		}
	}
	walk(doc)
	lines := strings.Split(b.String(), "\n")
	out := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
