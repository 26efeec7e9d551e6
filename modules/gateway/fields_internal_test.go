package gateway

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// scanFields reads the body in place but what it keeps must survive the
// body's buffer being reused (pooled buffers are).
func TestScanFieldsOutlivesTheBuffer(t *testing.T) {
	body := []byte(` {"messages":[{"model":"no"}],"model":"gpt-4o","stream":true,"stream_options":{"include_usage":false},"max_tokens":77}`)
	if !isObject(body) || isObject([]byte(" [1]")) {
		t.Fatal("isObject")
	}
	fs := scanFields(body, false)
	copy(body, bytes.Repeat([]byte("x"), len(body)))
	if fs.duplicate != "" || fs.model.String() != "gpt-4o" || !fs.stream.Bool() || fs.maxTokens.Int() != 77 ||
		!fs.streamOptions.Get("include_usage").Exists() || fs.streamOptions.Get("include_usage").Bool() {
		t.Fatalf("fields after the buffer was overwritten: %+v", fs)
	}
}

func TestScanFieldsRefusesRepeatedKeys(t *testing.T) {
	many := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString(`{"model":"m"`)
		for i := 0; i < n; i++ {
			b.WriteString(`,"k` + strconv.Itoa(i) + `":1`)
		}
		return b.String() + extra + "}"
	}
	dup := map[string]struct {
		body   string
		google bool
		want   string
	}{
		"model last":                   {`{"model":"team-fast","messages":[],"model":"other"}`, false, "model"},
		"model first and middle":       {`{"model":"other","model":"team-fast","messages":[]}`, false, "model"},
		"stream":                       {`{"stream":false,"model":"m","stream":true}`, false, "stream"},
		"unread key":                   {`{"model":"m","messages":[],"messages":[]}`, false, "messages"},
		"escaped model":                {`{"model":"team-fast","mod\u0065l":"other"}`, false, "model"},
		"escaped first":                {`{"\u006dodel":"other","model":"team-fast"}`, false, "model"},
		"escaped quote key":            {`{"a\"b":1,"a\u0022b":2}`, false, `a"b`},
		"case folded":                  {`{"model":"team-fast","Model":"other"}`, false, "Model"},
		"long s folds to s":            {`{"stream":false,"ſtream":true}`, false, "ſtream"},
		"kelvin sign folds to k":       {`{"max_tokens":1,"max_to\u212Aens":9}`, false, "max_to\u212Aens"},
		"stream_options":               {`{"model":"m","stream_options":{"include_usage":false,"include_usage":true}}`, false, "stream_options.include_usage"},
		"google generation config":     {`{"contents":[],"generationConfig":{},"generation_config":{}}`, true, "generation_config"},
		"google max output aliases":    {`{"generationConfig":{"maxOutputTokens":5,"max_output_tokens":9000}}`, true, "generationConfig.max_output_tokens"},
		"google snake config":          {`{"generation_config":{"max_output_tokens":5,"maxOutputTokens":9000}}`, true, "generation_config.maxOutputTokens"},
		"google thinking budget":       {`{"generationConfig":{"thinkingConfig":{"thinkingBudget":1,"thinking_budget":99999}}}`, true, "generationConfig.thinkingConfig.thinking_budget"},
		"many keys, repeat after 40":   {many(40, `,"k3":2`), false, "k3"},
		"many keys, model after 40":    {many(40, `,"MODEL":"x"`), false, "MODEL"},
		"many keys, google alias":      {many(40, `,"generationConfig":{},"generation_config":{}`), true, "generation_config"},
		"exactly at the array's limit": {many(31, `,"k30":2`), false, "k30"},
	}
	for name, c := range dup {
		if got := scanFields([]byte(c.body), c.google).duplicate; got != c.want {
			t.Errorf("%s: duplicate %q, want %q", name, got, c.want)
		}
	}
	ok := map[string]struct {
		body   string
		google bool
	}{
		"nested repeats are not read":    {`{"model":"m","messages":[{"role":"user","role":"x"}]}`, false},
		"same key in sibling objects":    {`{"a":{"k":1},"b":{"k":1},"model":"m"}`, false},
		"snake and camel outside google": {`{"generationConfig":{},"generation_config":{}}`, false},
		"many distinct keys":             {many(100, ""), false},
		"many distinct google keys":      {many(100, `,"generationConfig":{"maxOutputTokens":1}`), true},
		"underscore before upper":        {`{"a_B":1,"aB":2}`, true},
	}
	for name, c := range ok {
		if got := scanFields([]byte(c.body), c.google).duplicate; got != "" {
			t.Errorf("%s: duplicate %q in a body without one", name, got)
		}
	}
}

// The check is part of the one pass over the body: an ordinary body costs
// no allocation beyond the copies of the members kept (model: its raw and
// string forms).
func TestScanFieldsAllocations(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"temperature":0.2,"top_p":1,"tools":[],"tool_choice":"auto","user":"u","n":1}`)
	if n := testing.AllocsPerRun(100, func() { scanFields(body, false) }); n > 2 {
		t.Fatalf("%v allocations per scan", n)
	}
}
