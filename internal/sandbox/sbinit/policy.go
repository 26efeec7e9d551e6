// Package sbinit is the sandbox's helper: the code that runs inside a new
// sandbox (its first process) before the command, dispatched from this
// package's init when the binary is re-run as "agentgate-sandbox".
//
// It imports only package os, os/signal and what they need: Go initializes a
// package once its imports are, in import-path order, so with these
// imports the helper runs about 2 ms into the process, before the rest of
// the binary (Caddy, its modules and their dependencies) spends time
// initializing — which every sandboxed call would otherwise pay for.
package sbinit

import "errors"

// Name is argv[0] of the helper.
const Name = "agentgate-sandbox"

// Home is HOME inside a sandbox: a directory of its private /tmp.
const Home = "/tmp/home"

// Policy is what the helper reads on fd 3: everything it needs to set one
// sandbox up, with no secret in it.
type Policy struct {
	Argv     []string
	Dir      string
	Env      []string
	Writable []string
	ReadOnly []string
	// Protect are paths inside Writable bound read-only again.
	Protect []string
	// MaskFiles and MaskDirs are covered by an empty read-only file or
	// directory.
	MaskFiles []string
	MaskDirs  []string
	// Hidden are covered like masks when they exist inside a bound path.
	Hidden  []string
	Network bool
	CPU     int64  // seconds of CPU per process (RLIMIT_CPU)
	Files   uint64 // open files per process (RLIMIT_NOFILE)
	// Probe sets everything up and exits 0 without running anything.
	Probe bool
}

// Encode writes the policy as records: a tag byte, the value, a NUL (no
// path, argument or variable holds a NUL).
func (p *Policy) Encode() []byte {
	var b []byte
	put := func(tag byte, v string) {
		b = append(b, tag)
		b = append(b, v...)
		b = append(b, 0)
	}
	for _, l := range []struct {
		tag byte
		v   []string
	}{{'a', p.Argv}, {'e', p.Env}, {'w', p.Writable}, {'r', p.ReadOnly}, {'p', p.Protect}, {'m', p.MaskFiles}, {'M', p.MaskDirs}, {'h', p.Hidden}} {
		for _, s := range l.v {
			put(l.tag, s)
		}
	}
	put('d', p.Dir)
	if p.Network {
		put('n', "1")
	}
	if p.Probe {
		put('P', "1")
	}
	put('c', itoa(uint64(p.CPU)))
	put('f', itoa(p.Files))
	return b
}

// Decode reads an encoded policy.
func Decode(b []byte) (*Policy, error) {
	p := &Policy{}
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i == len(b) || i == 0 {
			return nil, errors.New("a malformed policy")
		}
		tag, v := b[0], string(b[1:i])
		b = b[i+1:]
		switch tag {
		case 'a':
			p.Argv = append(p.Argv, v)
		case 'e':
			p.Env = append(p.Env, v)
		case 'w':
			p.Writable = append(p.Writable, v)
		case 'r':
			p.ReadOnly = append(p.ReadOnly, v)
		case 'p':
			p.Protect = append(p.Protect, v)
		case 'm':
			p.MaskFiles = append(p.MaskFiles, v)
		case 'M':
			p.MaskDirs = append(p.MaskDirs, v)
		case 'h':
			p.Hidden = append(p.Hidden, v)
		case 'd':
			p.Dir = v
		case 'n':
			p.Network = true
		case 'P':
			p.Probe = true
		case 'c', 'f':
			n, ok := atoi(v)
			if !ok {
				return nil, errors.New("a malformed policy number")
			}
			if tag == 'c' {
				p.CPU = int64(n)
			} else {
				p.Files = n
			}
		default:
			return nil, errors.New("a malformed policy tag")
		}
	}
	if !p.Probe && len(p.Argv) == 0 {
		return nil, errors.New("the policy names nothing to run")
	}
	return p, nil
}

func itoa(n uint64) string {
	if n == 0 {
		return "0"
	}
	var d [20]byte
	i := len(d)
	for n > 0 {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return string(d[i:])
}

func atoi(s string) (uint64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}
