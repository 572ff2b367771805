// Package strictjson decodes request bodies by the rules every chalupa
// endpoint shares (docs/operations.md, "Signed ingest" and "Admin API"):
// exactly one JSON value, no unknown fields, no key that matches a field
// only case-insensitively, no key repeated within an object, no trailing
// data. Signed ingest and the admin API both decode through Decode, so the
// two surfaces cannot disagree about what a body says.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"time"
)

// SyntaxError is a body that is not one well-formed JSON value (malformed,
// empty, or followed by more data). Its message is safe to return.
type SyntaxError struct{ msg string }

// Error is the message.
func (e *SyntaxError) Error() string { return e.msg }

// ShapeError is well-formed JSON of the wrong shape: an unknown,
// case-variant or repeated key, a value of the wrong type, or a bad time.
// Its message names at most a field, never a value.
type ShapeError struct{ msg string }

// Error is the message.
func (e *ShapeError) Error() string { return e.msg }

// maxMessage bounds a message built from encoding/json's own (bytes).
const maxMessage = 200

// Decode decodes b, one JSON object, strictly into v (a pointer to a
// struct). A bare null is refused like any other non-object (encoding/json
// would take it as "no change" and hand the handler a zero request). Errors:
// *SyntaxError or *ShapeError, with messages safe to send to the client.
func Decode(b []byte, v any) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return &ShapeError{"body must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	// Only white space may follow the value (dec.More is false before a
	// stray '}' or ']', so it cannot tell).
	if err == nil && len(bytes.TrimLeft(b[dec.InputOffset():], " \t\r\n")) > 0 {
		return &SyntaxError{"body holds more than one JSON value"}
	}
	if err == nil {
		// encoding/json accepted keys case-insensitively and let a repeated
		// key overwrite; the rules refuse both (keys.go). Run only now, on
		// JSON known to be well formed, so malformed JSON keeps its kind.
		if err := checkStrictKeys(b, reflect.TypeOf(v)); err != nil {
			return strictKeyRefusal(err)
		}
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &SyntaxError{"body is not valid JSON"}
	case errors.As(err, &te) && te.Field == "":
		return &ShapeError{"body must be a JSON object"}
	case errors.As(err, &te):
		return &ShapeError{fmt.Sprintf("field %q has the wrong type", te.Field)}
	}
	var pe *time.ParseError
	if errors.As(err, &pe) {
		return &ShapeError{"times must be RFC 3339"}
	}
	// encoding/json: `json: unknown field "x"`; only the client's own field name.
	msg := err.Error()
	if len(msg) > 6 && msg[:6] == "json: " {
		msg = msg[6:]
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	return &ShapeError{msg}
}

// strictKeyRefusal classifies checkStrictKeys's error (kept out of Decode so
// that the success path allocates nothing for errors.As).
func strictKeyRefusal(err error) error {
	var ke *strictKeyError
	if errors.As(err, &ke) {
		return &ShapeError{ke.Error()}
	}
	return &SyntaxError{"body is not valid JSON"}
}
