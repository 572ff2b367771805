package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Why this file exists: encoding/json (v1) matches an object key to a struct
// field case-insensitively (with Unicode folding: "ENVIRONMENTSLUG",
// "environmentslug" and even "ſize" land on the same field) and lets a
// duplicate key silently overwrite the earlier value (last one wins).
// DisallowUnknownFields refuses neither, so a body the protocol calls
// invalid ("unknown fields are refused") would be accepted, and two parsers
// (ours and, say, a proxy's or an auditor's) could read different values out
// of the same signed bytes. encoding/json/v2 rejects both by default, but it
// needs a GOEXPERIMENT this project does not use; checkStrictKeys closes the
// gap on top of v1.

// maxReportedKey bounds the client-supplied key quoted in a refusal message
// (bytes, cut back to a rune boundary).
const maxReportedKey = 64

// strictKeyError is a violation found by checkStrictKeys. It carries only the
// offending key (as decoded, so escapes are resolved), never a value.
type strictKeyError struct {
	Key       string
	Duplicate bool // true: the key repeats within one object; false: not an exact field name
}

func (e *strictKeyError) Error() string {
	if e.Duplicate {
		return fmt.Sprintf("field %q appears more than once", truncateKey(e.Key))
	}
	return fmt.Sprintf("field %q is not a field of the body (field names are case-sensitive)", truncateKey(e.Key))
}

// truncateKey cuts k to at most maxReportedKey bytes without splitting a rune.
func truncateKey(k string) string {
	if len(k) <= maxReportedKey {
		return k
	}
	i := maxReportedKey
	for i > 0 && !utf8.RuneStart(k[i]) {
		i--
	}
	return k[:i]
}

// checkStrictKeys walks the first JSON value of b (with json.Decoder.Token)
// against the shape of t, the type the value was decoded into, and returns a
// *strictKeyError for the first object key that
//   - is not exactly (byte for byte, after JSON unescaping) the JSON name of
//     a field of the struct the object decodes into, or
//   - repeats a key already seen in the same object.
//
// Shapes: pointers are followed; a struct (other than a leaf, below) is an
// object whose keys are its fields' JSON names (the tag name, or the Go name
// without one; "-" fields are absent; untagged embedded structs contribute
// their fields, as encoding/json promotes them); slices and arrays apply
// their element's shape to every element; a map's object may hold any key
// (its values take the element's shape); an interface value may hold any
// JSON, whose objects are still checked for duplicate keys. Every other type,
// and any type implementing json.Unmarshaler or encoding.TextUnmarshaler
// (time.Time), is a leaf: its value is skipped unread.
//
// Call it only after b has decoded into a value of type t without error (as
// decodeBody does): it relies on that for well-formedness and for the kinds
// of the values matching t (a null is accepted anywhere), and it reads only
// the first JSON value of b. Any other error it returns (a syntax error)
// would mean that precondition was broken.
//
// Cost: the shape of t is computed once and cached, and leaf values are
// skipped through Decode into a no-op Unmarshaler rather than turned into
// Tokens, but encoding/json's Decoder still allocates a few objects for every
// key and scalar it reads mid-stream (its scanner builds, then discards, an
// "after top-level value" error at each delimiter that follows a scalar).
// BenchmarkDecodeHeartbeat measures it: for a full heartbeat, about 150
// small allocations (the decode itself: about 17) and two to three times the
// decode's time, some microseconds, outside the single writer. The walk
// stops at the first violation, and a body that got this far has only known
// keys, so the work is bounded by the destination type, not the body size.
func checkStrictKeys(b []byte, t reflect.Type) error {
	w := strictWalker{dec: json.NewDecoder(bytes.NewReader(b))}
	return w.value(shapeOf(t))
}

// shapeKind is what a JSON value decoding into a Go type may look like.
type shapeKind uint8

const (
	shapeLeaf   shapeKind = iota // skipped unread
	shapeStruct                  // object of exactly the listed field names
	shapeMap                     // object of any keys, values of shape elem
	shapeList                    // array of values of shape elem
	shapeAny                     // any JSON; objects checked for duplicates only
)

// shape is the cached, type-derived description checkStrictKeys walks.
type shape struct {
	kind   shapeKind
	names  map[string]int // shapeStruct: JSON name -> index in fields
	fields []*shape       // shapeStruct: the shape of each named field's value
	elem   *shape         // shapeMap, shapeList
}

var (
	leafShape = &shape{kind: shapeLeaf}
	anyShape  = &shape{kind: shapeAny}

	shapeCache sync.Map // reflect.Type -> *shape

	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shapeOf returns the (cached) shape of t.
func shapeOf(t reflect.Type) *shape {
	if s, ok := shapeCache.Load(t); ok {
		return s.(*shape)
	}
	s := buildShape(t, map[reflect.Type]*shape{})
	actual, _ := shapeCache.LoadOrStore(t, s)
	return actual.(*shape)
}

// buildShape derives t's shape. inProgress holds the shapes being built on
// the current path, so recursive types (type Node struct{ Kids []Node })
// refer to themselves instead of recursing forever.
func buildShape(t reflect.Type, inProgress map[reflect.Type]*shape) *shape {
	for t.Kind() == reflect.Pointer {
		if implementsUnmarshaler(t) {
			return leafShape
		}
		t = t.Elem()
	}
	if implementsUnmarshaler(t) {
		return leafShape
	}
	if s, ok := inProgress[t]; ok {
		return s
	}
	switch t.Kind() {
	case reflect.Interface:
		return anyShape
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && !implementsUnmarshaler(t.Elem()) {
			return leafShape // []byte is a base64 string
		}
		s := &shape{kind: shapeList}
		inProgress[t] = s
		s.elem = buildShape(t.Elem(), inProgress)
		return s
	case reflect.Map:
		s := &shape{kind: shapeMap}
		inProgress[t] = s
		s.elem = buildShape(t.Elem(), inProgress)
		return s
	case reflect.Struct:
		s := &shape{kind: shapeStruct, names: map[string]int{}}
		inProgress[t] = s
		var depths []int  // per field: embedding depth it was found at
		var tagged []bool // per field: its name came from a tag
		var add func(st reflect.Type, depth int, path map[reflect.Type]bool)
		add = func(st reflect.Type, depth int, path map[reflect.Type]bool) {
			for i := 0; i < st.NumField(); i++ {
				sf := st.Field(i)
				ft := sf.Type
				if sf.Anonymous {
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				if !validTagName(name) {
					name = ""
				}
				if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
					if !path[ft] { // encoding/json ignores a cycle of embeddings too
						path[ft] = true
						add(ft, depth+1, path)
						delete(path, ft)
					}
					continue
				}
				isTagged := name != ""
				if name == "" {
					name = sf.Name
				}
				// Shallower fields hide deeper ones; at equal depth a tagged
				// one wins. (An ambiguity encoding/json resolves by dropping
				// the name altogether was already refused by its
				// DisallowUnknownFields, so keeping one of them here is moot.)
				if j, ok := s.names[name]; ok {
					if depths[j] < depth || (depths[j] == depth && (tagged[j] || !isTagged)) {
						continue
					}
					s.fields[j] = buildShape(sf.Type, inProgress)
					depths[j], tagged[j] = depth, isTagged
					continue
				}
				s.names[name] = len(s.fields)
				s.fields = append(s.fields, buildShape(sf.Type, inProgress))
				depths = append(depths, depth)
				tagged = append(tagged, isTagged)
			}
		}
		add(t, 0, map[reflect.Type]bool{t: true})
		return s
	}
	return leafShape
}

func implementsUnmarshaler(t reflect.Type) bool {
	if t.Implements(jsonUnmarshalerType) || t.Implements(textUnmarshalerType) {
		return true
	}
	if t.Kind() != reflect.Pointer {
		p := reflect.PointerTo(t)
		return p.Implements(jsonUnmarshalerType) || p.Implements(textUnmarshalerType)
	}
	return false
}

// validTagName reports whether encoding/json would use name from a tag (it
// falls back to the Go field name otherwise); a copy of its isValidTag.
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// skipValue consumes one JSON value through Decoder.Decode without building
// anything (cheaper than Token, which also allocates the string or number).
type skipValue struct{}

func (*skipValue) UnmarshalJSON([]byte) error { return nil }

var errStrictShape = errors.New("strict key check: JSON does not match the decoded type")

type strictWalker struct {
	dec  *json.Decoder
	skip skipValue
}

// value walks one JSON value of shape s.
func (w *strictWalker) value(s *shape) error {
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
func (w *strictWalker) structObject(s *shape) error {
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
func (w *strictWalker) keyedObject(elem *shape) error {
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
func (w *strictWalker) anyValue() error {
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
func (w *strictWalker) key() (string, error) {
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
