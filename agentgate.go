// Package agentgate pulls in every agentgate Caddy module, so that
// `xcaddy build --with github.com/agentgate/agentgate` or a custom main that
// imports this package gets them all.
package agentgate

import (
	_ "github.com/agentgate/agentgate/modules/agentgate"
	_ "github.com/agentgate/agentgate/modules/console"
	_ "github.com/agentgate/agentgate/modules/gateway"
	_ "github.com/agentgate/agentgate/modules/instance"
)
