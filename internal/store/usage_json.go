package store

import (
	"encoding/json"
	"strconv"
)

// AppendJSON appends u encoded exactly as encoding/json encodes it. Every
// gateway request writes one usage record, and reflection made the encoding
// a noticeable share of a request's CPU; a test compares the two encodings.
func (u *UsageRecord) AppendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"id":`...)
	b = appendJSONString(b, u.ID)
	b = append(b, `,"time":"`...)
	if b, err = u.Time.AppendText(b); err != nil {
		return nil, err
	}
	b = append(b, `","workspace":`...)
	b = appendJSONString(b, u.Workspace)
	b = append(b, `,"member_id":`...)
	b = appendJSONString(b, u.MemberID)
	b = append(b, `,"member_kind":`...)
	b = appendJSONString(b, u.MemberKind)
	b = appendOptString(b, `,"key_id":`, u.KeyID)
	b = appendOptString(b, `,"token_family":`, u.FamilyID)
	b = append(b, `,"connection":`...)
	b = appendJSONString(b, u.Connection)
	b = append(b, `,"format":`...)
	b = appendJSONString(b, u.Format)
	b = appendOptString(b, `,"operation":`, u.Operation)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, u.Model)
	b = append(b, `,"upstream_model":`...)
	b = appendJSONString(b, u.UpstreamModel)
	b = append(b, `,"tokens":{"input":`...)
	b = strconv.AppendInt(b, u.Tokens.Input, 10)
	b = append(b, `,"cache_read":`...)
	b = strconv.AppendInt(b, u.Tokens.CacheRead, 10)
	b = append(b, `,"cache_write":`...)
	b = strconv.AppendInt(b, u.Tokens.CacheWrite, 10)
	b = append(b, `,"output":`...)
	b = strconv.AppendInt(b, u.Tokens.Output, 10)
	b = append(b, `,"reasoning":`...)
	b = strconv.AppendInt(b, u.Tokens.Reasoning, 10)
	b = append(b, `},"cost_usd":`...)
	b = u.Cost.Append(b)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(u.Status), 10)
	b = append(b, `,"streamed":`...)
	b = strconv.AppendBool(b, u.Streamed)
	b = append(b, `,"client_disconnected":`...)
	b = strconv.AppendBool(b, u.ClientDisconnected)
	b = append(b, `,"estimated":`...)
	b = strconv.AppendBool(b, u.Estimated)
	b = appendOptString(b, `,"request_id":`, u.RequestID)
	b = appendOptString(b, `,"session":`, u.Session)
	if len(u.Attempts) > 0 {
		b = append(b, `,"attempts":[`...)
		for i, a := range u.Attempts {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"connection":`...)
			b = appendJSONString(b, a.Connection)
			if a.Status != 0 {
				b = append(b, `,"status":`...)
				b = strconv.AppendInt(b, int64(a.Status), 10)
			}
			b = append(b, `,"error":`...)
			b = appendJSONString(b, a.Error)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

func appendOptString(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, name...), s)
}

// appendJSONString appends s as a JSON string the way encoding/json writes
// it. Ids, model names and formats are plain printable ASCII and are copied
// as they are; anything else goes through encoding/json (which escapes
// HTML characters, control characters and invalid UTF-8).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
