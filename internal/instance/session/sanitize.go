package session

import "encoding/json"

// Redaction of exports (sanitize=true): every non-empty free-text string
// becomes "[redacted:<kind>:<id>]", opaque blobs become {"redacted":
// "<kind>:<id>"}, file attachments lose their bytes; ids, times, numbers,
// enums and structure stay.

// keptStrings are keys whose string values are identifiers or enums.
var keptStrings = map[string]bool{"id": true, "type": true, "status": true, "sessionID": true, "messageID": true,
	"shellID": true, "providerID": true, "agent": true, "previous": true, "finish": true, "rawFinish": true,
	"reason": true, "outcome": true, "effect": true, "action": true, "mime": true, "variant": true,
	"delivery": true, "skill": true, "projectID": true}

// blobKeys are opaque objects replaced whole.
var blobKeys = map[string]bool{"metadata": true, "native": true, "providerContext": true, "providerResultState": true}

func redactedText(kind, id string) string { return "[redacted:" + kind + ":" + id + "]" }

func redact(v any, key, id string) any {
	switch x := v.(type) {
	case string:
		switch {
		case x == "" || keptStrings[key]:
			return x
		case key == "directory":
			return "/" + redactedText(key, id)
		}
		return redactedText(key, id)
	case []any:
		for i := range x {
			x[i] = redact(x[i], key, id)
		}
		return x
	case map[string]any:
		if blobKeys[key] || key == "input" {
			if len(x) == 0 {
				return x
			}
			return map[string]any{"redacted": key + ":" + id}
		}
		_, hasData := x["data"]
		_, hasMime := x["mime"]
		isFile := hasData && hasMime
		isTool := x["type"] == "tool"
		for k, e := range x {
			switch {
			case isFile && k == "data":
				x[k] = ""
			case isFile && k == "source":
				x[k] = map[string]any{"type": "inline"}
			case k == "name" && (isTool || key == "agents" || key == "model"):
				// tool and agent names are identifiers
			default:
				x[k] = redact(e, k, id)
			}
		}
		return x
	}
	return v
}

func sanitizeInfo(info *Info) any {
	raw, _ := json.Marshal(info)
	var m map[string]any
	json.Unmarshal(raw, &m)
	id := info.ID
	if info.Title != "" {
		m["title"] = redactedText("session-title", id)
	}
	m["location"] = map[string]any{"directory": "/" + redactedText("session-directory", id)}
	if info.Subpath != "" {
		m["subpath"] = redactedText("session-subpath", id)
	}
	if len(info.Metadata) > 0 {
		m["metadata"] = map[string]any{"redacted": "session-metadata:" + id}
	}
	if rv, ok := m["revert"]; ok {
		m["revert"] = redact(rv, "revert", id)
	}
	return m
}
