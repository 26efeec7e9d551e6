package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSessionsSurviveRestartAndReload: sessions and admitted prompts live
// in the app's store, so a config reload and a hard kill keep them.
func TestSessionsSurviveRestartAndReload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	ctx := testContext(t, 2*time.Minute)
	bin := caddyBinary(t)
	project := t.TempDir()
	s := newServer(t, bin, config{})
	caddyfile := func(heartbeat string) string {
		return fmt.Sprintf("{\n\tadmin %s\n\tagentgate {\n\t\tstorage badger %q\n\t}\n}\n\nhttp://%s {\n\tbind 127.0.0.1\n\tagent_instance {\n\t\tpassword pw-e2e\n\t\tdirectory %q\n\t\theartbeat %s\n\t}\n}\n",
			s.adminAddr, s.dir+"/data", s.httpAddr, project, heartbeat)
	}
	os.WriteFile(s.cfgPath, []byte(caddyfile("15s")), 0o600)
	base := "http://" + s.httpAddr
	auth := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("opencode:pw-e2e"))}}
	up := func() {
		s.start()
		waitFor(t, ctx, "instance answers", func() bool {
			st, _, err := call(ctx, httpClient, "GET", base+"/api/info", auth, nil)
			return err == nil && st == 200
		})
	}
	up()

	var created struct {
		Data struct {
			ID       string
			Location struct{ Directory string }
		}
	}
	st, b, _ := call(ctx, httpClient, "POST", base+"/api/session", auth, map[string]any{"title": "Keep me", "location": map[string]string{"directory": project}})
	if st != 200 || json.Unmarshal(b, &created) != nil || !strings.HasPrefix(created.Data.ID, "ses") || created.Data.Location.Directory != project {
		t.Fatalf("create: %d %s", st, b)
	}
	id := created.Data.ID
	st, b, _ = call(ctx, httpClient, "POST", base+"/api/session/"+id+"/prompt", auth, map[string]any{"id": "msg_e2ekeep0000000000000001", "text": "hello", "resume": false})
	if st != 200 || !strings.Contains(string(b), `"type":"user"`) {
		t.Fatalf("prompt: %d %s", st, b)
	}

	// A config reload keeps everything.
	st, b, _ = call(ctx, freshClient, "POST", "http://"+s.adminAddr+"/load", http.Header{"Content-Type": {"text/caddyfile"}}, caddyfile("20s"))
	if st != 200 {
		t.Fatalf("reload: %d %s", st, b)
	}
	check := func(when string) {
		t.Helper()
		var got struct{ Data struct{ ID, Title string } }
		st, b, err := call(ctx, httpClient, "GET", base+"/api/session/"+id, auth, nil)
		for try := 0; err != nil && try < 5 && ctx.Err() == nil; try++ {
			// A connection the replaced server accepted as it shut down is
			// reset; an idempotent GET is sent again, as a client would.
			time.Sleep(100 * time.Millisecond)
			st, b, err = call(ctx, httpClient, "GET", base+"/api/session/"+id, auth, nil)
		}
		if err != nil || st != 200 || json.Unmarshal(b, &got) != nil || got.Data.Title != "Keep me" {
			t.Fatalf("%s: get: %d %v %s", when, st, err, b)
		}
		var list struct{ Data []struct{ ID string } }
		st, b, _ = call(ctx, httpClient, "GET", base+"/api/session?limit=10", auth, nil)
		if st != 200 || json.Unmarshal(b, &list) != nil || len(list.Data) != 1 || list.Data[0].ID != id {
			t.Fatalf("%s: list: %d %s", when, st, b)
		}
		// The admitted prompt is still in the session's inbox: its id is taken.
		st, b, _ = call(ctx, httpClient, "POST", base+"/api/session/"+id+"/prompt", auth,
			map[string]any{"id": "msg_e2ekeep0000000000000001", "text": "hello again", "resume": false})
		if st != 409 || !strings.Contains(string(b), "ConflictError") {
			t.Fatalf("%s: re-admitting the same prompt id: %d %s", when, st, b)
		}
	}
	waitFor(t, ctx, "reloaded config serves", func() bool {
		st, _, err := call(ctx, freshClient, "GET", base+"/api/session/"+id, auth, nil)
		return err == nil && st == 200
	})
	// Connections kept alive to the replaced server are closed by it.
	httpClient.CloseIdleConnections()
	check("after a reload")

	// A hard kill and a restart keep everything too.
	s.kill()
	up()
	check("after a restart")
}
