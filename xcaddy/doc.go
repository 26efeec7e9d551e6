// Package xcaddy holds the test of the reproducible xcaddy build: build.sh
// builds Caddy with the agentgate modules through xcaddy, which is pinned as
// a Go tool in the separate module under tools/ (so that the root module's
// dependencies stay clean). The test checks that both that binary and the
// one of `go build ./cmd/caddy` have every agentgate module.
package xcaddy
