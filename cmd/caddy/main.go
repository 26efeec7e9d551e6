// Command caddy is Caddy with the agentgate modules: what xcaddy generates
// for `xcaddy build --with github.com/agentgate/agentgate`.
package main

import (
	_ "time/tzdata"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/agentgate/agentgate"
)

func main() { caddycmd.Main() }
