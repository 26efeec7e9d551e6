// Package jsonio reads strict JSON request bodies and writes {"data": …}
// answers.
package jsonio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/agentgate/agentgate/internal/apierr"
)

// DefaultLimit is the largest request body accepted by management APIs.
const DefaultLimit = 1 << 20

// Decode reads the request body into v: at most limit bytes (413 beyond),
// JSON content type (or none), no unknown fields, no trailing data, and
// clear 400 InvalidRequest errors for malformed JSON and wrong types.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return apierr.New(http.StatusUnsupportedMediaType, "UnsupportedMediaType", "request body must be application/json")
		}
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	if r.ContentLength > limit {
		return TooLarge(limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return TooLarge(limit)
		}
		return apierr.BadRequest("reading request body: %v", err)
	}
	return Unmarshal(body, v)
}

// TooLarge is the 413 error for a body over limit bytes.
func TooLarge(limit int64) *apierr.Error {
	return apierr.New(http.StatusRequestEntityTooLarge, "PayloadTooLarge", "request body is larger than %d bytes", limit)
}

// Unmarshal decodes one strict JSON value from body into v.
func Unmarshal(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return apierr.BadRequest("request body is empty: a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apierr.BadRequest("%s", describe(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return apierr.BadRequest("unexpected data after the JSON value")
	}
	return nil
}

func describe(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, not %s", te.Field, typeName(te.Type.Kind().String()), te.Value)
		}
		return fmt.Sprintf("the body must be %s, not %s", typeName(te.Type.Kind().String()), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end of input"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return "invalid JSON: " + err.Error()
}

func typeName(kind string) string {
	switch kind {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	}
	return "a " + kind
}

// Write sends v as {"data": v} with status.
func Write(w http.ResponseWriter, status int, v any) {
	WriteRaw(w, status, map[string]any{"data": v})
}

// WriteRaw sends v as the JSON body with status.
func WriteRaw(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		apierr.Write(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
