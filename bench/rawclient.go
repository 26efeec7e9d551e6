package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// rawConn is one keep-alive HTTP/1.1 connection that sends a prebuilt
// request and reads the answer with no more work than that takes: the
// open loop's client. net/http's client costs tens of µs of the load
// side's core per request; at a fixed rate near a server's capacity that
// core, shared with the fake provider, would queue the requests itself and
// the figure would measure the load generator.
type rawConn struct {
	addr string
	req  []byte
	want int
	c    net.Conn
	br   *bufio.Reader
}

// rawRequest is the bytes of a POST of body to l's URL for provider slow,
// with the lane's headers.
func rawRequest(l *lane, slow int, body []byte) (addr string, req []byte, err error) {
	u, err := url.Parse(l.url[slow])
	if err != nil {
		return "", nil, err
	}
	if u.Scheme != "http" {
		return "", nil, fmt.Errorf("the open loop speaks plain HTTP only, not %s", u.Scheme)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", u.RequestURI(), u.Host, len(body))
	for k, vs := range l.hdr[slow] {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	b.Write(body)
	return u.Host, b.Bytes(), nil
}

func newRawConn(l *lane, slow int, body []byte) (*rawConn, error) {
	addr, req, err := rawRequest(l, slow, body)
	if err != nil {
		return nil, err
	}
	want := l.want
	if want == 0 {
		want = 200
	}
	return &rawConn{addr: addr, req: req, want: want}, nil
}

// do sends the request and reads the answer to its end, dialling first
// when the connection is not open; on any error the connection is closed
// (the next request dials again).
func (rc *rawConn) do(ctx context.Context) error {
	if rc.c == nil {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := d.DialContext(dctx, "tcp", rc.addr)
		cancel()
		if err != nil {
			return err
		}
		rc.c, rc.br = c, bufio.NewReaderSize(c, 16<<10)
	}
	rc.c.SetDeadline(time.Now().Add(60 * time.Second))
	status, keep, err := rc.roundTrip()
	if err != nil || !keep {
		rc.close()
	}
	if err != nil {
		return err
	}
	if status != rc.want {
		return fmt.Errorf("status %d", status)
	}
	return nil
}

func (rc *rawConn) close() {
	if rc.c != nil {
		rc.c.Close()
		rc.c, rc.br = nil, nil
	}
}

// roundTrip writes the request and reads one answer: its status, and
// whether the connection may serve another.
func (rc *rawConn) roundTrip() (status int, keep bool, err error) {
	if _, err := rc.c.Write(rc.req); err != nil {
		return 0, false, err
	}
	line, err := rc.br.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 200 OK"
	f := strings.Fields(string(line))
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	if status, err = strconv.Atoi(f[1]); err != nil {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, keep := int64(-1), false, true
	for {
		h, err := rc.br.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				return 0, false, fmt.Errorf("bad Content-Length %q", v)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			keep = !bytes.EqualFold(v, []byte("close"))
		}
	}
	switch {
	case chunked:
		for {
			l, err := rc.br.ReadSlice('\n')
			if err != nil {
				return 0, false, err
			}
			sz, _, _ := bytes.Cut(bytes.TrimRight(l, "\r\n"), []byte(";"))
			n, err := strconv.ParseInt(string(sz), 16, 64)
			if err != nil {
				return 0, false, fmt.Errorf("bad chunk size %q", l)
			}
			if _, err := rc.br.Discard(int(n) + 2); err != nil { // the chunk and its CRLF
				return 0, false, err
			}
			if n == 0 {
				return status, keep, nil // no trailers from the servers measured here
			}
		}
	case length >= 0:
		_, err := rc.br.Discard(int(length))
		return status, keep, err
	default:
		// No length: the answer ends with the connection.
		_, err := io.Copy(io.Discard, rc.br)
		return status, false, err
	}
}
