package strictjson

import (
	"encoding"
	"encoding/json"
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

// checkStrictKeys walks the first JSON value of b against the shape of t,
// the type the value was decoded into, and returns a *strictKeyError for the
// first object key that
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
// Decode does): it relies on that for well-formedness and for the kinds
// of the values matching t (a null is accepted anywhere), and it reads only
// the first JSON value of b. Any other error it returns (a syntax error)
// would mean that precondition was broken.
//
// Cost: one pass over the bytes (scan.go), no allocation unless a key holds
// an escape or a non-ASCII byte (it is then unquoted exactly as encoding/json
// does) or a map or interface object has more than eight keys. The shape of
// t is computed once and cached. An earlier version walked
// json.Decoder.Token and cost about 150 allocations and two to three times
// the decode itself per heartbeat (BenchmarkDecodeHeartbeat).
func checkStrictKeys(b []byte, t reflect.Type) error {
	sc := scanner{b: b}
	return sc.value(shapeOf(t))
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
