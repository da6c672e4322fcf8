package protocol

import (
	"encoding/json"
	"strconv"
)

// AppendJSONString appends s as a JSON string, exactly as json.Marshal
// writes it: plain ASCII between quotes as it is, anything json.Marshal
// escapes (control characters, quotes, backslashes, <, > and &, and
// anything not ASCII) through json.Marshal, so the two agree on every
// escape.
func AppendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// AppendJSON appends r as json.Marshal(r) writes it, without reflection:
// the result of a fan-out carries an ack per subscriber, thousands of
// them, and the bus encodes one per message.
func (r *SendMessageResult) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"success":`...)
	dst = strconv.AppendBool(dst, r.Success)
	dst = append(dst, `,"messageId":`...)
	dst = AppendJSONString(dst, r.MessageID)
	dst = append(dst, `,"acks":`...)
	if r.Acks == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range r.Acks {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = r.Acks[i].appendJSON(dst)
		}
		dst = append(dst, ']')
	}
	dst = appendOmitEmpty(dst, `,"reason":`, r.Reason)
	if r.Held {
		dst = append(dst, `,"held":true`...)
	}
	dst = appendOmitEmpty(dst, `,"next_attempt":`, r.NextAttempt)
	return append(dst, '}')
}

// appendJSON appends a as json.Marshal(a) writes it.
func (a *Ack) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"client_id":`...)
	dst = AppendJSONString(dst, a.ClientID)
	dst = append(dst, `,"subscription":`...)
	dst = AppendJSONString(dst, a.Subscription)
	dst = append(dst, `,"processed":`...)
	dst = strconv.AppendBool(dst, a.Processed)
	dst = appendOmitEmpty(dst, `,"message":`, a.Message)
	dst = append(dst, `,"stopPropagation":`...)
	dst = strconv.AppendBool(dst, a.StopPropagation)
	dst = appendOmitEmpty(dst, `,"error":`, a.Error)
	if a.Retrying {
		dst = append(dst, `,"retrying":true`...)
	}
	if a.Attempt != 0 {
		dst = append(dst, `,"attempt":`...)
		dst = strconv.AppendInt(dst, int64(a.Attempt), 10)
	}
	dst = appendOmitEmpty(dst, `,"next_attempt":`, a.NextAttempt)
	if a.Held {
		dst = append(dst, `,"held":true`...)
	}
	dst = appendOmitEmpty(dst, `,"dead_letter":`, a.DeadLetter)
	return append(dst, '}')
}

// appendOmitEmpty appends the member name and s, unless s is empty: a
// string field tagged omitempty.
func appendOmitEmpty(dst []byte, name, s string) []byte {
	if s == "" {
		return dst
	}
	return AppendJSONString(append(dst, name...), s)
}
