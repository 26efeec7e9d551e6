package formats

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// ScanFields reads the body in place but what it keeps must survive the
// body's buffer being reused (pooled buffers are).
func TestScanFieldsOutlivesTheBuffer(t *testing.T) {
	body := []byte(` {"messages":[{"model":"no"}],"model":"gpt-4o","stream":true,"stream_options":{"include_usage":false},"max_tokens":77}`)
	fs := ScanFields(body, Chat)
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
		"model last":                     {`{"model":"team-fast","messages":[],"model":"other"}`, false, "model"},
		"model first and middle":         {`{"model":"other","model":"team-fast","messages":[]}`, false, "model"},
		"stream":                         {`{"stream":false,"model":"m","stream":true}`, false, "stream"},
		"unread key":                     {`{"model":"m","messages":[],"messages":[]}`, false, "messages"},
		"escaped model":                  {`{"model":"team-fast","mod\u0065l":"other"}`, false, "model"},
		"escaped first":                  {`{"\u006dodel":"other","model":"team-fast"}`, false, "model"},
		"escaped quote key":              {`{"a\"b":1,"a\u0022b":2}`, false, `a"b`},
		"case folded":                    {`{"model":"team-fast","Model":"other"}`, false, "Model"},
		"long s folds to s":              {`{"stream":false,"ſtream":true}`, false, "ſtream"},
		"kelvin sign folds to k":         {`{"max_tokens":1,"max_to\u212Aens":9}`, false, "max_to\u212Aens"},
		"stream_options":                 {`{"model":"m","stream_options":{"include_usage":false,"include_usage":true}}`, false, "stream_options.include_usage"},
		"google generation config":       {`{"contents":[],"generationConfig":{},"generation_config":{}}`, true, "generation_config"},
		"google max output aliases":      {`{"generationConfig":{"maxOutputTokens":5,"max_output_tokens":9000}}`, true, "generationConfig.max_output_tokens"},
		"google snake config":            {`{"generation_config":{"max_output_tokens":5,"maxOutputTokens":9000}}`, true, "generation_config.maxOutputTokens"},
		"google thinking budget":         {`{"generationConfig":{"thinkingConfig":{"thinkingBudget":1,"thinking_budget":99999}}}`, true, "generationConfig.thinkingConfig.thinking_budget"},
		"many keys, repeat after 40":     {many(40, `,"k3":2`), false, "k3"},
		"many keys, model after 40":      {many(40, `,"MODEL":"x"`), false, "MODEL"},
		"many keys, google alias":        {many(40, `,"generationConfig":{},"generation_config":{}`), true, "generation_config"},
		"google underscore before upper": {`{"a_B":1,"aB":2}`, true, "aB"},
		"exactly at the array's limit":   {many(31, `,"k30":2`), false, "k30"},
	}
	for name, c := range dup {
		if got := ScanFields([]byte(c.body), foldingIf(c.google)).duplicate; got != c.want {
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
		"underscore before a digit":      {`{"a_1":1,"a1":2}`, true},
	}
	for name, c := range ok {
		if got := ScanFields([]byte(c.body), foldingIf(c.google)).duplicate; got != "" {
			t.Errorf("%s: duplicate %q in a body without one", name, got)
		}
	}
}

// The check is part of the one pass over the body: an ordinary body costs
// no allocation beyond the copies of the members kept (model: its raw and
// string forms).
func TestScanFieldsAllocations(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"temperature":0.2,"top_p":1,"tools":[],"tool_choice":"auto","user":"u","n":1}`)
	if n := testing.AllocsPerRun(100, func() { ScanFields(body, Chat) }); n > 2 {
		t.Fatalf("%v allocations per scan", n)
	}
}

// A top-level key that is another spelling of one the gateway reads is
// refused even alone: the gateway would not see it, a provider whose
// decoder ignores case would.
func TestScanFieldsRefusesVariantsOfReadKeys(t *testing.T) {
	for _, c := range []struct {
		body        string
		google      bool
		variant, of string
	}{
		{`{"model":"m","Stream":true}`, false, "Stream", "stream"},
		{`{"MODEL":"x","messages":[]}`, false, "MODEL", "model"},
		{`{"model":"m","ſtream":true}`, false, "ſtream", "stream"},
		{`{"model":"m","Max_Tokens":99999}`, false, "Max_Tokens", "max_tokens"},
		{`{"model":"m","str\u0065am_Options":{}}`, false, "stream_Options", "stream_options"},
		{`{"GenerationConfig":{}}`, true, "GenerationConfig", "generationConfig"},
		{`{"Generation_Config":{}}`, true, "Generation_Config", "generationConfig"},
	} {
		fs := ScanFields([]byte(c.body), foldingIf(c.google))
		if fs.variant != c.variant || fs.variantOf != c.of || fs.Refusal() == nil {
			t.Errorf("%s: variant %q of %q, want %q of %q", c.body, fs.variant, fs.variantOf, c.variant, c.of)
		}
	}
	for _, body := range []string{
		`{"model":"m","messages":[],"metadata":{},"max_tokens":1,"system":"s","stop_sequences":[],"stream":true}`,
		`{"model":"m","input":"x","max_output_tokens":5,"max_tool_calls":1,"safety_identifier":"u","service_tier":"auto","store":false,"stream_options":{}}`,
		`{"maxOutputTokens":5,"Model2":1,"sTREAMING":true}`,
	} {
		if fs := ScanFields([]byte(body), Chat); fs.Refusal() != nil {
			t.Errorf("%s: refused: %s", body, fs.Refusal().Message)
		}
	}
	if fs := ScanFields([]byte(`{"contents":[],"generation_config":{},"systemInstruction":{},"safetySettings":[]}`), Google); fs.Refusal() != nil {
		t.Errorf("a Google body refused: %s", fs.Refusal().Message)
	}
}

// A Google body's output limit and thinking budget are read under either
// spelling of their names, as Google's parser reads them.
func TestGoogleOutputLimitEitherSpelling(t *testing.T) {
	for body, want := range map[string]int64{
		`{"generationConfig":{"maxOutputTokens":7}}`:    7,
		`{"generationConfig":{"max_output_tokens":7}}`:  7,
		`{"generation_config":{"maxOutputTokens":7}}`:   7,
		`{"generation_config":{"max_output_tokens":7}}`: 7,
		`{"contents":[]}`: 0,
	} {
		fs := ScanFields([]byte(body), Google)
		if got := fs.OutputLimit(); got != want {
			t.Errorf("%s: output limit %d, want %d", body, got, want)
		}
	}
	for _, body := range []string{
		`{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":1000}}}`,
		`{"generation_config":{"max_output_tokens":10,"thinking_config":{"thinking_budget":1000}}}`,
		`{"generationConfig":{"maxOutputTokens":10,"thinking_config":{"thinkingBudget":1000}}}`,
	} {
		fs := ScanFields([]byte(body), Google)
		if fs.OutputLimit() != 10 || fs.ExtraOutput() != 1000 {
			t.Errorf("%s: output limit %d and thinking budget %d, want 10 and 1000", body, fs.OutputLimit(), fs.ExtraOutput())
		}
	}
}

// foldingIf is a format that folds key spellings (Google) when fold is set,
// else Chat.
func foldingIf(fold bool) Format {
	if fold {
		return Google
	}
	return Chat
}
