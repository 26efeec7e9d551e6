// Package e2e holds end-to-end tests that build the real binary
// (`go build ./cmd/caddy`), run it with generated Caddyfiles on free loopback
// ports and drive it the way an operator does: the `caddy agentgate`
// commands, the admin API, the Console API, config reloads and process
// kills. They are skipped under -short.
package e2e
