package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzCheckStrictKeys compares checkStrictKeys (the one-pass scanner) with
// tokenWalker (a walk over json.Decoder.Token) on every body encoding/json
// decodes into strictOuter: both accept, or both refuse the same key for
// the same reason.
func FuzzCheckStrictKeys(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `{"inner":"a","Inner":"b"}`, `{"items":[{"name":"x","name":"y"}]}`,
		`{"free":{"a":1,"b":{"a":[1,{"c":2,"c":3}]}}}`, `{"byName":{"\u0061":{"name":"x"},"a":{}}}`,
		`{"raw":{"a":1,"a":2},"when":"2026-01-01T00:00:00Z","any":"\"}"}`,
		`{"free":{"a\xff":1,"a\xfe":2}}`, "{\"free\":{\"a\xff\":1,\"a\xfe\":2}}",
		`{"tree":{"label":"r","kids":[{"label":"a","kids":[{"Label":"b"}]}]}}`,
		` { "outer" : "x" , "Untagged" : 1 , "-" : 2 } `,
	} {
		f.Add([]byte(s))
	}
	typ := reflect.TypeFor[*strictOuter]()
	f.Fuzz(func(t *testing.T, body []byte) {
		var v strictOuter
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return // the precondition of both
		}
		got := checkStrictKeys(body, typ)
		w := tokenWalker{dec: json.NewDecoder(bytes.NewReader(body))}
		want := w.value(shapeOf(typ))
		var gk, wk *strictKeyError
		switch {
		case got == nil && want == nil:
		case errors.As(got, &gk) && errors.As(want, &wk):
			if gk.Key != wk.Key || gk.Duplicate != wk.Duplicate {
				t.Fatalf("%q: scanner refused %q (duplicate %v), token walk %q (duplicate %v)", body, gk.Key, gk.Duplicate, wk.Key, wk.Duplicate)
			}
		default:
			t.Fatalf("%q: scanner %v, token walk %v", body, got, want)
		}
	})
}

// skipValue consumes one JSON value through Decoder.Decode without building
// anything (cheaper than Token, which also allocates the string or number).
type skipValue struct{}

func (*skipValue) UnmarshalJSON([]byte) error { return nil }

// tokenWalker is the first implementation of checkStrictKeys (before
// scan.go), kept as the oracle FuzzCheckStrictKeys compares the scanner with:
// it walks json.Decoder.Token, slowly but obviously.
type tokenWalker struct {
	dec  *json.Decoder
	skip skipValue
}

// value walks one JSON value of shape s.
func (w *tokenWalker) value(s *shape) error {
	switch s.kind {
	case shapeLeaf:
		return w.dec.Decode(&w.skip)
	case shapeAny:
		return w.anyValue()
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	if tok == nil { // null
		return nil
	}
	d, ok := tok.(json.Delim)
	switch {
	case !ok:
		return errStrictShape
	case s.kind == shapeList && d == '[':
		for w.dec.More() {
			if err := w.value(s.elem); err != nil {
				return err
			}
		}
		_, err = w.dec.Token() // ']'
		return err
	case s.kind == shapeStruct && d == '{':
		return w.structObject(s)
	case s.kind == shapeMap && d == '{':
		return w.keyedObject(s.elem)
	}
	return errStrictShape
}

// structObject walks the members of an object (its '{' already read) whose
// keys must be s's field names, each at most once.
func (w *tokenWalker) structObject(s *shape) error {
	var small [1]uint64 // seen fields, by index; enough for 64 fields
	seen := small[:]
	if n := len(s.fields); n > 64 {
		seen = make([]uint64, (n+63)/64)
	}
	for w.dec.More() {
		key, err := w.key()
		if err != nil {
			return err
		}
		i, ok := s.names[key]
		if !ok {
			return &strictKeyError{Key: key}
		}
		if seen[i/64]&(1<<(i%64)) != 0 {
			return &strictKeyError{Key: key, Duplicate: true}
		}
		seen[i/64] |= 1 << (i % 64)
		if err := w.value(s.fields[i]); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // '}'
	return err
}

// keyedObject walks the members of an object (its '{' already read) that
// may have any keys, each at most once, and values of shape elem.
func (w *tokenWalker) keyedObject(elem *shape) error {
	var small [8]string
	seen := small[:0]
	var many map[string]struct{} // once seen outgrows small
	for w.dec.More() {
		key, err := w.key()
		if err != nil {
			return err
		}
		if many != nil {
			if _, dup := many[key]; dup {
				return &strictKeyError{Key: key, Duplicate: true}
			}
			many[key] = struct{}{}
		} else {
			for _, k := range seen {
				if k == key {
					return &strictKeyError{Key: key, Duplicate: true}
				}
			}
			if len(seen) < len(small) {
				seen = append(seen, key)
			} else {
				many = make(map[string]struct{}, 2*len(small))
				for _, k := range seen {
					many[k] = struct{}{}
				}
				many[key] = struct{}{}
			}
		}
		if err := w.value(elem); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // '}'
	return err
}

// anyValue walks one JSON value of any shape (an interface field).
func (w *tokenWalker) anyValue() error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return w.keyedObject(anyShape)
	case json.Delim('['):
		for w.dec.More() {
			if err := w.anyValue(); err != nil {
				return err
			}
		}
		_, err = w.dec.Token() // ']'
		return err
	}
	return nil
}

// key reads an object key.
func (w *tokenWalker) key() (string, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return "", err
	}
	k, ok := tok.(string)
	if !ok {
		return "", errStrictShape
	}
	return k, nil
}
