// Package apischema derives JSON Schema (draft 2020-12, the dialect of
// OpenAPI 3.1 and of MCP tool schemas) from the admin API's wire types by
// reflection, following encoding/json's rules for names, omitempty, "-"
// and embedded structs (docs/operations.md, "MCP server"), with the
// constraints a field's `schema` tag declares (Rules), which Check
// enforces on a decoded request (docs/operations.md, "OpenAPI").
package apischema

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"time"
)

// Schema is one JSON Schema object, ready to marshal.
type Schema = map[string]any

// Mode says which side of the wire a schema describes.
type Mode int

const (
	// Request: what a client sends, decoded strictly by the daemon
	// (docs/operations.md, "Admin API": unknown keys refused), so objects
	// carry additionalProperties false; a field is required, and its
	// value constrained, only as its `schema` tag says (Rules; an absent
	// field is its zero value).
	Request Mode = iota
	// Response: what the daemon answers; every field without omitempty is
	// always present, so it is required, and a pointer, slice, map or
	// interface field without omitempty may be present as null (what
	// encoding/json writes for nil), so its type admits "null".
	Response
)

var (
	timeType      = reflect.TypeFor[time.Time]()
	durationType  = reflect.TypeFor[time.Duration]()
	rawType       = reflect.TypeFor[json.RawMessage]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

// For returns the schema of t's JSON form in mode m, every type inline (an
// MCP tool's input schema stands alone). A recursive type is cut at its
// second appearance on a path with an unconstrained schema.
func For(t reflect.Type, m Mode) Schema {
	return schemaOf(t, m, map[reflect.Type]bool{}, nil)
}

// Components collects the schemas of named struct types so that a document
// describing many operations (OpenAPI's components/schemas) holds each
// once and refers to it with $ref. The zero value is not usable: use
// NewComponents.
type Components struct {
	// Schemas maps a component name to its schema: the Go type's name for
	// a response, with "Input" appended for a request (the two modes
	// differ in required and additionalProperties).
	Schemas map[string]Schema
	names   map[componentKey]string
	owner   map[string]componentKey
}

type componentKey struct {
	t reflect.Type
	m Mode
}

// NewComponents returns an empty collection.
func NewComponents() *Components {
	return &Components{Schemas: map[string]Schema{}, names: map[componentKey]string{}, owner: map[string]componentKey{}}
}

// For returns the schema of t's JSON form in mode m with every named
// struct type replaced by {"$ref": "#/components/schemas/<name>"} and its
// schema added to c.Schemas. Recursive types refer to themselves.
func (c *Components) For(t reflect.Type, m Mode) Schema {
	return schemaOf(t, m, map[reflect.Type]bool{}, c)
}

// ref returns the $ref for named struct type t in mode m, building its
// component the first time.
func (c *Components) ref(t reflect.Type, m Mode, visiting map[reflect.Type]bool) Schema {
	k := componentKey{t, m}
	name, ok := c.names[k]
	if !ok {
		name = t.Name()
		if m == Request {
			name += "Input"
		}
		if _, taken := c.owner[name]; taken {
			// Two packages with the same type name: qualify the later.
			pkg := t.PkgPath()
			pkg = pkg[strings.LastIndex(pkg, "/")+1:]
			name = strings.ToUpper(pkg[:1]) + pkg[1:] + name
		}
		c.names[k], c.owner[name] = name, k
		c.Schemas[name] = Schema{} // placeholder while a recursive type is built
		c.Schemas[name] = structSchema(t, m, visiting, c)
	}
	return Schema{"$ref": "#/components/schemas/" + name}
}

func schemaOf(t reflect.Type, m Mode, visiting map[reflect.Type]bool, c *Components) Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case timeType:
		return Schema{"type": "string", "format": "date-time"}
	case durationType:
		return Schema{"type": "integer", "format": "int64", "description": "nanoseconds"}
	case rawType:
		return Schema{}
	}
	if t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) {
		return Schema{}
	}
	if t.Implements(textType) || reflect.PointerTo(t).Implements(textType) {
		return Schema{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return Schema{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return integerSchema(t.Kind())
	case reflect.Float32, reflect.Float64:
		return Schema{"type": "number"}
	case reflect.String:
		return Schema{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return Schema{"type": "string", "contentEncoding": "base64"}
		}
		return Schema{"type": "array", "items": schemaOf(t.Elem(), m, visiting, c)}
	case reflect.Map:
		return Schema{"type": "object", "additionalProperties": schemaOf(t.Elem(), m, visiting, c)}
	case reflect.Struct:
		if c != nil && t.Name() != "" {
			return c.ref(t, m, visiting)
		}
		if visiting[t] {
			return Schema{}
		}
		return structSchema(t, m, visiting, c)
	}
	return Schema{}
}

// structSchema is struct type t's object schema in mode m.
func structSchema(t reflect.Type, m Mode, visiting map[reflect.Type]bool, c *Components) Schema {
	visiting[t] = true
	defer delete(visiting, t)
	props := Schema{}
	var required []string
	for _, f := range Fields(t) {
		fs := schemaOf(f.Type, m, visiting, c)
		if f.Rules.Object && f.Type == rawType {
			fs = Schema{"type": "object"}
		}
		if m == Response && f.Nullable {
			fs = orNull(fs)
		}
		if m == Request {
			fs = constrained(fs, f.Rules)
		}
		props[f.Name] = fs
		if (m == Response && !f.OmitEmpty) || (m == Request && f.Rules.Required) {
			required = append(required, f.Name)
		}
	}
	s := Schema{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	if m == Request {
		s["additionalProperties"] = false
	}
	return s
}

// constrained is s with rules' keywords: on s itself for a scalar, on
// its items for an array (a tag on a slice field constrains each element);
// a $ref or a schema without a type is left as it is.
func constrained(s Schema, rules Rules) Schema {
	if _, ok := s["type"]; !ok {
		return s
	}
	out := make(Schema, len(s))
	for k, v := range s {
		out[k] = v
	}
	if out["type"] == "array" {
		if items, ok := out["items"].(Schema); ok {
			out["items"] = constrained(items, rules.items())
			if rules.MinItems > 0 {
				out["minItems"] = rules.MinItems
			}
			if rules.MaxItems > 0 {
				out["maxItems"] = rules.MaxItems
			}
			if rules.UniqueItems {
				out["uniqueItems"] = true
			}
		}
		return out
	}
	rules.apply(out)
	return out
}

// orNull widens s to admit null: anyOf s and {"type": "null"}, each
// branch with a single type, for a $ref and a typed schema alike. A type
// array ([type, "null"]) says the same in JSON Schema, but clients that map
// tool schemas onto a single-type dialect reject or drop it (the MCP
// inspector's portability check; docs/operations.md, "MCP server"). A
// schema without a type (any value) already admits null.
func orNull(s Schema) Schema {
	if _, ok := s["$ref"]; !ok {
		if _, ok := s["type"].(string); !ok {
			return s
		}
	}
	return Schema{"anyOf": []any{s, Schema{"type": "null"}}}
}

// Field is one JSON field of a struct type.
type Field struct {
	// Name is the JSON key.
	Name string
	// Type is the field's Go type.
	Type reflect.Type
	// OmitEmpty is true when the key may be absent from the JSON: the tag
	// says omitempty or omitzero. In a response a key without it is
	// always present.
	OmitEmpty bool
	// Nullable is true when encoding/json writes null for the field's
	// zero value and the tag does not omit it: a pointer, slice, map or
	// interface without omitempty/omitzero.
	Nullable bool
	// Index is the field's index sequence for reflect.Value.FieldByIndex
	// (through flattened embedded structs).
	Index []int
	// Rules are the constraints of the field's `schema` tag.
	Rules Rules
}

// Fields lists the JSON fields of struct type t in declaration order, as
// encoding/json sees them: unexported and `json:"-"` fields (path and
// query parameters among them) are left out, untagged embedded structs are
// flattened.
func Fields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for _, inner := range Fields(ft) {
					inner.Index = append([]int{i}, inner.Index...)
					out = append(out, inner)
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")
		nullable := false
		switch f.Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			nullable = !omit && f.Type != rawType
		}
		out = append(out, Field{Name: name, Type: f.Type, OmitEmpty: omit, Nullable: nullable, Index: []int{i}, Rules: RulesOf(f.Tag)})
	}
	return out
}

// integerSchema is the schema of a Go integer kind, with the OpenAPI
// format that bounds it where one does (docs/operations.md, "OpenAPI"):
// int32 for the kinds within 32 signed bits, int64 for int, int64 and
// uint32; uint and uint64 reach beyond int64 and have no format.
func integerSchema(k reflect.Kind) Schema {
	switch k {
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16:
		return Schema{"type": "integer", "format": "int32"}
	case reflect.Uint, reflect.Uint64:
		return Schema{"type": "integer"}
	}
	return Schema{"type": "integer", "format": "int64"}
}
