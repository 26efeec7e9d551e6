package otlp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/service"
)

// signal is one of OTLP's three.
type signal int

const (
	metrics signal = iota + 1
	logs
	traces
)

func (s signal) String() string {
	switch s {
	case metrics:
		return "metrics"
	case logs:
		return "logs"
	}
	return "traces"
}

func (s signal) path() string { return "/v1/" + s.String() }

// listKey is the request's list of resources in OTLP JSON (lowerCamelCase,
// as the OTLP specification writes it) and under its protobuf field name,
// which protobuf's JSON readers accept too.
func (s signal) listKey() (camel, snake string) {
	switch s {
	case metrics:
		return "resourceMetrics", "resource_metrics"
	case logs:
		return "resourceLogs", "resource_logs"
	}
	return "resourceSpans", "resource_spans"
}

// AttributePrefix starts the names of the resource attributes the relay
// sets. Every resource attribute a client sends under it is removed: only
// the relay's are trusted.
const AttributePrefix = "agentgate."

// The resource attributes the relay sets.
const (
	AttrWorkspace     = "agentgate.workspace.id"
	AttrWorkspaceName = "agentgate.workspace.name"
	AttrMember        = "agentgate.member.id"
	AttrEmail         = "agentgate.member.email"
	AttrRole          = "agentgate.member.role"
	AttrSignIn        = "agentgate.sign_in.id"
)

type attribute struct{ key, value string }

func identityAttributes(id *service.TelemetryIdentity) []attribute {
	return []attribute{
		{AttrWorkspace, id.Workspace}, {AttrWorkspaceName, id.WorkspaceName}, {AttrMember, id.Member},
		{AttrEmail, id.Email}, {AttrRole, id.Role}, {AttrSignIn, id.SignIn},
	}
}

// stampProtobuf decodes a protobuf export, replaces every resource's
// agentgate.* attributes with attrs, and encodes it again.
func stampProtobuf(sig signal, body []byte, attrs []attribute) ([]byte, error) {
	var msg proto.Message
	var resources []**resourcepb.Resource
	switch sig {
	case metrics:
		m := &colmetrics.ExportMetricsServiceRequest{}
		if err := proto.Unmarshal(body, m); err != nil {
			return nil, err
		}
		for _, r := range m.ResourceMetrics {
			resources = append(resources, &r.Resource)
		}
		msg = m
	case logs:
		m := &collogs.ExportLogsServiceRequest{}
		if err := proto.Unmarshal(body, m); err != nil {
			return nil, err
		}
		for _, r := range m.ResourceLogs {
			resources = append(resources, &r.Resource)
		}
		msg = m
	default:
		m := &coltrace.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, m); err != nil {
			return nil, err
		}
		for _, r := range m.ResourceSpans {
			resources = append(resources, &r.Resource)
		}
		msg = m
	}
	for _, res := range resources {
		if *res == nil {
			*res = &resourcepb.Resource{}
		}
		kept := (*res).Attributes[:0]
		for _, kv := range (*res).Attributes {
			if kv != nil && !strings.HasPrefix(kv.Key, AttributePrefix) {
				kept = append(kept, kv)
			}
		}
		for _, a := range attrs {
			kept = append(kept, &commonpb.KeyValue{Key: a.key, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: a.value}}})
		}
		(*res).Attributes = kept
	}
	return proto.Marshal(msg)
}

// stampJSON does the same to an OTLP JSON export, touching only the
// objects on the way to the resources' attributes: everything else keeps
// its bytes (numbers beyond a double's precision included). The objects
// it reads may not repeat a key (readers disagree on which copy wins), the
// request may not name its list twice (camelCase and snake_case), and
// only that list is kept of the request's top level.
func stampJSON(sig signal, body []byte, attrs []attribute) ([]byte, error) {
	top, err := fields(body)
	if err != nil {
		return nil, err
	}
	camel, snake := sig.listKey()
	var list json.RawMessage
	for _, f := range top {
		if f.key == camel || f.key == snake {
			if list != nil {
				return nil, fmt.Errorf("%s is given twice", camel)
			}
			list = f.value
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"` + camel + `":[`)
	if list != nil && string(list) != "null" {
		var entries []json.RawMessage
		if err := json.Unmarshal(list, &entries); err != nil {
			return nil, fmt.Errorf("%s must be an array", camel)
		}
		for i, e := range entries {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := stampEntry(&b, e, attrs); err != nil {
				return nil, fmt.Errorf("%s[%d]: %v", camel, i, err)
			}
		}
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

// stampEntry writes one ResourceMetrics (ResourceLogs, ResourceSpans) with
// its resource's attributes stamped.
func stampEntry(b *bytes.Buffer, entry json.RawMessage, attrs []attribute) error {
	fs, err := fields(entry)
	if err != nil {
		return err
	}
	var resource json.RawMessage
	for _, f := range fs {
		if f.key == "resource" {
			resource = f.value
		}
	}
	stamped, err := stampResource(resource, attrs)
	if err != nil {
		return fmt.Errorf("resource: %v", err)
	}
	b.WriteByte('{')
	writeField(b, "resource", stamped)
	for _, f := range fs {
		if f.key != "resource" {
			b.WriteByte(',')
			writeField(b, f.key, f.value)
		}
	}
	b.WriteByte('}')
	return nil
}

func stampResource(resource json.RawMessage, attrs []attribute) (json.RawMessage, error) {
	var fs []field
	if resource != nil && string(resource) != "null" {
		var err error
		if fs, err = fields(resource); err != nil {
			return nil, err
		}
	}
	var list []json.RawMessage
	for _, f := range fs {
		if f.key == "attributes" && string(f.value) != "null" {
			if err := json.Unmarshal(f.value, &list); err != nil {
				return nil, errors.New("attributes must be an array")
			}
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"attributes":[`)
	n := 0
	for i, a := range list {
		kv, err := fields(a)
		if err != nil {
			return nil, fmt.Errorf("attributes[%d]: %v", i, err)
		}
		var key string
		for _, f := range kv {
			if f.key == "key" {
				if err := json.Unmarshal(f.value, &key); err != nil {
					return nil, fmt.Errorf("attributes[%d]: key must be a string", i)
				}
			}
		}
		if strings.HasPrefix(key, AttributePrefix) {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		writeObject(&b, kv)
	}
	for _, a := range attrs {
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		k, _ := json.Marshal(a.key)
		v, _ := json.Marshal(a.value)
		b.WriteString(`{"key":` + string(k) + `,"value":{"stringValue":` + string(v) + `}}`)
	}
	b.WriteByte(']')
	for _, f := range fs {
		if f.key != "attributes" {
			b.WriteByte(',')
			writeField(&b, f.key, f.value)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// field is one member of a JSON object, its value's bytes as sent.
type field struct {
	key   string
	value json.RawMessage
}

// fields reads a JSON object's members in order; a repeated key, or
// anything but one object, is an error.
func fields(raw []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("an object is expected")
	}
	var out []field
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, jsonError(err)
		}
		k := kt.(string)
		if seen[k] {
			return nil, fmt.Errorf("the key %q appears twice in one object", k)
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, jsonError(err)
		}
		out = append(out, field{k, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	return out, nil
}

func jsonError(err error) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("malformed JSON: unexpected end of input")
	}
	return fmt.Errorf("malformed JSON: %v", err)
}

func writeField(b *bytes.Buffer, key string, value json.RawMessage) {
	k, _ := json.Marshal(key)
	b.Write(k)
	b.WriteByte(':')
	b.Write(value)
}

func writeObject(b *bytes.Buffer, fs []field) {
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		writeField(b, f.key, f.value)
	}
	b.WriteByte('}')
}

// grpcCodes are the google.rpc.Code an OTLP error status carries for an
// HTTP status.
var grpcCodes = map[int]int{
	http.StatusBadRequest: 3, http.StatusUnauthorized: 16, http.StatusForbidden: 7, http.StatusNotFound: 5,
	http.StatusMethodNotAllowed: 12, http.StatusRequestEntityTooLarge: 8, http.StatusUnsupportedMediaType: 3,
	http.StatusTooManyRequests: 8, http.StatusServiceUnavailable: 14,
}

// writeError answers an OTLP error: a google.rpc.Status in the request's
// encoding (protobuf, or JSON with agentgate's _tag and message too).
func writeError(w http.ResponseWriter, asJSON bool, err error) {
	e := apierr.As(err)
	code, ok := grpcCodes[e.Status]
	if !ok {
		code = 13 // internal
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	if e.Status == http.StatusUnauthorized {
		hd.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	if e.Status == http.StatusServiceUnavailable {
		hd.Set("Retry-After", "1")
	}
	if asJSON || e.Status == http.StatusUnsupportedMediaType {
		hd.Set("Content-Type", typeJSON)
		w.WriteHeader(e.Status)
		b, _ := json.Marshal(map[string]any{"code": code, "message": e.Message, "_tag": e.Tag})
		w.Write(append(b, '\n'))
		return
	}
	// google.rpc.Status: code (1, varint) and message (2, string).
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(code))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, e.Message)
	hd.Set("Content-Type", typeProtobuf)
	w.WriteHeader(e.Status)
	w.Write(b)
}
