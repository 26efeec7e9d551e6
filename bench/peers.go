package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A peer is another gateway's binary, given with -peer name=command, run
// as a lane of the same interleaved run (throughput at the 0 ms provider,
// the wrk lane, the open loop): pinned like the servers (core 1,
// GOMAXPROCS=2) and pointed at the fake provider with no delay.
//
// The command is split on spaces; in it and in the environment
// {port} is the port the peer must listen on, {addr} host:port,
// {provider} the fake provider's OpenAI base URL (ending in /v1), {key}
// the provider's credential and {dir} a scratch directory of the peer's.
// The process also gets PORT, OPENAI_API_KEY and OPENAI_BASE_URL, the
// names most OpenAI-compatible gateways read. The bench sends OpenAI Chat
// Completions to http://{addr}/v1/chat/completions with the provider's
// credential as bearer token.
//
// A peer named gomodel (or a command whose binary is named gomodel) is
// GoModel: it also gets GoModel's settings for a pass-through benchmark
// (no request logging, usage tracking, metrics, admin, swagger, retries or
// circuit breaking; its storage a SQLite file in {dir}; nothing fetched
// from outside loopback).
type peerSpec struct {
	name, cmd string
}

// peerFlags collects repeated -peer flags.
type peerFlags []peerSpec

func (p *peerFlags) String() string {
	var s []string
	for _, x := range *p {
		s = append(s, x.name+"="+x.cmd)
	}
	return strings.Join(s, ",")
}

func (p *peerFlags) Set(v string) error {
	name, cmd, ok := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.TrimSpace(cmd) == "" {
		return errors.New("want name=command, e.g. gomodel=/path/to/gomodel")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("peer name %q: use lower-case letters, digits, - and _", name)
		}
	}
	switch name {
	case "a", "b", "c", "i", "p", "p2", "d":
		return fmt.Errorf("peer name %q is a bench lane's", name)
	}
	*p = append(*p, peerSpec{name, strings.TrimSpace(cmd)})
	return nil
}

// peerPrefix marks a peer's lane id ("peer-gomodel").
const peerPrefix = "peer-"

func isPeer(id string) bool { return strings.HasPrefix(id, peerPrefix) }

// gomodelEnv is GoModel's configuration for a pass-through benchmark.
var gomodelEnv = []string{
	"LOGGING_ENABLED=false", "USAGE_ENABLED=false", "METRICS_ENABLED=false",
	"ADMIN_ENDPOINTS_ENABLED=false", "ADMIN_UI_ENABLED=false", "SWAGGER_ENABLED=false",
	"PPROF_ENABLED=false", "GUARDRAILS_ENABLED=false", "RETRY_MAX_RETRIES=0", "CIRCUIT_BREAKER_FAILURE_THRESHOLD=1000000000",
	"STORAGE_TYPE=sqlite", "SQLITE_PATH={dir}/gomodel.db", "GOMODEL_CACHE_DIR={dir}/cache",
	"GOMODEL_MASTER_KEY={key}", "LOG_LEVEL=warn", "CACHE_REFRESH_INTERVAL=86400",
	// Its model metadata list is fetched from a public address by
	// default: the fake provider's model list keeps it on loopback (a list
	// it cannot read is a warning, not an error).
	"MODEL_LIST_URL={provider}/models",
}

// startPeer runs one peer and waits until it answers a chat request end
// to end (up to 30 s).
func (r *rig) startPeer(ctx context.Context, p peerSpec, logf func(string, ...any)) (*lane, error) {
	addr := freeAddr()
	_, port, _ := net.SplitHostPort(addr)
	dir := filepath.Join(r.work, "peer-"+p.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	provider := r.providers[0].URL + "/v1"
	expand := strings.NewReplacer("{port}", port, "{addr}", addr, "{provider}", provider, "{key}", providerSecret, "{dir}", dir).Replace
	args := strings.Fields(expand(p.cmd))
	env := append(os.Environ(), "GOMAXPROCS="+serverProcs(), "PORT="+port, "OPENAI_API_KEY="+providerSecret, "OPENAI_BASE_URL="+provider)
	if p.name == "gomodel" || filepath.Base(args[0]) == "gomodel" {
		for _, e := range gomodelEnv {
			env = append(env, expand(e))
		}
	}
	cmd := r.serverCommand(args[0], args[1:]...)
	cmd.Env, cmd.Dir = env, dir
	logFile, err := os.Create(filepath.Join(r.work, "peer-"+p.name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	logf("starting peer %s: %s", p.name, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r.started = append(r.started, cmd)
	l := &lane{id: peerPrefix + p.name, name: "peer " + p.name, client: newClient(), pid: func() int { return cmd.Process.Pid }}
	for i := range r.providers {
		// Peers talk to the 0 ms provider only: the conditions at the
		// 20 ms provider leave them out (see peerSkips).
		l.url[i] = "http://" + addr + "/v1/chat/completions"
		l.hdr[i] = http.Header{"Authorization": {"Bearer " + providerSecret}}
	}
	if err := waitAnswers(ctx, l, 30*time.Second, func() bool { return exited(cmd.Process.Pid) }); err != nil {
		lg, _ := os.ReadFile(logFile.Name())
		return nil, fmt.Errorf("it did not serve a chat request: %v; its log ends: %s", err, tail(string(lg), 600))
	}
	return l, nil
}

// exited is true when the process has ended (a zombie not yet waited
// for, which close reaps).
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// peerSkips is true when a peer sits out a figure that needs the 20 ms
// provider.
func peerSkips(id string, slow int) bool { return isPeer(id) && slow != 0 }
