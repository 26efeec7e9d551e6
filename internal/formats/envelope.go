package formats

import (
	"encoding/json"
	"time"
)

// ErrorBody is a gateway-made error in the format's own envelope, with the
// _tag and message that agentgate's other surfaces use, so that each
// provider SDK raises a typed error carrying the message. The zero Format
// answers in Chat's envelope.
func ErrorBody(f Format, status int, tag, message string, extra map[string]any) []byte {
	m := make(map[string]any, len(extra)+4)
	for k, v := range extra {
		m[k] = v
	}
	m["_tag"], m["message"] = tag, message
	f.w().errorBody(m, status, tag, message)
	b, _ := json.Marshal(m)
	return b
}

// ModelInfo is an enabled model of a connection, as listed to clients.
type ModelInfo struct {
	ID              string // the name clients send (the connection's alias, not the upstream id)
	Name            string // display name
	Created         time.Time
	MaxOutputTokens int64 // 0: unknown
}

// DisplayName is the model's name, or its id.
func (m ModelInfo) DisplayName() string {
	if m.Name != "" {
		return m.Name
	}
	return m.ID
}

// ModelObject is the answer to GET /models/<id> in f's shape; ownedBy is
// OpenAI's owned_by.
func ModelObject(f Format, m ModelInfo, ownedBy string) []byte {
	b, _ := json.Marshal(f.w().modelObject(m, ownedBy))
	return b
}

// ModelList is the answer to GET /models in f's list shape, in the order
// given, as one page.
func ModelList(f Format, models []ModelInfo, ownedBy string) []byte {
	w := f.w()
	objects := make([]any, len(models))
	for i, m := range models {
		objects[i] = w.modelObject(m, ownedBy)
	}
	b, _ := json.Marshal(w.modelList(objects, models))
	return b
}
