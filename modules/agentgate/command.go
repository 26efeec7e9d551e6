package agentgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "agentgate",
		Usage: "<workspace|person|member|service-account|key|connection|token|budget|claude-code> ...",
		Short: "Bootstraps and administers agentgate through the admin API",
		Long: `
Operator commands for agentgate. Each is a thin client of the admin API
routes under /agentgate/ on Caddy's admin endpoint (default localhost:2019)
of a running server, and prints the JSON answer.

	caddy agentgate workspace create --name Acme
	caddy agentgate workspace list --name default --field id
	caddy agentgate person create --email ann@example.com --name Ann \
		--password-file "$PWFILE" --workspace wrk_… --role owner
	caddy agentgate service-account create --workspace wrk_… --name ci
	caddy agentgate key create --workspace wrk_… --service-account sa_… \
		--name ci-key --permission inference
	caddy agentgate token --person usr_… --workspace wrk_…
	caddy agentgate claude-code set --workspace wrk_… --file claude-code.json

The admin address comes from --address, else from the config given with
--config (as for caddy reload), else the default.`,
		CobraFunc: buildCommands,
	})
}

type cmdContext struct {
	address, config, adapter string
	// field, when set, prints only that member of the answer's data, as
	// plain text, for scripts: WRK=$(caddy agentgate workspace create
	// --name Acme --field id). On a list it prints that field of each
	// item, one a line.
	field string
	// out is where answers are printed (standard output).
	out io.Writer
}

func buildCommands(cmd *cobra.Command) { addCommands(cmd, os.Stdout) }

// addCommands adds the operator commands to cmd; they print to out.
func addCommands(cmd *cobra.Command, out io.Writer) {
	c := &cmdContext{out: out}
	pf := cmd.PersistentFlags()
	pf.StringVar(&c.address, "address", "", "The address of Caddy's admin endpoint")
	pf.StringVarP(&c.config, "config", "c", "", "Config file whose admin address to use")
	pf.StringVarP(&c.adapter, "adapter", "a", "", "Name of the config adapter for --config")
	pf.StringVar(&c.field, "field", "", "Print only this field of the answer's data (e.g. id, key, access_token)")

	ws := &cobra.Command{Use: "workspace", Short: "Workspaces"}
	var name string
	wsCreate := &cobra.Command{Use: "create", Short: "Create a workspace", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return c.call("POST", "/agentgate/workspaces", map[string]any{"name": name})
		}}
	wsCreate.Flags().StringVar(&name, "name", "", "Workspace name")
	var listName string
	wsList := &cobra.Command{Use: "list", Short: "List workspaces (--name: those with that name)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if listName == "" {
				return c.call("GET", "/agentgate/workspaces", nil)
			}
			return c.workspacesNamed(listName)
		}}
	wsList.Flags().StringVar(&listName, "name", "", "Only the workspaces with this name; with --field, exactly one must have it")
	var wsID string
	wsDelete := &cobra.Command{Use: "delete", Short: "Delete a workspace (every credential of it stops working)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return c.call("DELETE", "/agentgate/workspaces/"+url.PathEscape(wsID), nil)
		}}
	wsDelete.Flags().StringVar(&wsID, "workspace", "", "Workspace id")
	ws.AddCommand(wsCreate, wsList, wsDelete)

	person := &cobra.Command{Use: "person", Short: "People"}
	var email, pname, pwFile, pWorkspace, pRole string
	personCreate := &cobra.Command{Use: "create", Short: "Create a person", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			pw, err := readPassword(pwFile)
			if err != nil {
				return err
			}
			body := map[string]any{"email": email, "name": pname, "password": pw}
			if pWorkspace != "" || pRole != "" {
				body["workspace"], body["role"] = pWorkspace, pRole
			}
			return c.call("POST", "/agentgate/people", body)
		}}
	f := personCreate.Flags()
	f.StringVar(&email, "email", "", "Email address")
	f.StringVar(&pname, "name", "", "Display name")
	f.StringVar(&pwFile, "password-file", "", "File holding the password (else $AGENTGATE_PASSWORD)")
	f.StringVar(&pWorkspace, "workspace", "", "Workspace to join")
	f.StringVar(&pRole, "role", "", "Role in the workspace: owner, admin or member")
	person.AddCommand(personCreate)

	member := &cobra.Command{Use: "member", Short: "Workspace members"}
	var mWorkspace, mPerson, mRole string
	memberAdd := &cobra.Command{Use: "add", Short: "Add a person to a workspace", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return c.call("POST", "/agentgate/workspaces/"+url.PathEscape(mWorkspace)+"/members",
				map[string]any{"person_id": mPerson, "role": mRole})
		}}
	memberAdd.Flags().StringVar(&mWorkspace, "workspace", "", "Workspace id")
	memberAdd.Flags().StringVar(&mPerson, "person", "", "Person id")
	memberAdd.Flags().StringVar(&mRole, "role", "member", "Role: owner, admin or member")
	member.AddCommand(memberAdd)

	sa := &cobra.Command{Use: "service-account", Short: "Service accounts"}
	var saWorkspace, saName string
	saCreate := &cobra.Command{Use: "create", Short: "Create a service account", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return c.call("POST", "/agentgate/workspaces/"+url.PathEscape(saWorkspace)+"/service-accounts",
				map[string]any{"name": saName})
		}}
	saCreate.Flags().StringVar(&saWorkspace, "workspace", "", "Workspace id")
	saCreate.Flags().StringVar(&saName, "name", "", "Service account name")
	sa.AddCommand(saCreate)

	key := &cobra.Command{Use: "key", Short: "Service-account API keys"}
	var kWorkspace, kSA, kName, kPerm, kExpires, kID string
	keyCreate := &cobra.Command{Use: "create", Short: "Create a key; its value is printed once", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			body := map[string]any{"name": kName, "permission": kPerm}
			if kExpires != "" {
				body["expires_at"] = kExpires
			}
			return c.call("POST", keysPath(kWorkspace, kSA), body)
		}}
	keyRevoke := &cobra.Command{Use: "revoke", Short: "Revoke a key at once", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return c.call("DELETE", keysPath(kWorkspace, kSA)+"/"+url.PathEscape(kID), nil)
		}}
	for _, kc := range []*cobra.Command{keyCreate, keyRevoke} {
		kc.Flags().StringVar(&kWorkspace, "workspace", "", "Workspace id")
		kc.Flags().StringVar(&kSA, "service-account", "", "Service account id")
	}
	keyCreate.Flags().StringVar(&kName, "name", "", "Key name")
	keyCreate.Flags().StringVar(&kPerm, "permission", "inference", "inference (Inference only) or all")
	keyCreate.Flags().StringVar(&kExpires, "expires", "", "Expiry time, RFC 3339 (optional)")
	keyRevoke.Flags().StringVar(&kID, "id", "", "Key id")
	key.AddCommand(keyCreate, keyRevoke)

	conn := &cobra.Command{Use: "connection", Short: "Provider connections"}
	var cWorkspace, cFile string
	connCreate := &cobra.Command{Use: "create", Short: "Create a connection from a JSON file (- for stdin)", Args: cobra.NoArgs,
		Long: `Create a connection from a JSON file (- for stdin):

	{
	  "name": "OpenAI",                        required
	  "kind": "openai",                        openai | anthropic | google | openai-compatible
	  "base_url": "https://api.openai.com/v1", as the provider's SDK takes it
	  "credential": "sk-…",                    the provider key; stored encrypted, never shown again
	  "headers": {"OpenAI-Organization": "org-123"},          optional, sent upstream
	  "models": {                              optional; keyed by the id clients send
	    "gpt-4o": {
	      "upstream_id": "gpt-4o-2024-08-06",  optional: the id sent to the provider
	      "enabled": true,                     optional, default true
	      "pricing": {"input": 2.5, "output": 10, "cache_read": 1.25},
	      "max_output_tokens": 16384           optional: the budget reservation's output bound
	    }
	  }
	}

Prices are USD per million tokens as exact JSON numbers (at most six
decimals); cache_write and reasoning are optional too. The file holds the
provider key: keep it out of the checkout and remove it afterwards, or pipe
it in with --file -.`,
		RunE: func(*cobra.Command, []string) error {
			var b []byte
			var err error
			if cFile == "-" {
				b, err = io.ReadAll(os.Stdin)
			} else {
				b, err = os.ReadFile(cFile)
			}
			if err != nil {
				return err
			}
			return c.callRaw("POST", "/agentgate/workspaces/"+url.PathEscape(cWorkspace)+"/connections", b)
		}}
	connCreate.Flags().StringVar(&cWorkspace, "workspace", "", "Workspace id")
	connCreate.Flags().StringVar(&cFile, "file", "", "JSON file: {name, kind, base_url, credential, headers?, models?} (see the long help)")
	conn.AddCommand(connCreate)

	var tPerson, tWorkspace string
	token := &cobra.Command{Use: "token", Short: "Issue an access token (1 h) acting as a person", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			body := map[string]any{}
			if tWorkspace != "" {
				body["workspace"] = tWorkspace
			}
			return c.call("POST", "/agentgate/people/"+url.PathEscape(tPerson)+"/tokens", body)
		}}
	token.Flags().StringVar(&tPerson, "person", "", "Person id")
	token.Flags().StringVar(&tWorkspace, "workspace", "", "Bind the token to this workspace (optional)")

	budget := &cobra.Command{Use: "budget", Short: "Member budgets"}
	var bWorkspace, bMember, bLimit, bPeriod string
	var bRemove bool
	budgetSet := &cobra.Command{Use: "set", Short: "Set (or --remove) a member's budget", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			body := map[string]any{"limit_usd": nil}
			if !bRemove {
				if bLimit == "" {
					return errors.New("give --limit (USD) and --period, or --remove")
				}
				body = map[string]any{"limit_usd": json.Number(bLimit), "period": bPeriod}
			}
			return c.call("PUT", "/agentgate/workspaces/"+url.PathEscape(bWorkspace)+"/budgets/"+url.PathEscape(bMember), body)
		}}
	budgetSet.Flags().StringVar(&bWorkspace, "workspace", "", "Workspace id")
	budgetSet.Flags().StringVar(&bMember, "member", "", "Person (usr_…) or service account (sa_…) id")
	budgetSet.Flags().StringVar(&bLimit, "limit", "", "Limit in USD, e.g. 25.50")
	budgetSet.Flags().StringVar(&bPeriod, "period", "monthly", "daily, weekly, monthly or total")
	budgetSet.Flags().BoolVar(&bRemove, "remove", false, "Remove the budget (unlimited)")
	budgetList := &cobra.Command{Use: "list", Short: "List members' budgets and spend", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return c.call("GET", "/agentgate/workspaces/"+url.PathEscape(bWorkspace)+"/budgets", nil)
		}}
	budgetList.Flags().StringVar(&bWorkspace, "workspace", "", "Workspace id")
	budget.AddCommand(budgetSet, budgetList)

	cc := &cobra.Command{Use: "claude-code", Short: "The workspace's Claude Code settings (managed settings of its members' CLIs)"}
	var ccWorkspace, ccFile string
	ccPath := func() string { return "/agentgate/workspaces/" + url.PathEscape(ccWorkspace) + "/claude-code/settings" }
	ccGet := &cobra.Command{Use: "get", Short: "Print the settings document, its checksum and what OpenCode gets of it", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return c.call("GET", ccPath(), nil) }}
	ccSet := &cobra.Command{Use: "set", Short: "Replace the settings document with a JSON file (- for stdin)", Args: cobra.NoArgs,
		Long: `Replace the workspace's Claude Code settings document with a JSON file
(- for stdin), for example:

	{
	  "permissions": {"allow": ["Bash(npm run *)"], "deny": ["WebFetch", "Bash(curl *)"]},
	  "env": {"DISABLE_AUTOUPDATER": "1"}
	}

Keys that make members' machines run commands or send traffic elsewhere
(hooks, apiKeyHelper, statusLine, otelHeadersHelper, env NODE_OPTIONS,
HTTPS_PROXY, …) and unknown keys are refused, named in the answer. {}
clears the document. The change is recorded as the operator's.`,
		RunE: func(*cobra.Command, []string) error {
			var b []byte
			var err error
			if ccFile == "-" {
				b, err = io.ReadAll(os.Stdin)
			} else {
				b, err = os.ReadFile(ccFile)
			}
			if err != nil {
				return err
			}
			return c.callRaw("PUT", ccPath(), b)
		}}
	ccHistory := &cobra.Command{Use: "history", Short: "List the accepted changes: who, when, checksum", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return c.call("GET", ccPath()+"/history", nil) }}
	for _, x := range []*cobra.Command{ccGet, ccSet, ccHistory} {
		x.Flags().StringVar(&ccWorkspace, "workspace", "", "Workspace id")
	}
	ccSet.Flags().StringVar(&ccFile, "file", "", "JSON file holding the settings document (- for stdin)")
	cc.AddCommand(ccGet, ccSet, ccHistory)

	cmd.AddCommand(ws, person, member, sa, key, conn, token, budget, cc, sandboxCommand())
}

func keysPath(ws, sa string) string {
	return "/agentgate/workspaces/" + url.PathEscape(ws) + "/service-accounts/" + url.PathEscape(sa) + "/keys"
}

func readPassword(file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	if pw := os.Getenv("AGENTGATE_PASSWORD"); pw != "" {
		return pw, nil
	}
	return "", errors.New("give the password with --password-file or $AGENTGATE_PASSWORD (never on the command line)")
}

func (c *cmdContext) call(method, path string, body any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	return c.callRaw(method, path, b)
}

func (c *cmdContext) callRaw(method, path string, body []byte) error {
	out, err := c.request(method, path, body)
	if err != nil {
		return err
	}
	return c.print(out)
}

// request sends one admin API request and returns the answer's body.
func (c *cmdContext) request(method, path string, body []byte) ([]byte, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(c.address, nil, c.config, c.adapter)
	if err != nil {
		return nil, fmt.Errorf("finding the admin address: %v", err)
	}
	h := http.Header{}
	var rd io.Reader
	if body != nil {
		h.Set("Content-Type", "application/json")
		rd = bytes.NewReader(body)
	}
	resp, err := caddycmd.AdminAPIRequest(addr, method, path, h, rd)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// print prints an answer: the --field of its data, else the whole answer
// as indented JSON.
func (c *cmdContext) print(out []byte) error {
	if c.field != "" {
		return printField(c.out, out, c.field)
	}
	if len(bytes.TrimSpace(out)) > 0 {
		var pretty bytes.Buffer
		if json.Indent(&pretty, out, "", "  ") == nil {
			out = append(pretty.Bytes(), '\n')
		}
		c.out.Write(out)
	}
	return nil
}

// workspacesNamed prints the workspaces whose name is name (the operator's
// list filtered here, as the list has no query). None is an error, and so
// is more than one when --field asks for a single value: a script's
// WRK=$(… --field id) then never holds two ids or none.
func (c *cmdContext) workspacesNamed(name string) error {
	out, err := c.request("GET", "/agentgate/workspaces", nil)
	if err != nil {
		return err
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return fmt.Errorf("the workspace list is not JSON: %v", err)
	}
	var named []json.RawMessage
	var ids []string
	for _, w := range list.Data {
		var v struct{ ID, Name string }
		if json.Unmarshal(w, &v) == nil && v.Name == name {
			named, ids = append(named, w), append(ids, v.ID)
		}
	}
	switch {
	case len(named) == 0:
		return fmt.Errorf("no workspace is named %q (caddy agentgate workspace list shows them all)", name)
	case len(named) > 1 && c.field != "":
		return fmt.Errorf("%d workspaces are named %q (%s): use an id", len(named), name, strings.Join(ids, ", "))
	}
	b, err := json.Marshal(map[string]any{"data": named})
	if err != nil {
		return err
	}
	return c.print(b)
}

// printField prints one member of an answer's data as plain text: a string
// as it is, anything else as JSON. When the data is a list, it prints that
// member of each item, one a line.
func printField(w io.Writer, answer []byte, field string) error {
	var a struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(answer, &a); err != nil || len(a.Data) == 0 || string(a.Data) == "null" {
		return fmt.Errorf("the answer has no data to take %q from", field)
	}
	items := []json.RawMessage{a.Data}
	if bytes.HasPrefix(bytes.TrimSpace(a.Data), []byte("[")) {
		items = nil
		if err := json.Unmarshal(a.Data, &items); err != nil {
			return fmt.Errorf("the answer's data list: %v", err)
		}
	}
	var lines bytes.Buffer
	for _, item := range items {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(item, &obj); err != nil || obj == nil {
			return fmt.Errorf("the answer's data has no object to take %q from", field)
		}
		v, ok := obj[field]
		if !ok {
			return fmt.Errorf("the answer's data has no field %q", field)
		}
		var str string
		if json.Unmarshal(v, &str) == nil {
			lines.WriteString(str + "\n")
		} else {
			lines.Write(append(v, '\n'))
		}
	}
	_, err := w.Write(lines.Bytes())
	return err
}
