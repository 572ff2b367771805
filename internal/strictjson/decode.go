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
	"math/big"
	"reflect"
	"strconv"
	"strings"
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
//
// An integer field accepts an integral number written with a fraction or
// an exponent (30.0, 1e3, 5.0e1: JSON Schema's integer admits them, and
// Python's json.dumps writes a float as 30.0) when its value fits int64:
// only after the decode fails on such a number are the body's integral
// literals rewritten to their integer form and the body decoded once
// more, so a body without one costs nothing more. 30.5 and integers
// beyond int64 stay refused (docs/operations.md, "Admin API").
func Decode(b []byte, v any) error {
	err, retry := decode(b, v)
	if retry {
		if b2, changed := integralForm(b); changed {
			// Decoding again into v is safe: the retry writes every key the
			// first attempt wrote, with the same values, and absent keys
			// were touched by neither.
			if err2, _ := decode(b2, v); err2 == nil {
				return nil
			}
		}
	}
	return err
}

// decode is Decode without the integral-number retry; retry reports a
// refusal of a JSON number for an integer field, which integralForm may
// cure.
func decode(b []byte, v any) (err error, retry bool) {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return &ShapeError{"body must be a JSON object"}, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	// Only white space may follow the value (dec.More is false before a
	// stray '}' or ']', so it cannot tell).
	if err == nil && len(bytes.TrimLeft(b[dec.InputOffset():], " \t\r\n")) > 0 {
		return &SyntaxError{"body holds more than one JSON value"}, false
	}
	if err == nil {
		// encoding/json accepted keys case-insensitively and let a repeated
		// key overwrite; the rules refuse both (keys.go). Run only now, on
		// JSON known to be well formed, so malformed JSON keeps its kind.
		if err := checkStrictKeys(b, reflect.TypeOf(v)); err != nil {
			return strictKeyRefusal(err), false
		}
		return nil, false
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &SyntaxError{"body is not valid JSON"}, false
	case errors.As(err, &te) && te.Field == "":
		return &ShapeError{"body must be a JSON object"}, false
	case errors.As(err, &te):
		return &ShapeError{fmt.Sprintf("field %q has the wrong type", te.Field)}, numberForInteger(te)
	}
	var pe *time.ParseError
	if errors.As(err, &pe) {
		return &ShapeError{"times must be RFC 3339"}, false
	}
	// encoding/json: `json: unknown field "x"`; only the client's own field name.
	msg := err.Error()
	if len(msg) > 6 && msg[:6] == "json: " {
		msg = msg[6:]
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	return &ShapeError{msg}, false
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

// numberForInteger reports te as a JSON number refused for an integer
// field (encoding/json's Value "number 30.0").
func numberForInteger(te *json.UnmarshalTypeError) bool {
	if te.Type == nil || !strings.HasPrefix(te.Value, "number") {
		return false
	}
	switch te.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// maxIntegralLiteral bounds the number literals integralForm reads
// (bytes): a longer one is left as written (and stays refused for an
// integer field), so a hostile literal costs no big arithmetic.
const maxIntegralLiteral = 64

// integralForm is b, well-formed JSON, with every number literal that has
// a fraction or an exponent and an integral value within int64 written as
// that integer (30.0 → 30, 1e3 → 1000, -2.50e1 → -25); changed is false
// when there is none. Strings are copied unread.
func integralForm(b []byte) (out []byte, changed bool) {
	out = make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			j++ // the closing quote
			if j > len(b) {
				j = len(b)
			}
			out = append(out, b[i:j]...)
			i = j
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(b) && strings.IndexByte("0123456789.eE+-", b[j]) >= 0 {
				j++
			}
			if n, ok := integralValue(b[i:j]); ok {
				out = strconv.AppendInt(out, n, 10)
				changed = true
			} else {
				out = append(out, b[i:j]...)
			}
			i = j
		default:
			out = append(out, c)
			i++
		}
	}
	return out, changed
}

// integralValue is the value of lit, a JSON number literal with a
// fraction or an exponent, when it is an integer within int64.
func integralValue(lit []byte) (int64, bool) {
	if len(lit) > maxIntegralLiteral || !bytes.ContainsAny(lit, ".eE") {
		return 0, false
	}
	if e := bytes.IndexAny(lit, "eE"); e >= 0 {
		// An exponent beyond int64's 19 digits, with at most 64 digits
		// of mantissa, cannot give an integer within int64 but zero.
		exp, err := strconv.Atoi(string(lit[e+1:]))
		if err != nil || exp > 64 || exp < -64 {
			return 0, false
		}
	}
	r, ok := new(big.Rat).SetString(string(lit))
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	return r.Num().Int64(), true
}
