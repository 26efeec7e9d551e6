package permission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		in, pat string
		want    bool
	}{
		{"git status", "git status *", true}, {"git status --short", "git status *", true}, {"git stash", "git status *", false},
		{"rm -rf /", "rm *", true}, {"ls", "ls *", true}, {"lsof", "ls *", false},
		{"src/a/b.go", "src/*", true}, {"src/a/b.go", "*.go", true}, {"src/a/b.txt", "*.go", false},
		{"a.env", "*.env", true}, {"a.env.example", "*.env", false}, {`dir\file.go`, "dir/*", true},
		{"x(y)", "x(y)", true}, {"x+y", "x?y", true}, {"https://example.com/a", "https://example.com/*", true},
	} {
		if got := Match(c.in, c.pat); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.in, c.pat, got, c.want)
		}
	}
}

func TestEvaluateLastMatchWins(t *testing.T) {
	instance := []Rule{{Action: "bash", Resource: "go test *", Effect: Allow}}
	agent := []Rule{{Action: "bash", Resource: "*", Effect: Deny}}
	session := []Rule{{Action: "bash", Resource: "go *", Effect: Ask}}
	for _, c := range []struct {
		action, res string
		sets        [][]Rule
		want        string
	}{
		{"bash", "ls", [][]Rule{Defaults}, Ask},
		{"edit", "a.go", [][]Rule{Defaults}, Allow},
		{"webfetch", "https://x", [][]Rule{Defaults}, Ask},
		{"external_directory", "/tmp/*", [][]Rule{Defaults}, Ask},
		{"read", "config/.env", [][]Rule{Defaults}, Ask},
		{"read", "config/.env.example", [][]Rule{Defaults}, Allow},
		{"bash", "go test ./...", [][]Rule{Defaults, instance}, Allow},
		{"bash", "go test ./...", [][]Rule{Defaults, instance, agent}, Deny},
		{"bash", "go test ./...", [][]Rule{Defaults, instance, agent, session}, Ask},
		{"bash", "make", [][]Rule{Defaults, instance, agent, session}, Deny},
		{"anything", "x", nil, Ask},
	} {
		if got := Evaluate(c.action, c.res, c.sets...); got.Effect != c.want {
			t.Errorf("%s %s: %s, want %s", c.action, c.res, got.Effect, c.want)
		}
	}
	d := EvaluateAll("edit", []string{"a.go", "secret/x"}, []Rule{{Action: "edit", Resource: "*", Effect: Allow}, {Action: "edit", Resource: "secret/*", Effect: Deny}})
	if d.Effect != Deny || d.Rule == nil || d.Rule.Resource != "secret/*" {
		t.Fatalf("EvaluateAll: %+v", d)
	}
}

func TestDefaultsAskForEnvEdits(t *testing.T) {
	for _, c := range []struct{ res, want string }{
		{".env", Ask}, {"config/.env.local", Ask}, {".env.example", Allow}, {"main.go", Allow},
	} {
		if got := Evaluate("edit", c.res, Defaults).Effect; got != c.want {
			t.Errorf("edit %s: %s, want %s", c.res, got, c.want)
		}
	}
}

// The policy's limits: the operator's deny is final, and the project's
// sets can make a guarded call stricter, never looser, unless trusted.
func TestPolicyProjectNarrowsOperatorDenyFinal(t *testing.T) {
	set := func(src Source, rules ...Rule) Set { return Set{Source: src, Rules: rules} }
	rule := func(action, res, effect string) Rule { return Rule{Action: action, Resource: res, Effect: effect} }
	defaults := set(Trusted, Defaults...)
	for _, c := range []struct {
		name   string
		sets   []Set
		trust  bool
		action string
		res    string
		want   string
	}{
		{"project allows bash", []Set{defaults, set(Project, rule("bash", "*", Allow))}, false, "bash", "ls", Ask},
		{"project allows everything", []Set{defaults, set(Project, rule("*", "*", Allow))}, false, "webfetch", "https://x", Ask},
		{"project allows outside paths", []Set{defaults, set(Project, rule("external_directory", "*", Allow))}, false, "external_directory", "/etc/*", Ask},
		{"trusted project allows bash", []Set{defaults, set(Project, rule("bash", "*", Allow))}, true, "bash", "ls", Allow},
		{"project denies bash", []Set{defaults, set(Project, rule("bash", "*", Deny))}, false, "bash", "ls", Deny},
		{"project asks for edits", []Set{defaults, set(Project, rule("edit", "*", Ask))}, false, "edit", "a.go", Ask},
		{"project allows editing .env", []Set{defaults, set(Project, rule("edit", "*.env", Allow))}, false, "edit", ".env", Ask},
		{"project allows reading a key", []Set{defaults, set(Trusted, rule("read", "*.pem", Ask)), set(Project, rule("read", "*", Allow))}, false, "read", `certs\server.pem`, Ask},
		{"project allows an edit the agent denies", []Set{defaults, set(Trusted, rule("edit", "*", Deny)), set(Project, rule("edit", "*", Allow))}, false, "edit", "a.go", Allow},
		{"project allows bash a trusted agent denies", []Set{defaults, set(Trusted, rule("bash", "*", Deny)), set(Project, rule("bash", "*", Allow))}, false, "bash", "ls", Deny},
		{"project asks for bash a trusted agent denies", []Set{defaults, set(Trusted, rule("bash", "*", Deny)), set(Project, rule("bash", "*", Ask))}, false, "bash", "ls", Deny},
		{"session allows over the project", []Set{defaults, set(Project, rule("bash", "*", Ask)), set(Trusted, rule("bash", "*", Allow))}, false, "bash", "ls", Allow},
		{"operator deny over the session", []Set{defaults, set(Operator, rule("bash", "rm *", Deny)), set(Trusted, rule("bash", "*", Allow))}, false, "bash", "rm x", Deny},
		{"operator deny over a trusted project", []Set{defaults, set(Operator, rule("bash", "rm *", Deny)), set(Project, rule("bash", "*", Allow))}, true, "bash", "rm x", Deny},
		{"operator deny elsewhere", []Set{defaults, set(Operator, rule("bash", "rm *", Deny)), set(Trusted, rule("bash", "*", Allow))}, false, "bash", "ls", Allow},
		{"operator's own later allow", []Set{defaults, set(Operator, rule("bash", "*", Deny), rule("bash", "git *", Allow)), set(Trusted, rule("bash", "*", Ask))}, false, "bash", "git status", Ask},
	} {
		p := Policy{Sets: c.sets, TrustProject: c.trust}
		if got := p.Decide(c.action, []string{c.res}).Effect; got != c.want {
			t.Errorf("%s: %s %s: %s, want %s", c.name, c.action, c.res, got, c.want)
		}
	}
	// The deciding rule of a final deny is the operator's.
	op := Rule{Action: "bash", Resource: "rm *", Effect: Deny}
	d := Policy{Sets: []Set{defaults, {Operator, []Rule{op}}, {Trusted, []Rule{{Action: "bash", Resource: "*", Effect: Allow}}}}}.Decide("bash", []string{"ls", "rm -rf /"})
	if d.Effect != Deny || d.Rule == nil || *d.Rule != op {
		t.Fatalf("final deny: %+v", d)
	}
}

func TestPolicyHidden(t *testing.T) {
	set := func(src Source, rules ...Rule) Set { return Set{Source: src, Rules: rules} }
	rule := func(action, effect string) Rule { return Rule{Action: action, Resource: "*", Effect: effect} }
	defaults := set(Trusted, Defaults...)
	for _, c := range []struct {
		name   string
		sets   []Set
		trust  bool
		action string
		want   bool
	}{
		{"defaults", []Set{defaults}, false, "bash", false},
		{"project hides bash", []Set{defaults, set(Project, rule("bash", Deny))}, false, "bash", true},
		{"project cannot offer what the operator denies", []Set{defaults, set(Operator, rule("bash", Deny)), set(Project, rule("bash", Allow))}, true, "bash", true},
		{"session cannot offer what the operator denies", []Set{defaults, set(Operator, rule("webfetch", Deny)), set(Trusted, rule("webfetch", Allow))}, false, "webfetch", true},
		{"project cannot offer bash a trusted agent denies", []Set{defaults, set(Trusted, rule("bash", Deny)), set(Project, rule("bash", Allow))}, false, "bash", true},
		{"trusted project offers it", []Set{defaults, set(Trusted, rule("bash", Deny)), set(Project, rule("bash", Allow))}, true, "bash", false},
		{"session offers bash a trusted agent denies", []Set{defaults, set(Trusted, rule("bash", Deny)), set(Trusted, rule("bash", Allow))}, false, "bash", false},
		{"project offers edits the agent denies", []Set{defaults, set(Trusted, rule("edit", Deny)), set(Project, rule("edit", Allow))}, false, "edit", false},
	} {
		if got := (Policy{Sets: c.sets, TrustProject: c.trust}).Hidden(c.action); got != c.want {
			t.Errorf("%s: hidden %v, want %v", c.name, got, c.want)
		}
	}
}

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) publish(sid, dir, typ string, data map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s %s %v %v", typ, sid, data["reply"], data["cancelled"]))
}

func newBroker() (*Broker, *recorder) {
	rec := &recorder{}
	n := 0
	var mu sync.Mutex
	return NewBroker(rec.publish, func(p string) string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("%s_%04d", p, n)
	}), rec
}

// ask starts an ask in the background and waits until it is pending.
func ask(t *testing.T, b *Broker, ctx context.Context, sid, dir string) (string, chan Reply) {
	t.Helper()
	before := len(b.Permissions(""))
	ch := make(chan Reply, 1)
	go func() {
		ch <- b.Ask(ctx, dir, Request{SessionID: sid, Permission: "bash", Patterns: []string{"ls"}, Always: []string{"ls *"}})
	}()
	for i := 0; i < 500; i++ {
		if l := b.Permissions(""); len(l) > before {
			return l[len(l)-1].ID, ch
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("the request never became pending")
	return "", nil
}

func TestBrokerReplies(t *testing.T) {
	b, rec := newBroker()
	ctx := context.Background()
	id, ch := ask(t, b, ctx, "ses_a", "/p")
	if err := b.Reply(id, "ses_other", Once, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another session's reply: %v", err)
	}
	if err := b.Reply(id, "", Once, ""); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.Kind != Once {
		t.Fatalf("reply %+v", r)
	}
	if err := b.Reply(id, "", Once, ""); !errors.Is(err, ErrSettled) {
		t.Fatalf("second reply: %v", err)
	}
	if err := b.Reply("per_nope", "", Once, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	// A reject rejects the session's other pending requests, not others'.
	id1, ch1 := ask(t, b, ctx, "ses_a", "/p")
	_, ch2 := ask(t, b, ctx, "ses_a", "/p")
	id3, ch3 := ask(t, b, ctx, "ses_b", "/p")
	if err := b.Reply(id1, "ses_a", Reject, "use make"); err != nil {
		t.Fatal(err)
	}
	if r := <-ch1; r.Kind != Reject || r.Message != "use make" {
		t.Fatalf("reject %+v", r)
	}
	if r := <-ch2; r.Kind != Reject {
		t.Fatalf("the session's other request %+v", r)
	}
	if l := b.Permissions(""); len(l) != 1 || l[0].ID != id3 {
		t.Fatalf("pending after reject: %+v", l)
	}
	b.Recheck("ses_b", func(Request) bool { return true })
	if r := <-ch3; r.Kind != Always {
		t.Fatalf("recheck %+v", r)
	}
	if len(rec.events) < 6 {
		t.Fatalf("events %v", rec.events)
	}
}

func TestBrokerCancels(t *testing.T) {
	b, rec := newBroker()
	ctx, cancel := context.WithCancel(context.Background())
	_, ch := ask(t, b, ctx, "ses_a", "/p")
	cancel()
	if r := <-ch; r.Cancelled != "interrupted" {
		t.Fatalf("interrupt: %+v", r)
	}
	_, chA := ask(t, b, context.Background(), "ses_a", "/one")
	_, chB := ask(t, b, context.Background(), "ses_b", "/two")
	b.Cancel("", "/one", "reloaded")
	if r := <-chA; r.Cancelled != "reloaded" {
		t.Fatalf("reload: %+v", r)
	}
	select {
	case r := <-chB:
		t.Fatalf("a request of another location was cancelled: %+v", r)
	default:
	}
	b.Cancel("ses_b", "", "removed")
	if r := <-chB; r.Cancelled != "removed" {
		t.Fatalf("removal: %+v", r)
	}
	found := false
	for _, e := range rec.events {
		if e == "permission.replied ses_b reject removed" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no cancellation event: %v", rec.events)
	}
}

func TestFormsAnswerRejectAndValidate(t *testing.T) {
	b, _ := newBroker()
	no := false
	form := Form{SessionID: "ses_a", Questions: []Question{
		{Question: "Color?", Header: "c", Options: []Option{{Label: "red"}, {Label: "blue"}}, Custom: &no},
		{Question: "Fruits?", Header: "f", Options: []Option{{Label: "apple"}}, Multiple: true},
	}}
	type result struct {
		answers   [][]string
		rejected  bool
		cancelled string
	}
	start := func(ctx context.Context) (string, chan result) {
		ch := make(chan result, 1)
		before := len(b.Forms(""))
		go func() {
			a, r, c := b.AskForm(ctx, "/p", form)
			ch <- result{a, r, c}
		}()
		for i := 0; i < 500; i++ {
			if l := b.Forms(""); len(l) > before {
				return l[len(l)-1].ID, ch
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatal("the form never became pending")
		return "", nil
	}
	id, ch := start(context.Background())
	var inv *InvalidAnswerError
	for _, bad := range [][][]string{{{"red"}}, {{"green"}, {"apple"}}, {{"red", "blue"}, {"apple"}}, {{""}, {"x"}}} {
		if err := b.Answer(id, "", bad); !errors.As(err, &inv) {
			t.Fatalf("answer %v: %v", bad, err)
		}
	}
	if err := b.Answer(id, "ses_b", [][]string{{"red"}, {"apple"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another session's answer: %v", err)
	}
	if err := b.Answer(id, "ses_a", [][]string{{"red"}, {"apple", "kiwi"}}); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.rejected || len(r.answers) != 2 || r.answers[1][1] != "kiwi" {
		t.Fatalf("answered %+v", r)
	}
	if err := b.Answer(id, "", [][]string{{"red"}, {}}); !errors.Is(err, ErrSettled) {
		t.Fatalf("second answer: %v", err)
	}
	if err := b.RejectForm(id, ""); !errors.Is(err, ErrSettled) {
		t.Fatalf("reject after answer: %v", err)
	}
	id, ch = start(context.Background())
	if err := b.RejectForm(id, ""); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; !r.rejected || r.cancelled != "" {
		t.Fatalf("rejected %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, ch = start(ctx)
	cancel()
	if r := <-ch; r.cancelled != "interrupted" {
		t.Fatalf("interrupted %+v", r)
	}
}

func TestDefaultsAskForSensitiveFiles(t *testing.T) {
	for _, c := range []struct {
		action, res, want string
	}{
		{"read", ".env", Ask}, {"edit", ".env", Ask}, {"edit", "app/.env.local", Ask}, {"read", "id_rsa", Ask},
		{"edit", "deploy/tls/server.key", Ask}, {"read", ".ssh/config", Ask}, {"read", "home/.aws/credentials", Ask},
		{"read", "/abs/path/.npmrc", Ask}, {"edit", "secrets.yaml", Ask}, {"read", ".ssh", Ask}, {"read", ".ssh/id_rsa.pub", Ask},
		{"read", ".env.example", Allow}, {"edit", "a/.env.sample", Allow}, {"read", "id_ed25519.pub", Allow},
		{"read", "main.go", Allow}, {"edit", "env.go", Allow}, {"read", "keys.go", Allow}, {"edit", ".envrc", Allow},
	} {
		if got := Evaluate(c.action, c.res, Defaults); got.Effect != c.want {
			t.Errorf("%s %s: %s, want %s", c.action, c.res, got.Effect, c.want)
		}
	}
}

func TestEvaluateAnyIsTheStrictestEffectAnyResourceCouldGet(t *testing.T) {
	allowAll := []Rule{{Action: "bash", Resource: "*", Effect: Allow}}
	for _, c := range []struct {
		name  string
		rules []Rule
		want  string
	}{
		{"the defaults ask", nil, Ask},
		{"everything allowed", allowAll, Allow},
		{"everything allowed, one command denied", append(allowAll[:1:1], Rule{Action: "bash", Resource: "rm *", Effect: Deny}), Ask},
		{"everything allowed, one command allowed again", append(allowAll[:1:1], Rule{Action: "bash", Resource: "ls *", Effect: Allow}), Allow},
		{"a prefix rule alone", []Rule{{Action: "bash", Resource: "eval *", Effect: Allow}}, Ask},
		{"everything denied", []Rule{{Action: "bash", Resource: "* *", Effect: Deny}}, Deny},
		{"another action's rules do not count", append(allowAll[:1:1], Rule{Action: "edit", Resource: "x", Effect: Deny}), Allow},
	} {
		if d := EvaluateAny("bash", Defaults, c.rules); d.Effect != c.want {
			t.Errorf("%s: %s, want %s", c.name, d.Effect, c.want)
		}
	}
	rules := append(allowAll[:1:1], Rule{Action: "bash", Resource: "rm *", Effect: Deny})
	if d := EvaluateRequest("bash", []string{"ls", "$X"}, false, Defaults, rules); d.Effect != Allow {
		t.Fatalf("known resources: %s", d.Effect)
	}
	if d := EvaluateRequest("bash", []string{"ls", "$X"}, true, Defaults, rules); d.Effect != Ask {
		t.Fatalf("an unknown resource with a deny rule about: %s", d.Effect)
	}
	if d := EvaluateRequest("bash", []string{"rm x", "$X"}, true, Defaults, rules); d.Effect != Deny || d.Rule.Resource != "rm *" {
		t.Fatalf("a denied resource beside an unknown one: %+v", d)
	}
	if d := EvaluateRequest("bash", []string{"$X"}, true, Defaults, allowAll); d.Effect != Allow {
		t.Fatalf("an unknown resource when everything is allowed: %s", d.Effect)
	}
}
